"""Options of the rocketmq data source: what the user sees on bad input; secrets never shown."""

from __future__ import annotations

import pickle

import pytest

from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.spark.source.options import EARLIEST, LATEST, parse_options
from airflow_provider_rocketmq.spark.source.ranges import (
    QueueBounds,
    QueueSpan,
    apply_retention,
    initial_offset,
    limit_offsets,
    spans_between,
    spans_from_options,
    split_spans,
)

NS = "127.0.0.1:9876"
SECRETS = {"accessKey": "AK-very-private", "secretKey": "SK-very-private", "securityToken": "TOKEN-private"}


def _err(raw: dict[str, str], *, streaming: bool = False) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_options(raw, streaming=streaming)
    return info.value


def test_defaults_and_case_insensitive_names() -> None:
    # Spark lower-cases option keys; the canonical camelCase spelling works as well
    opts = parse_options({"namesrv": NS, "topic": "a, b,a", "MINPARTITIONS": "4", "failondataloss": "false"})
    assert opts.topics == ("a", "b")
    assert (opts.starting, opts.ending) == (EARLIEST, LATEST)
    assert opts.min_partitions == 4 and opts.fail_on_data_loss is False
    assert opts.tag_filter() is None
    assert parse_options({"namesrv": NS, "topic": "a", "expression": "TagA || TagB"}).tag_filter() == {"TagA", "TagB"}


@pytest.mark.parametrize(("raw", "field", "text"), [
    ({"topic": "a"}, "namesrv", "is required"),
    ({"namesrv": "nohost"}, "namesrv", "not host:port"),
    ({"namesrv": NS}, "topic", "is required"),
    ({"namesrv": NS, "topic": "bad topic"}, "topic", "may only contain"),
    ({"namesrv": NS, "topic": "a", "startingOffset": "earliest"}, "startingOffset", "unknown option"),
    ({"namesrv": NS, "topic": "a", "startingOffsets": "first"}, "startingOffsets", "'earliest', 'latest' or a JSON"),
    ({"namesrv": NS, "topic": "a", "startingOffsets": '{"b": {"broker-a:0": 1}}'}, "startingOffsets.b",
     "not among the read topics"),
    ({"namesrv": NS, "topic": "a", "startingOffsets": '{"a": {"broker-a": 1}}'}, "startingOffsets.a",
     "is not '<broker>:<queue_id>'"),
    ({"namesrv": NS, "topic": "a", "endingOffsets": '{"a": {"broker-a:0": -5}}'}, "endingOffsets.a.broker-a:0",
     "must be an offset >= 0"),
    ({"namesrv": NS, "topic": "a", "endingOffsets": "earliest"}, "endingOffsets", "not 'earliest'"),
    ({"namesrv": NS, "topic": "a", "endingOffsets": '{"a": {"broker-a:0": -2}}'}, "endingOffsets",
     "not a valid end offset"),
    ({"namesrv": NS, "topic": "a", "minPartitions": "0"}, "minPartitions", "must be in 1..inf"),
    ({"namesrv": NS, "topic": "a", "minPartitions": "many"}, "minPartitions", "must be an integer"),
    ({"namesrv": NS, "topic": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss", "true or false"),
    ({"namesrv": NS, "topic": "a", "requestTimeout": "0"}, "requestTimeout", "(0, 3600]"),
    ({"namesrv": NS, "topic": "a", "expression": "||"}, "expression", "names no tag"),
    ({"namesrv": NS, "topic": "a", "commitGroup": "g"}, "commitGroup", "streaming reads"),
    ({"namesrv": NS, "topic": "a", "maxOffsetsPerTrigger": "10"}, "maxOffsetsPerTrigger", "streaming reads only"),
    ({"namesrv": NS, "topic": "a", "pullBatchSize": "5000"}, "pullBatchSize", "1..1024"),
    ({"namesrv": NS, "manifest": "/m.json", "startingOffsets": "latest"}, "startingOffsets", "manifest"),
    ({"namesrv": NS, "topic": "a,b", "manifest": "/m.json"}, "topic", "one topic"),
    ({"namesrv": NS, "topic": "a", "namespace": "bad%ns"}, "namespace", "must not contain"),
])
def test_bad_options_name_the_option(raw: dict[str, str], field: str, text: str) -> None:
    err = _err(raw)
    assert err.field == field
    assert text in str(err)


def test_streaming_only_and_batch_only_options() -> None:
    opts = parse_options({"namesrv": NS, "topic": "a", "commitGroup": "g1", "maxOffsetsPerTrigger": "100"},
                         streaming=True)
    assert (opts.commit_group, opts.max_offsets_per_trigger) == ("g1", 100)
    assert _err({"namesrv": NS, "topic": "a", "endingOffsets": "latest"}, streaming=True).field == "endingOffsets"
    assert _err({"namesrv": NS, "manifest": "/m.json"}, streaming=True).field == "manifest"
    assert _err({"namesrv": NS, "topic": "a", "commitGroup": "bad group"}, streaming=True).field == "commitGroup"


def test_secrets_are_masked_and_never_in_errors() -> None:
    opts = parse_options({"namesrv": NS, "topic": "a", **SECRETS})
    assert (opts.access_key, opts.secret_key, opts.security_token) == tuple(SECRETS.values())
    shown = repr(opts) + str(opts)
    for value in SECRETS.values():
        assert value not in shown
    assert "secretKey='***'" in repr(opts)
    assert pickle.loads(pickle.dumps(opts)) == opts  # shipped to the tasks
    # a half-configured ACL names the missing option, never the value given for the other one
    err = _err({"namesrv": NS, "topic": "a", "secretKey": SECRETS["secretKey"]})
    assert err.field == "accessKey" and SECRETS["secretKey"] not in str(err)
    err = _err({"namesrv": NS, "topic": "a", "securityToken": SECRETS["securityToken"]})
    assert err.field == "securityToken" and SECRETS["securityToken"] not in str(err)


def _bounds(*rows: tuple[str, int, int, int]) -> list[QueueBounds]:
    return [QueueBounds("t", b, q, lo, hi) for b, q, lo, hi in rows]


def test_json_offsets_resolve_per_queue_with_defaults_for_the_rest() -> None:
    bounds = _bounds(("broker-a", 0, 5, 100), ("broker-a", 1, 0, 50), ("broker-b", 0, 0, 70))
    opts = parse_options({"namesrv": NS, "topic": "t",
                          "startingOffsets": '{"t": {"broker-a:0": 10, "broker-b:0": -1}}',
                          "endingOffsets": '{"t": {"broker-a:0": 20, "broker-a:1": 30}}'})
    assert spans_from_options(opts, bounds) == [QueueSpan("t", "broker-a", 0, 10, 20),
                                                QueueSpan("t", "broker-a", 1, 0, 30),
                                                QueueSpan("t", "broker-b", 0, 70, 70)]


@pytest.mark.parametrize(("start", "end", "field", "text"), [
    ('{"t": {"broker-a:9": 1}}', "latest", "startingOffsets.t", "queue broker-a:9 does not exist"),
    ("earliest", '{"t": {"broker-a:0": 101}}', "endingOffsets.t.broker-a:0", "beyond the queue's max offset 100"),
    ('{"t": {"broker-a:0": 30}}', '{"t": {"broker-a:0": 20}}', "startingOffsets.t.broker-a:0",
     "after the end offset 20"),
])
def test_json_offsets_that_cannot_be_read(start: str, end: str, field: str, text: str) -> None:
    opts = parse_options({"namesrv": NS, "topic": "t", "startingOffsets": start, "endingOffsets": end})
    with pytest.raises(ConfigError) as info:
        spans_from_options(opts, _bounds(("broker-a", 0, 0, 100)))
    assert info.value.field == field and text in str(info.value)


def test_split_spans_covers_each_offset_once() -> None:
    spans = [QueueSpan("t", "a", 0, 0, 1000), QueueSpan("t", "a", 1, 7, 10), QueueSpan("t", "b", 0, 5, 5)]
    pieces = split_spans(spans, 10)
    offsets = [(p.broker, p.queue_id, o) for p in pieces for o in range(p.start, p.end)]
    assert sorted(offsets) == sorted((s.broker, s.queue_id, o) for s in spans for o in range(s.start, s.end))
    assert len(offsets) == len(set(offsets))
    assert len([p for p in pieces if p.queue_id == 0 and p.broker == "a"]) == 10  # the big queue got the pieces
    assert split_spans(spans, None) == spans[:2] and split_spans(spans, 2) == spans[:2]


def test_retention_fails_or_skips() -> None:
    spans = [QueueSpan("t", "broker-a", 0, 10, 50), QueueSpan("t", "broker-a", 1, 0, 5)]
    bounds = {("t", b.broker, b.queue_id): b for b in _bounds(("broker-a", 0, 30, 60), ("broker-a", 1, 0, 5))}
    with pytest.raises(Exception) as info:
        apply_retention(spans, bounds, True)
    assert "offsets [10, 30) of the range [10, 50) are no longer on the broker" in str(info.value)
    assert "failOnDataLoss=false" in str(info.value)
    assert apply_retention(spans, bounds, False) == [QueueSpan("t", "broker-a", 0, 30, 50), spans[1]]


def test_stream_offsets_and_rate_limit() -> None:
    bounds = _bounds(("broker-a", 0, 3, 100), ("broker-a", 1, 0, 10))
    opts = parse_options({"namesrv": NS, "topic": "t"}, streaming=True)
    start = initial_offset(opts, bounds)
    assert start == {"t": {"broker-a:0": 3, "broker-a:1": 0}}
    latest = {"t": {"broker-a:0": 100, "broker-a:1": 10, "broker-b:0": 4}}  # broker-b:0 is new
    assert limit_offsets(start, latest, None) == latest
    limited = limit_offsets(start, latest, 20)
    backlog = {"broker-a:0": 97, "broker-a:1": 10, "broker-b:0": 4}
    assert limited["t"] == {k: start["t"].get(k, 0) + max(1, int(v * 20 / 111)) for k, v in backlog.items()}
    assert sum(limited["t"][k] - start["t"].get(k, 0) for k in backlog) <= 20 + len(backlog)
    assert spans_between(start, limited) == [QueueSpan("t", "broker-a", 0, 3, limited["t"]["broker-a:0"]),
                                              QueueSpan("t", "broker-a", 1, 0, limited["t"]["broker-a:1"]),
                                              QueueSpan("t", "broker-b", 0, 0, limited["t"]["broker-b:0"])]
    # nothing new: the end is the start (Spark then runs no batch)
    assert limit_offsets(limited, limited, 20) == limited


def test_spark_schema_is_the_columnar_message_schema() -> None:
    # Spark refuses record batches whose Arrow schema differs from the declared one (nullability included)
    from pyspark.sql.pandas.types import to_arrow_schema

    from airflow_provider_rocketmq.client.protocol.columnar import message_schema
    from airflow_provider_rocketmq.spark.source.datasource import spark_schema

    assert to_arrow_schema(spark_schema(), timezone="UTC").equals(message_schema())
