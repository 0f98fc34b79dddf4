"""Pipelined sends (`send_many`) and the synchronous fast path of `Producer.send`, against the embedded
broker: what the broker stores, in which order, how many requests it saw at once, and what each
message's outcome says."""

from __future__ import annotations

import asyncio
import os
import threading
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_rocketmq.client.config import ClientConfig
from airflow_provider_rocketmq.client.producer import AsyncProducer, Producer
from airflow_provider_rocketmq.client.producer.message_id import new_uniq_id
from airflow_provider_rocketmq.client.producer.pipeline import PipelineOptions, SendAbortedError, SendOutcome
from airflow_provider_rocketmq.client.protocol.errors import BrokerError, ConfigError, RequestTimeoutError
from airflow_provider_rocketmq.client.protocol.message import Message, MessageExt, string_to_properties
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from airflow_provider_rocketmq.client.protocol.send_wire import (
    SendFrameRenderer,
    SendResult,
    build_send_request,
    prepared,
    select_by_key,
)
from airflow_provider_rocketmq.embedded import EmbeddedCluster

pytestmark = pytest.mark.timeout(120)
SEND, SEND_BATCH = 310, 320


def stored_by_position(cluster: EmbeddedCluster, topic: str) -> dict[tuple[str, int, int], MessageExt]:
    return {(m.broker_name, m.queue_id, m.queue_offset): m for m in cluster.messages(topic)}


def queue_bodies(cluster: EmbeddedCluster, topic: str) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = defaultdict(list)
    for m in sorted(cluster.messages(topic), key=lambda m: (m.queue_id, m.queue_offset)):
        out[m.queue_id].append(m.body)
    return out


def check_results(cluster: EmbeddedCluster, topic: str, outcomes: list[SendOutcome]) -> None:
    """Every successful outcome names where its own message is stored."""
    stored = stored_by_position(cluster, topic)
    for o in outcomes:
        assert o.result is not None, o
        r = o.result
        m = stored[(r.queue.broker_name, r.queue.queue_id, r.queue_offset)]
        assert m.body == o.message.body
        assert m.properties["UNIQ_KEY"] == r.msg_id and m.msg_id == r.msg_id
        assert m.offset_msg_id == r.offset_msg_id and r.status == "SEND_OK"


# -- order per key ---------------------------------------------------------------------------

@pytest.mark.parametrize("max_batch", [1, 8])
def test_keyed_messages_are_stored_in_order_through_refused_sends(embedded_cluster: EmbeddedCluster,
                                                                  max_batch: int) -> None:
    """Busy answers (nothing stored, so retried) must not let a key's later message overtake."""
    cluster = embedded_cluster
    cluster.create_topic("PipeOrder", 4)
    keys = [f"customer-{k}" for k in range(6)]
    items = [(Message("PipeOrder", f"{keys[i % 6]}#{i // 6:04d}"), keys[i % 6]) for i in range(600)]
    cluster.system_busy(SEND if max_batch == 1 else SEND_BATCH, times=8)
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr), "pipe_order", retry_times=16) as p:
        outcomes = list(p.send_many(items, max_in_flight=32, max_batch=max_batch))
        queues = p.publish_queues("PipeOrder")
    assert [o.index for o in outcomes] == list(range(600)) and all(o.ok for o in outcomes)
    assert cluster.brokers[0].faults.rules() == []  # every refusal was used
    check_results(cluster, "PipeOrder", outcomes)
    by_queue = queue_bodies(cluster, "PipeOrder")
    assert sum(len(v) for v in by_queue.values()) == 600  # each stored once
    for key in keys:
        qid = select_by_key(queues, key).queue_id
        mine = [b.decode() for b in by_queue[qid] if b.decode().startswith(key + "#")]
        assert mine == [f"{key}#{n:04d}" for n in range(100)]


def test_a_key_whose_send_fails_sends_nothing_more_and_other_keys_go_on(embedded_cluster: EmbeddedCluster) -> None:
    cluster = embedded_cluster
    cluster.create_topic("PipeBroken", 4)
    cluster.brokers[0].settings.max_message_size = 5000  # a broker with a smaller maxMessageSize
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr), "pipe_broken") as p:
        queues = p.publish_queues("PipeBroken")
        a, b = "key-a", next(k for k in (f"key-{i}" for i in range(100))
                             if select_by_key(queues, k) != select_by_key(queues, "key-a"))
        items: list[tuple[Message, str]] = []
        for i in range(30):
            items.append((Message("PipeBroken", os.urandom(6000) if i == 10 else f"a{i}".encode()), a))
            items.append((Message("PipeBroken", f"b{i}"), b))
        outcomes = list(p.send_many(items, max_in_flight=8, stop_on_error=False))
    a_out = outcomes[0::2]
    assert all(o.ok for o in a_out[:10])
    err = a_out[10].error
    assert isinstance(err, BrokerError) and err.code == 13  # MESSAGE_ILLEGAL: not retried
    assert all(isinstance(o.error, SendAbortedError) and o.error.cause is err for o in a_out[11:])
    assert all(o.ok for o in outcomes[1::2])
    bodies = queue_bodies(cluster, "PipeBroken")
    assert bodies[select_by_key(queues, a).queue_id] == [f"a{i}".encode() for i in range(10)]
    assert bodies[select_by_key(queues, b).queue_id] == [f"b{i}".encode() for i in range(30)]


# -- a result per message ---------------------------------------------------------------------

@pytest.mark.parametrize("max_batch", [1, 8])
def test_every_message_gets_its_own_result(embedded_cluster: EmbeddedCluster, max_batch: int) -> None:
    cluster = embedded_cluster
    big = bytes(range(256)) * 20  # 5120 bytes: compressed, and always sent alone
    msgs = [Message("PipeResults", f"m{i}", tags="TagA", keys=f"k{i}", properties={"n": str(i), "note": "值"})
            for i in range(100)]
    msgs[37] = Message("PipeResults", big)
    msgs[38] = Message("PipeResults", big, tags="Big")
    msgs[50] = Message("PipeResults", "later", delay_level=18)  # parked for 2 h: never in a batch
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr), "pipe_results") as p:
        outcomes = list(p.send_many(msgs, max_in_flight=16, max_batch=max_batch))
    assert [o.message for o in outcomes] == msgs and [o.index for o in outcomes] == list(range(100))
    delayed = outcomes.pop(50)
    assert delayed.ok and [m.body for m in cluster.messages("SCHEDULE_TOPIC_XXXX")] == [b"later"]
    assert sum(o.request == delayed.request for o in outcomes) == 0
    check_results(cluster, "PipeResults", outcomes)
    stored = stored_by_position(cluster, "PipeResults")
    got = {m.body: m for m in stored.values()}
    assert got[b"m5"].tags == "TagA" and got[b"m5"].keys == "k5" and got[b"m5"].properties["note"] == "值"
    assert got[big].body == big  # compressed on the wire, given back whole
    requests: dict[int, list[SendResult]] = defaultdict(list)
    for o in outcomes:
        assert o.request is not None and o.result is not None
        requests[o.request].append(o.result)
    assert len(requests[outcomes[37].request or 0]) == len(requests[outcomes[38].request or 0]) == 1
    for results in requests.values():  # a batch: one queue, consecutive offsets
        assert len({r.queue for r in results}) == 1
        assert [r.queue_offset for r in results] == list(range(results[0].queue_offset,
                                                                results[0].queue_offset + len(results)))
    if max_batch == 1:
        assert len(requests) == 99
    else:
        assert len(requests) < 99 and max(len(v) for v in requests.values()) <= max_batch


def test_outcomes_answered_early_wait_for_the_earlier_ones(embedded_cluster: EmbeddedCluster) -> None:
    """The first batch's answer is held back 0.3 s, the later batches are answered at once: their
    outcomes are handed out after the first batch's, each naming its own stored message."""
    cluster = embedded_cluster
    cluster.create_topic("PipeLate", 4)
    cluster.delay_responses(SEND_BATCH, 0.3, times=1)
    msgs = [Message("PipeLate", f"late{i}") for i in range(40)]
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr), "pipe_late") as p:
        outcomes = list(p.send_many(msgs, max_in_flight=10, max_batch=4))
    assert cluster.brokers[0].faults.rules() == []  # the delay was used
    assert [o.index for o in outcomes] == list(range(40)) and [o.message for o in outcomes] == msgs
    assert len({o.request for o in outcomes}) == 10
    check_results(cluster, "PipeLate", outcomes)
    assert all(o.result is o.result for o in outcomes)  # made once


def test_a_chunk_spanning_topics_loads_each_route_and_keeps_the_order(embedded_cluster: EmbeddedCluster) -> None:
    cluster = embedded_cluster
    for t in ("PipeMixA", "PipeMixB", "PipeMixC"):
        cluster.create_topic(t, 2)
    topics = ["PipeMixA"] * 5 + ["PipeMixB", "PipeMixA", "PipeMixC"] * 20
    msgs = [Message(t, f"{t}-{i}") for i, t in enumerate(topics)]
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr), "pipe_mix") as p:
        outcomes = list(p.send_many(msgs, max_batch=8))
    assert [o.message for o in outcomes] == msgs and all(o.ok for o in outcomes)
    for t in ("PipeMixA", "PipeMixB", "PipeMixC"):
        mine = [o for o in outcomes if o.message.topic == t]
        check_results(cluster, t, mine)
        assert len(cluster.messages(t)) == len(mine)
    for o in outcomes:  # a batch never mixes topics
        assert o.result is not None and o.result.queue.topic == o.message.topic


def test_a_message_with_too_long_properties_ends_the_run_after_the_ones_before(
        embedded_cluster: EmbeddedCluster) -> None:
    cluster = embedded_cluster
    msgs = [Message("PipeLongProps", f"p{i}", tags="T") for i in range(5)]
    msgs.append(Message("PipeLongProps", "too long", properties={"big": "x" * 40_000}))
    msgs.append(Message("PipeLongProps", "never"))
    seen: list[SendOutcome] = []
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr), "pipe_long") as p, \
            pytest.raises(ConfigError) as info:
        seen.extend(p.send_many(msgs, max_batch=4))
    assert info.value.field == "properties"
    assert [o.message for o in seen] == msgs[:5] and all(o.ok for o in seen)
    assert sorted(m.body for m in cluster.messages("PipeLongProps")) == [f"p{i}".encode() for i in range(5)]


def test_async_send_many_from_an_async_source(embedded_cluster: EmbeddedCluster) -> None:
    cluster = embedded_cluster

    async def source() -> Any:
        for i in range(50):
            if i % 10 == 0:
                await asyncio.sleep(0)
            yield Message("PipeAsync", f"x{i}"), "one-key"

    async def go() -> list[SendOutcome]:
        async with AsyncProducer(ClientConfig(namesrv_addr=cluster.namesrv_addr), "pipe_async") as p:
            return [o async for o in p.send_many(source(), max_in_flight=4, max_batch=4)]

    outcomes = asyncio.run(go())
    assert [o.index for o in outcomes] == list(range(50)) and all(o.ok for o in outcomes)
    (bodies,) = queue_bodies(cluster, "PipeAsync").values()
    assert bodies == [f"x{i}".encode() for i in range(50)]


# -- bounded ---------------------------------------------------------------------------------

@pytest.mark.parametrize("max_in_flight,max_batch,keys", [(6, 1, 0), (3, 5, 0), (2, 4, 3)])
def test_never_more_requests_in_flight_than_allowed(embedded_cluster: EmbeddedCluster, max_in_flight: int,
                                                    max_batch: int, keys: int) -> None:
    """Every answer is held back 0.2 s: the most the broker holds at once is the client's requests in flight."""
    cluster = embedded_cluster
    topic = f"PipeBound{max_in_flight}x{max_batch}"
    cluster.create_topic(topic, 4)
    n = 5 * max_in_flight * max_batch
    items = [(Message(topic, f"{i:03d}"), f"k{i % keys}" if keys else None) for i in range(n)]
    faults = cluster.brokers[0].faults
    cluster.delay_responses(SEND, 0.2)
    cluster.delay_responses(SEND_BATCH, 0.2)
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr), "pipe_bound") as p:
        outcomes = list(p.send_many(items, max_in_flight=max_in_flight, max_batch=max_batch))
    assert all(o.ok for o in outcomes) and len(cluster.messages(topic)) == n
    assert faults.delayed_peak == min(max_in_flight, keys or max_in_flight)
    assert max(sum(1 for o in outcomes if o.request == r) for r in {o.request for o in outcomes}) <= max_batch


def test_no_more_messages_accepted_than_fit_in_flight(embedded_cluster: EmbeddedCluster) -> None:
    """``max_in_flight * max_batch`` messages accepted and unanswered at most: the source is read no further."""
    cluster = embedded_cluster
    cluster.create_topic("PipeRoom", 2)
    cluster.delay_responses(SEND_BATCH, 0.3)

    async def go() -> tuple[list[bool], int]:
        async with AsyncProducer(ClientConfig(namesrv_addr=cluster.namesrv_addr), "pipe_room") as p:
            await p.publish_queues("PipeRoom")
            pipe = p.pipeline(max_in_flight=2, max_batch=3)
            await pipe.put(Message("PipeRoom", "first"))  # loads the route
            taken = [pipe.offer(Message("PipeRoom", f"m{i}")) for i in range(6)]
            outstanding = pipe.outstanding
            await pipe.put(Message("PipeRoom", "waits for room"))
            outcomes = await pipe.finish()
            await pipe.close()
            assert len(outcomes) == 7 and all(o.ok for o in outcomes)  # first, five taken, the waiting one
            return taken, outstanding

    taken, outstanding = asyncio.run(go())
    assert taken == [True] * 5 + [False] and outstanding == 6


# -- failures ----------------------------------------------------------------------------------

def test_first_failure_stops_the_run(embedded_cluster: EmbeddedCluster) -> None:
    cluster = embedded_cluster
    cluster.create_topic("PipeStop", 4)
    cluster.brokers[0].settings.max_message_size = 5000
    msgs = [Message("PipeStop", os.urandom(6000) if i == 20 else f"s{i}".encode()) for i in range(60)]
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr), "pipe_stop") as p:
        outcomes = list(p.send_many(msgs, max_in_flight=4))
    assert len(outcomes) < 60  # the source is not read further once the run stopped
    assert [o.index for o in outcomes] == list(range(len(outcomes)))
    assert all(o.ok for o in outcomes[:20])
    err = outcomes[20].error
    assert isinstance(err, BrokerError) and err.code == 13  # MESSAGE_ILLEGAL: not retried
    after = outcomes[21:]
    sent_after = [o for o in after if o.ok]
    assert after[:len(sent_after)] == sent_after and len(sent_after) <= 3  # only what was in flight with it
    assert all(isinstance(o.error, SendAbortedError) and o.error.cause is err for o in after[len(sent_after):])
    assert len(cluster.messages("PipeStop")) == sum(o.ok for o in outcomes)


def test_a_bad_item_or_a_failing_source_ends_the_run_after_what_came_before(
        embedded_cluster: EmbeddedCluster) -> None:
    cluster = embedded_cluster

    def source(fail: BaseException) -> Iterator[Message]:
        for i in range(7):
            yield Message("PipeSource", f"v{i}")
        raise fail

    seen: list[SendOutcome] = []
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr), "pipe_source") as p:
        with pytest.raises(LookupError, match="no more rows"):
            seen.extend(p.send_many(source(LookupError("no more rows"))))
        assert len(seen) == 7 and all(o.ok for o in seen)
        bad = [Message("PipeSource", "fine"), Message("PipeSource", b"")]
        with pytest.raises(ConfigError) as info:
            list(p.send_many(bad))
        assert info.value.field == "body"
        with pytest.raises(ConfigError) as info:
            list(p.send_many([(Message("PipeSource", "x"), 42)]))  # type: ignore[list-item]
        assert info.value.field == "key"
    assert sorted(m.body for m in cluster.messages("PipeSource")) == sorted(
        [f"v{i}".encode() for i in range(7)] + [b"fine"])


def test_a_lost_connection_fails_what_was_in_flight_without_resending(embedded_cluster: EmbeddedCluster) -> None:
    cluster = embedded_cluster
    cluster.create_topic("PipeLost", 2)
    cluster.drop_responses(SEND, times=None)  # stored, never answered

    async def go() -> list[SendOutcome]:
        async with AsyncProducer(ClientConfig(namesrv_addr=cluster.namesrv_addr), "pipe_lost") as p:
            msgs = [Message("PipeLost", f"l{i}") for i in range(10)]
            got: list[SendOutcome] = []
            task = asyncio.ensure_future(_collect(p.send_many(msgs, max_in_flight=10, stop_on_error=False), got))
            await wait_until(lambda: len(cluster.messages("PipeLost")) == 10)  # all stored, none answered
            await cluster.close_client_connections(None)
            await task
            return got

    outcomes = asyncio.run(go())
    assert len(outcomes) == 10
    assert all(o.error is not None and "closed" in str(o.error) for o in outcomes)
    assert len(cluster.messages("PipeLost")) == 10  # not sent again


async def wait_until(cond: Any, timeout: float = 10.0) -> None:
    """Until ``cond()`` holds: the broker's store has no event to await."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def _collect(agen: Any, into: list[SendOutcome]) -> None:
    async for o in agen:
        into.append(o)


# -- configuration -------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,field", [
    ({"max_in_flight": 0}, "max_in_flight"), ({"max_in_flight": 5000}, "max_in_flight"),
    ({"max_in_flight": True}, "max_in_flight"), ({"max_in_flight": "8"}, "max_in_flight"),
    ({"max_batch": 0}, "max_batch"), ({"max_batch": 1025}, "max_batch"), ({"max_batch": 2.0}, "max_batch"),
    ({"stop_on_error": "yes"}, "stop_on_error"),
])
def test_bad_pipeline_options_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        PipelineOptions(**kwargs)
    assert info.value.field == field


def test_bad_options_of_send_many_and_the_producer_name_the_field(embedded_cluster: EmbeddedCluster) -> None:
    cfg = ClientConfig(namesrv_addr=embedded_cluster.namesrv_addr)
    for timeout in (0, -1, 601, "3"):
        with pytest.raises(ConfigError) as info:
            AsyncProducer(cfg, send_timeout=timeout)  # type: ignore[arg-type]
        assert info.value.field == "send_timeout"
    with Producer(cfg, "pipe_cfg") as p:
        with pytest.raises(ConfigError) as info:
            list(p.send_many([Message("PipeCfg", "x")], max_in_flight=0))
        assert info.value.field == "max_in_flight"
        with pytest.raises(ConfigError) as info:
            list(p.send_many([Message("PipeCfg", "x")], key=7))  # type: ignore[arg-type]
        assert info.value.field == "key"
    assert embedded_cluster.messages("PipeCfg") == []


# -- Producer.send's fast path -------------------------------------------------------------------

def test_sync_send_fast_path_results_retries_and_timeouts(embedded_cluster: EmbeddedCluster) -> None:
    cluster = embedded_cluster
    cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr)
    cluster.create_topic("PipeFast", 8)
    with Producer(cfg, "pipe_fast", send_timeout=0.5) as p:
        first = p.send(Message("PipeFast", "warm-up"))  # route + connection: the next sends take the fast path
        assert p._impl.fast_plan(Message("PipeFast", "probe"), None, None) is not None
        results = [p.send(Message("PipeFast", f"f{i}", tags="T")) for i in range(6)]
        keyed = [p.send(Message("PipeFast", f"k{i}"), key="same") for i in range(3)]
        pinned = p.send(Message("PipeFast", "pinned"), queue=MessageQueue("PipeFast", "broker-a", 5))
        stored = stored_by_position(cluster, "PipeFast")
        for r, body in [(first, b"warm-up"), *((r, f"f{i}".encode()) for i, r in enumerate(results)),
                        *((r, f"k{i}".encode()) for i, r in enumerate(keyed)), (pinned, b"pinned")]:
            m = stored[(r.queue.broker_name, r.queue.queue_id, r.queue_offset)]
            assert m.body == body and m.msg_id == r.msg_id and m.offset_msg_id == r.offset_msg_id
        assert len({r.queue for r in results}) == 6 and len({r.queue for r in keyed}) == 1
        assert pinned.queue.queue_id == 5

        cluster.system_busy(SEND, times=1)  # refused, nothing stored: sent again, same UNIQ_KEY
        busy = p.send(Message("PipeFast", "after-busy"))
        assert [m.msg_id for m in cluster.messages("PipeFast") if m.body == b"after-busy"] == [busy.msg_id]

        cluster.drop_responses(SEND, times=1)  # stored, answer lost: raised, not sent again
        with pytest.raises(RequestTimeoutError):
            p.send(Message("PipeFast", "lost-answer"))
        assert [m.body for m in cluster.messages("PipeFast")].count(b"lost-answer") == 1

        cluster.close_client_connections(None)
        again = p.send(Message("PipeFast", "reconnected"))  # the closed connection sends nothing; reopened
        assert stored_by_position(cluster, "PipeFast")[
            (again.queue.broker_name, again.queue.queue_id, again.queue_offset)].body == b"reconnected"
        with pytest.raises(ConfigError) as info:
            p.send(Message("PipeFast", b""))
        assert info.value.field == "body"


# -- the frame renderer --------------------------------------------------------------------------

@pytest.mark.parametrize("msg", [
    Message("T", b"plain"),
    Message("Orders-1", "body", tags="TagA", keys=["k1", "k2"], properties={"note": "值", "q": 'a"b\\c'}),
    Message("T", b"x", properties={"ctl": "tab\tnew\nline\x03"}, flag=7),
    Message("T", bytes(range(256)) * 20),  # compressed
    Message("ns%Topic", b"y", delay_level=3),
])
def test_rendered_frames_equal_the_reference_builder(msg: Message) -> None:
    renderer = SendFrameRenderer("grp-1", 4096)
    sent, uniq = prepared(msg, new_uniq_id)
    assert sent.properties["UNIQ_KEY"] == uniq and msg.properties.get("UNIQ_KEY") is None
    for mq in (MessageQueue(msg.topic, "broker-a", 0), MessageQueue(msg.topic, "broker-é", 13)):
        cmd = build_send_request(sent, mq, "grp-1", born_timestamp=1700000000123)
        cmd.opaque = 4242
        assert renderer.frame(sent, mq, 4242, 1700000000123) == cmd.encode()


def test_a_batch_result_splits_into_one_per_message() -> None:
    mq = MessageQueue("T", "broker-a", 2)
    r = SendResult("A,B,C", "X,Y,Z", mq, 10, "SEND_OK", "R")
    assert [(s.msg_id, s.offset_msg_id, s.queue_offset) for s in r.split(3)] == [("A", "X", 10), ("B", "Y", 11),
                                                                                  ("C", "Z", 12)]
    assert all(s.queue == mq and s.region == "R" for s in r.split(3))
    with pytest.raises(Exception, match="a batch of 2"):
        r.split(2)


def test_properties_of_a_send_are_what_the_message_carries() -> None:
    sent, uniq = prepared(Message("T", b"x", properties={"UNIQ_KEY": "FIXED", "WAIT": "false"}), new_uniq_id)
    assert uniq == "FIXED" and string_to_properties(SendFrameRenderer("g").properties(sent))["WAIT"] == "false"


def test_sync_sends_from_several_threads_share_the_producer(embedded_cluster: EmbeddedCluster) -> None:
    """One thread at a time uses the producer's blocking socket; the others go through its loop thread."""
    cluster = embedded_cluster
    cluster.create_topic("PipeThreads", 4)
    results: dict[int, list[SendResult]] = {}
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr), "pipe_threads") as p:
        p.send(Message("PipeThreads", "warm-up"))

        def worker(n: int) -> None:
            results[n] = [p.send(Message("PipeThreads", f"t{n}-{i}")) for i in range(100)]

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    stored = stored_by_position(cluster, "PipeThreads")
    assert len(stored) == 401
    for n, rs in results.items():
        for i, r in enumerate(rs):
            assert stored[(r.queue.broker_name, r.queue.queue_id, r.queue_offset)].body == f"t{n}-{i}".encode()


def test_results_built_on_the_fast_path_are_ordinary_send_results() -> None:
    mq = MessageQueue("T", "broker-a", 2)
    (r,) = SendResult("A", "X", mq, 10, "SEND_OK", "R").split(1)
    same = SendResult("A", "X", mq, 10, "SEND_OK", "R")
    assert r == same and hash(r) == hash(same) and repr(r) == repr(same) and r.to_dict() == same.to_dict()
    with pytest.raises(AttributeError):
        r.msg_id = "B"  # type: ignore[misc]  # frozen, like any SendResult


def test_a_namespace_applies_to_pipelined_and_fast_sends(embedded_cluster: EmbeddedCluster) -> None:
    cluster = embedded_cluster
    cluster.create_topic("ns1%PipeNs", 2)
    cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, namespace="ns1")
    with Producer(cfg, "pipe_ns") as p:
        outcomes = list(p.send_many([Message("PipeNs", f"n{i}") for i in range(10)], max_batch=4))
        single = p.send(Message("PipeNs", "single"))
        assert p._impl.fast_plan(Message("PipeNs", "probe"), None, None) is not None
    assert all(o.ok for o in outcomes)
    assert sorted(m.body for m in cluster.messages("ns1%PipeNs")) == sorted(
        [f"n{i}".encode() for i in range(10)] + [b"single"])
    assert cluster.messages("PipeNs") == [] and single.queue.topic == "ns1%PipeNs"
    check_results(cluster, "ns1%PipeNs", outcomes)
