"""Offset stores: increase-only memory table, Java offsets.json file with .bak."""

from __future__ import annotations

import pytest

from airflow_provider_rocketmq.client.consumer.offset_store import (
    LocalFileOffsetStore,
    ReadOffsetType,
    decode_offsets,
    encode_offsets,
    offsets_file_path,
)
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue

MQ0 = MessageQueue("T", "broker-a", 0)
MQ1 = MessageQueue("T", "broker-a", 1)


def test_offsets_json_is_java_format_and_round_trips():
    text = encode_offsets({MQ1: 7, MQ0: 42})
    # fastjson PrettyFormat: tab indentation, MessageQueue objects inline as map keys, sorted queues
    assert text.startswith('{\n\t"offsetTable":{')
    assert '"brokerName":"broker-a",' in text and "}:42," in text and text.rstrip().endswith("}:7\n\t}\n}")
    assert text.index('"queueId":0') < text.index('"queueId":1')
    assert decode_offsets(text) == {MQ0: 42, MQ1: 7}


def test_decode_compact_java_form():
    text = '{"offsetTable":{{"brokerName":"b","queueId":3,"topic":"T"}:11}}'
    assert decode_offsets(text) == {MessageQueue("T", "b", 3): 11}


async def test_local_store_persist_load_increase_only_and_bak(tmp_path):
    store = LocalFileOffsetStore(str(tmp_path), "10.0.0.1@i", "g")
    assert store.path == offsets_file_path(str(tmp_path), "10.0.0.1@i", "g")
    assert str(store.path).endswith("10.0.0.1@i/g/offsets.json")
    store.update_offset(MQ0, 10)
    store.update_offset(MQ0, 5)  # stale result: ignored
    store.update_offset(MQ1, 3)
    await store.persist_all([MQ0, MQ1])
    store.update_offset(MQ0, 12)
    await store.persist_all([MQ0, MQ1])
    assert decode_offsets(store.path.read_text()) == {MQ0: 12, MQ1: 3}
    assert decode_offsets((tmp_path / "10.0.0.1@i/g/offsets.json.bak").read_text()) == {MQ0: 10, MQ1: 3}

    fresh = LocalFileOffsetStore(str(tmp_path), "10.0.0.1@i", "g")
    await fresh.load()
    assert await fresh.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == 12
    assert await fresh.read_offset(MessageQueue("T", "broker-a", 9), ReadOffsetType.READ_FROM_STORE) == -1


async def test_corrupt_file_falls_back_to_bak(tmp_path):
    store = LocalFileOffsetStore(str(tmp_path), "c", "g")
    store.update_offset(MQ0, 1)
    await store.persist_all([MQ0])
    store.update_offset(MQ0, 2)
    await store.persist_all([MQ0])
    store.path.write_text('{"offsetTable":{{"brokerName":')  # torn write
    fresh = LocalFileOffsetStore(str(tmp_path), "c", "g")
    await fresh.load()
    assert fresh.memory_offset(MQ0) == 1


async def test_disabled_commit_writes_nothing(tmp_path):
    store = LocalFileOffsetStore(str(tmp_path), "c", "g", enable_commit=False)
    store.update_offset(MQ0, 1)
    await store.persist_all([MQ0])
    assert not store.path.exists()


@pytest.mark.parametrize("bad", ['[]', '{"offsetTable":[1]}', '{"offsetTable":{{"topic":"T"}:1}}'])
def test_malformed_offsets_file_raises_protocol_error(bad):
    from airflow_provider_rocketmq.client.protocol.errors import ProtocolError
    with pytest.raises(ProtocolError):
        decode_offsets(bad)
