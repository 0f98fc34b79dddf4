"""embedded.backlog.fill: a backlog written straight into the store reads back like sent messages."""

from __future__ import annotations

from airflow_provider_rocketmq.client.protocol.message import decode_messages, make_offset_msg_id
from airflow_provider_rocketmq.embedded import EmbeddedCluster
from airflow_provider_rocketmq.embedded.backlog import fill

from .rawclient import RawClient, pull_ext


async def test_a_filled_backlog_is_pulled_and_found_by_commit_log_offset() -> None:
    async with EmbeddedCluster(queues=2) as cluster:
        broker = cluster.brokers[0]
        broker.create_topic("BL", 2, 2)
        fill(broker, "BL", 5, 10, 2)  # queue 0 gets 3, queue 1 gets 2
        fill(broker, "BL", 2, 10, 2)  # appended after the first fill
        assert [broker.max_offset("BL", q) for q in (0, 1)] == [4, 3]
        c = await RawClient().connect(broker.addr)
        try:
            pulled = []
            for q in (0, 1):
                resp = await c.call(11, pull_ext("g", "BL", q, 0))
                assert resp.code == 0, resp.remark
                pulled += decode_messages(resp.body)
            assert [(m.queue_id, m.queue_offset) for m in pulled] == [(0, 0), (0, 1), (0, 2), (0, 3),
                                                                      (1, 0), (1, 1), (1, 2)]
            assert len({m.properties["UNIQ_KEY"] for m in pulled}) == 7
            for m in pulled:  # each record sits at its own commit-log offset (VIEW_MESSAGE_BY_ID)
                assert m.offset_msg_id == make_offset_msg_id(broker.addr, m.commit_log_offset)
                viewed = await c.call(33, {"offset": m.commit_log_offset})
                assert viewed.code == 0, viewed.remark
                (same,) = decode_messages(viewed.body)
                assert (same.queue_id, same.queue_offset) == (m.queue_id, m.queue_offset)
        finally:
            await c.close()
