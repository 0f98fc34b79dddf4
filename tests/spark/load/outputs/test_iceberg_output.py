"""The Iceberg output kind without Spark: target and catalog configuration, the table's columns,
the ledger in snapshot summaries (rollback, other writers, expired snapshots), task-side files,
and commits racing each other on a real pyiceberg SQL catalog (sqlite, warehouse on local disk or
on a moto S3 server)."""

from __future__ import annotations

import json
import pickle
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.spark.load.ledger import LedgerConflict, LedgerError, OffsetRanges
from airflow_provider_rocketmq.spark.load.outputs import iceberg_commit
from airflow_provider_rocketmq.spark.load.outputs.iceberg import IcebergOutput
from airflow_provider_rocketmq.spark.load.outputs.iceberg_commit import CommitOutcomeUnknown
from airflow_provider_rocketmq.spark.load.outputs.iceberg_files import delete_files
from airflow_provider_rocketmq.spark.load.outputs.iceberg_ledger import (
    COMPRESS_OVER,
    PROP_HELD,
    PROP_LOAD_ID,
    PROP_RANGES,
    decode_ranges,
    encode_ranges,
    read_ledger,
)
from airflow_provider_rocketmq.spark.load.outputs.iceberg_table import (
    CONF_ENV,
    catalog_properties,
    open_catalog,
    open_table,
    parse_target,
)
from tests.s3_server import MotoS3
from tests.spark.load.outputs.iceberg_helpers import (
    catalog_conf,
    commit,
    conf_properties,
    duckdb_keys,
    load,
    plan,
    ranges,
    rows,
    table_keys,
)

URL = "iceberg://t/db.events?create=true"


def _table(url: str, conf: Path) -> IcebergOutput:
    out = IcebergOutput(url, conf_properties(conf), "utf8")
    out.validate()
    return out


def _data_files(out: IcebergOutput) -> set[str]:
    """Every data file under the table's data path (referenced or not), as local paths."""
    root = Path(out.table.metadata.location.removeprefix("file://")) / "data"
    return {str(p) for p in root.rglob("*.parquet")}


def _referenced(out: IcebergOutput) -> set[str]:
    return {t.file.file_path.removeprefix("file://") for t in out.table.refresh().scan().plan_files()}


# --- target and catalog configuration ------------------------------------------------------------

def test_target_urls() -> None:
    t = parse_target("iceberg://prod/db.events")
    assert (t.catalog, t.identifier, t.create, t.partition) == ("prod", ("db", "events"), False, "window_id")
    t = parse_target("iceberg:///a.b.events?create=true&partition=none")
    assert (t.catalog, t.identifier, t.create, t.partition) == (None, ("a", "b", "events"), True, "none")
    assert str(parse_target("iceberg://Prod/db.events")) == "iceberg://Prod/db.events"  # names keep their case


@pytest.mark.parametrize("url, field, text", [
    ("iceberg://prod/events", "--output", "a namespace and a table name"),
    ("iceberg://prod/db.", "--output", "a namespace and a table name"),
    ("iceberg://user:pw@prod/db.t", "--output", "no user, password or port"),
    ("iceberg://prod/db.t?token=abc", "--output?token", "never in the URL"),
    ("iceberg://prod/db.t?create=maybe", "--output?create", "not a boolean"),
    ("iceberg://prod/db.t?partition=day", "--output?partition", "expected one of window_id, none"),
])
def test_bad_target_urls_name_the_field(url: str, field: str, text: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_target(url)
    assert exc.value.field == field and text in str(exc.value)
    assert "abc" not in str(exc.value) and "pw" not in str(exc.value)


def test_catalog_properties_from_a_file_or_the_environment(tmp_path: Path) -> None:
    js = tmp_path / "c.json"
    js.write_text(json.dumps({"uri": "sqlite:///x.db", "s3.path-style-access": True, "retries": 3}))
    assert catalog_properties(str(js), {}) == {"uri": "sqlite:///x.db", "s3.path-style-access": "true",
                                               "retries": "3"}
    kv = tmp_path / "c.properties"
    kv.write_text("# comment\nuri = sqlite:///y.db\n\ns3.secret-access-key=a=b\n")
    assert catalog_properties(None, {CONF_ENV: str(kv)}) == {"uri": "sqlite:///y.db", "s3.secret-access-key": "a=b"}
    assert catalog_properties(str(js), {CONF_ENV: str(kv)})["uri"] == "sqlite:///x.db"  # the flag wins
    assert catalog_properties(None, {}) == {}
    env = {"ROCKETMQ_OUTPUT_STORAGE_OPTIONS": json.dumps({"uri": "sqlite:///z.db", "warehouse": "s3://w"}),
           CONF_ENV: str(kv)}
    assert catalog_properties(None, env) == {"uri": "sqlite:///y.db", "warehouse": "s3://w",
                                             "s3.secret-access-key": "a=b"}  # the file wins over the JSON
    with pytest.raises(ConfigError, match="ROCKETMQ_OUTPUT_STORAGE_OPTIONS: must be a JSON object"):
        catalog_properties(None, {"ROCKETMQ_OUTPUT_STORAGE_OPTIONS": "[1]"})


@pytest.mark.parametrize("content, text", [
    ("{not json", "not valid JSON"), ('{"a": {"b": 1}}', "property 'a' must be a string"),
    ("just words\n", "line 1: expected key=value"),
])
def test_bad_catalog_property_files(tmp_path: Path, content: str, text: str) -> None:
    f = tmp_path / "c.conf"
    f.write_text(content)
    with pytest.raises(ConfigError) as exc:
        catalog_properties(str(f), {})
    assert exc.value.field == "--catalog-conf" and text in str(exc.value)
    with pytest.raises(ConfigError, match="cannot read"):
        catalog_properties(str(tmp_path / "missing"), {})


def test_a_catalog_that_cannot_load_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        open_catalog(parse_target("iceberg://nocat/db.t"), {"type": "nosuchtype"})
    assert exc.value.field == "catalog nocat" and "PYICEBERG_CATALOG__NOCAT__" in str(exc.value)


def test_loading_the_catalog_is_retried_unless_it_is_misconfigured(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # two loads creating a fresh SQL catalog at once: one of them may fail the way SQLAlchemy's
    # check-then-create fails (seen in the fault matrix); loading again finds the tables there
    import pyiceberg.catalog as pc
    from sqlalchemy.exc import OperationalError

    real, calls = pc.load_catalog, []

    def racing(name, **props):  # type: ignore[no-untyped-def]
        calls.append(name)
        if len(calls) == 1:
            raise OperationalError("CREATE TABLE iceberg_tables", {},
                                   sqlite3.OperationalError("table iceberg_tables already exists"))
        return real(name, **props)

    monkeypatch.setattr(pc, "load_catalog", racing)
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": f"file://{tmp_path}/wh"}
    catalog = open_catalog(parse_target("iceberg://race/db.t"), props)
    assert calls == ["race", "race"] and catalog.list_namespaces() == []

    def counted(name, **props):  # type: ignore[no-untyped-def]
        calls.append(name)
        return real(name, **props)

    calls.clear()  # a type that does not exist: reported at once, no retry
    monkeypatch.setattr(pc, "load_catalog", counted)
    with pytest.raises(ConfigError, match="nosuchtype"):
        open_catalog(parse_target("iceberg://nocat/db.t"), {"type": "nosuchtype"})
    assert len(calls) == 1

    def always(name, **props):  # type: ignore[no-untyped-def]
        calls.append(name)
        raise OperationalError("SELECT 1", {}, sqlite3.OperationalError("database is locked"))

    calls.clear()
    monkeypatch.setattr(pc, "load_catalog", always)
    with pytest.raises(ConfigError, match="database is locked") as exc:  # bounded: four tries, then the error
        open_catalog(parse_target("iceberg://race/db.t"), props)
    assert len(calls) == 4 and exc.value.field == "catalog race"


def test_pyiceberg_environment_configuration_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # what a DAG that is unchanged relies on: the catalog configured in the worker's environment
    import pyiceberg.catalog as pc
    from pyiceberg.utils.config import Config

    monkeypatch.setenv("PYICEBERG_CATALOG__ENVCAT__URI", f"sqlite:///{tmp_path}/c.db")
    monkeypatch.setenv("PYICEBERG_CATALOG__ENVCAT__WAREHOUSE", f"file://{tmp_path}/wh")
    monkeypatch.setattr(pc, "_ENV_CONFIG", Config())
    out = IcebergOutput("iceberg://envcat/db.t?create=true", {}, "utf8")
    out.validate()
    assert out.table.metadata.location.startswith(f"file://{tmp_path}/wh")


# --- the table --------------------------------------------------------------------------------------

def test_missing_table_without_create_is_refused(tmp_path: Path) -> None:
    conf = catalog_conf(tmp_path)
    with pytest.raises(ConfigError, match=r"no such table \(add \?create=true"):
        _table("iceberg://t/db.events", conf)


def test_created_table_has_the_loader_columns_and_window_partitions(tmp_path: Path) -> None:
    conf = catalog_conf(tmp_path)
    out = _table(URL, conf)
    schema = out.table.schema()
    assert [f.name for f in schema.fields] == ["topic", "broker", "queue_id", "queue_offset", "msg_id", "tags",
                                               "keys", "properties", "born_timestamp", "store_timestamp",
                                               "reconsume_times", "body", "window_id"]
    assert [f.name for f in schema.fields if f.required] == ["topic", "broker", "queue_id", "queue_offset",
                                                              "window_id"]
    assert str(schema.find_type("body")) == "string"
    assert [(f.name, str(f.transform)) for f in out.table.spec().fields] == [("window_id", "identity")]
    assert "rocketmq.last-load" not in out.table.metadata.properties
    binary = IcebergOutput("iceberg://t/db.raw?create=true&partition=none", conf_properties(conf), "binary")
    binary.validate()
    assert str(binary.table.schema().find_type("body")) == "binary" and not binary.table.spec().fields


def test_two_loads_creating_the_namespace_at_once_both_open_the_table(tmp_path: Path) -> None:
    """pyiceberg's SQL catalog checks that a namespace is absent, then inserts it: when another load
    inserts in between, the insert fails with sqlite's unique-constraint error (CI, two
    spark-submits creating ``db`` together). The load goes on: the namespace is there."""
    from pyiceberg.catalog.sql import SqlCatalog

    props = conf_properties(catalog_conf(tmp_path))
    other = SqlCatalog("t", **props)

    class CheckedBeforeTheOthersInsert(SqlCatalog):
        creating = raced = False

        def create_namespace(self, namespace: Any, properties: Any = None) -> None:
            self.creating = True
            super().create_namespace(namespace, properties or {})

        def namespace_exists(self, namespace: Any) -> bool:
            exists = super().namespace_exists(namespace)
            if self.creating and not self.raced:  # create_namespace's own check, then the other's insert
                self.raced = True
                other.create_namespace(namespace)
            return exists

    catalog = CheckedBeforeTheOthersInsert("t", **props)
    table, created = open_table(catalog, parse_target(URL), "utf8")
    assert catalog.raced and created
    assert other.load_table(("db", "events")).metadata.table_uuid == table.metadata.table_uuid


def test_existing_tables_that_do_not_fit_are_refused_naming_the_column(tmp_path: Path) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, LongType, NestedField, StringType

    conf = catalog_conf(tmp_path)
    _table(URL, conf)
    with pytest.raises(ConfigError) as exc:  # a binary body into a string column
        IcebergOutput("iceberg://t/db.events", conf_properties(conf), "binary").validate()
    assert exc.value.field == "table db.events.body" and "--body-format binary needs a binary body" in str(exc.value)
    catalog = open_catalog(parse_target("iceberg://t/db.x"), conf_properties(conf))
    base = [NestedField(1, "topic", StringType(), required=True), NestedField(2, "broker", StringType(), required=True),
            NestedField(3, "queue_id", LongType(), required=True),  # long takes the loader's int
            NestedField(4, "queue_offset", LongType(), required=True)]
    catalog.create_table("db.partial", Schema(*base))
    with pytest.raises(ConfigError) as exc:
        IcebergOutput("iceberg://t/db.partial", conf_properties(conf), "utf8").validate()
    assert exc.value.field == "table db.partial.msg_id" and "column missing" in str(exc.value)
    full = IcebergOutput(URL, conf_properties(conf), "utf8")
    full.validate()
    extra = [f for f in full.table.schema().fields]
    catalog.create_table("db.strict", Schema(*[f if f.name != "tags" else NestedField(
        f.field_id, "tags", StringType(), required=True) for f in extra]))
    with pytest.raises(ConfigError, match=r"db.strict.tags: column is required but the loader may write nulls"):
        IcebergOutput("iceberg://t/db.strict", conf_properties(conf), "utf8").validate()
    catalog.create_table("db.more", Schema(*extra, NestedField(99, "tenant", IntegerType(), required=True)))
    with pytest.raises(ConfigError, match=r"db.more.tenant: required column the loader does not write"):
        IcebergOutput("iceberg://t/db.more", conf_properties(conf), "utf8").validate()
    catalog.create_table("db.wide", Schema(*base[:2], NestedField(3, "queue_id", StringType(), required=True)))
    with pytest.raises(ConfigError, match=r"db.wide.queue_id: type string does not take the loader's int"):
        IcebergOutput("iceberg://t/db.wide", conf_properties(conf), "utf8").validate()


def test_a_user_table_with_its_own_partitioning_and_optional_columns(tmp_path: Path) -> None:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import NestedField, StringType

    conf = catalog_conf(tmp_path)
    probe = _table("iceberg://t/db.probe?create=true", conf)
    fields = list(probe.table.schema().fields) + [NestedField(500, "note", StringType(), required=False)]
    catalog = open_catalog(parse_target(URL), conf_properties(conf))
    schema = Schema(*fields)
    catalog.create_table("db.mine", schema, partition_spec=PartitionSpec(PartitionField(
        source_id=schema.find_field("broker").field_id, field_id=1000, transform=IdentityTransform(), name="b")))
    url = "iceberg://t/db.mine"
    load(url, conf, ranges(("a", 0, 0, 5), ("b", 0, 0, 3)), [pa.Table.from_batches(
        [rows("w1", "a", 0, range(5)), rows("w1", "b", 0, range(3))]).combine_chunks().to_batches()[0]])
    out = _table(url, conf)
    assert table_keys(url, conf) == sorted([("orders", "a", 0, o) for o in range(5)]
                                           + [("orders", "b", 0, o) for o in range(3)])
    paths = sorted(_referenced(out))
    assert [Path(p).parent.name for p in paths] == ["b=a", "b=b"]  # one file per partition value
    got = out.table.scan(row_filter="broker == 'b'", selected_fields=("broker",)).to_arrow()
    assert set(got.column("broker").to_pylist()) == {"b"}
    assert out.table.scan(selected_fields=("note",)).to_arrow().column("note").null_count == 8


# --- ledger encoding --------------------------------------------------------------------------------

def test_ranges_encode_compactly_and_compress_when_long() -> None:
    small = ranges(("broker-a", 0, 0, 100), ("broker-a", 0, 200, 300), ("broker-b", 3, 5, 6))
    text = encode_ranges(small)
    assert text == '[["orders","broker-a",0,[0,100,200,300]],["orders","broker-b",3,[5,6]]]'
    assert decode_ranges(text, "x") == small
    big = OffsetRanges.of((("orders", f"broker-{b}", q), 1000 * i, 1000 * i + 7)
                          for b in range(8) for q in range(16) for i in range(3))
    packed = encode_ranges(big)
    assert packed.startswith("zlib:") and len(packed) < COMPRESS_OVER < len(encode_ranges.__doc__ or "") + 99999
    assert decode_ranges(packed, "x") == big


@pytest.mark.parametrize("text", ["{", '{"a": 1}', '[["t","b",0,[5]]]', '[["t","b",0,[5,5]]]',
                                  '[["t","b","q",[0,1]]]', "zlib:@@@", '[["t","b",true,[0,1]]]'])
def test_bad_ranges_values_are_ledger_errors(text: str) -> None:
    with pytest.raises(LedgerError) as exc:
        decode_ranges(text, "snapshot 7 rocketmq.held")
    assert exc.value.where == "snapshot 7 rocketmq.held"


# --- loads, the ledger through the table's history -------------------------------------------------

def test_loads_commit_one_snapshot_each_and_the_ledger_skips_what_is_held(tmp_path: Path) -> None:
    conf = catalog_conf(tmp_path)
    first = load(URL, conf, ranges(("a", 0, 0, 10), ("a", 1, 0, 4)),
                 [rows("w1", "a", 0, range(10)), rows("w1", "a", 1, range(4))], windows=["w1"])
    out = _table(URL, conf)
    snap = out.table.current_snapshot()
    assert snap is not None and len(out.table.metadata.snapshots) == 1
    props = snap.summary.additional_properties if snap.summary else {}
    assert props[PROP_LOAD_ID] == first.load.load_id and props["rocketmq.windows"] == '["w1"]'
    assert out.table.metadata.properties["rocketmq.last-load"] == first.load.load_id
    assert decode_ranges(props[PROP_RANGES], "") == decode_ranges(props[PROP_HELD], "") == first.new
    # an overlapping window (the offset commit failed, the next window starts where the first did)
    second = load(URL, conf, ranges(("a", 0, 0, 15)), [rows("w2", "a", 0, range(15))], windows=["w2"])
    assert second.new == ranges(("a", 0, 10, 15))
    keys = table_keys(URL, conf)
    assert len(keys) == len(set(keys)) == 19
    ledger = read_ledger(out.table.refresh().metadata, "db.events")
    assert ledger.held == ranges(("a", 0, 0, 15), ("a", 1, 0, 4))
    assert len(out.table.metadata.snapshots) == 2
    again = plan(URL, conf, ranges(("a", 0, 0, 15)), [rows("w2", "a", 0, range(15))])
    assert not again.new and again.files == []
    assert duckdb_keys(out.table.metadata_location) == keys


def test_a_load_with_offsets_but_no_rows_records_them(tmp_path: Path) -> None:
    # e.g. a window whose messages were all tag-filtered: the offsets are held, nothing is written
    conf = catalog_conf(tmp_path)
    empty = load(URL, conf, ranges(("a", 0, 0, 50)), [])
    assert empty.files == [] and empty.new == ranges(("a", 0, 0, 50))
    out = _table(URL, conf)
    assert out.state().held == ranges(("a", 0, 0, 50)) and len(out.table.metadata.snapshots) == 1
    assert table_keys(URL, conf) == []


def test_rollback_other_writers_and_expired_snapshots(tmp_path: Path) -> None:
    conf = catalog_conf(tmp_path)
    load(URL, conf, ranges(("a", 0, 0, 5)), [rows("w1", "a", 0, range(5))])
    out = _table(URL, conf)
    first = out.table.current_snapshot()
    assert first is not None
    load(URL, conf, ranges(("a", 0, 5, 9)), [rows("w2", "a", 0, range(5, 9))])
    # another writer's snapshot on top (no ledger properties): passed over
    out.table.refresh().append(pa.Table.from_batches([rows("other", "z", 9, range(2))]).cast(
        out.table.schema().as_arrow()))
    assert read_ledger(out.table.refresh().metadata, "t").held == ranges(("a", 0, 0, 9))
    # rolled back to the first load: the second load's offsets are no longer held, and load again
    out.table.manage_snapshots().rollback_to_snapshot(first.snapshot_id).commit()
    assert read_ledger(out.table.refresh().metadata, "t").held == ranges(("a", 0, 0, 5))
    third = load(URL, conf, ranges(("a", 0, 0, 9)), [rows("w2", "a", 0, range(9))])
    assert third.new == ranges(("a", 0, 5, 9))
    assert table_keys(URL, conf) == [("orders", "a", 0, o) for o in range(9)]
    # older snapshots expired while the newest load snapshot stays: its cumulative ledger suffices
    current = out.table.refresh().current_snapshot()
    assert current is not None
    old = [s.snapshot_id for s in out.table.metadata.snapshots if s.snapshot_id != current.snapshot_id]
    out.table.maintenance.expire_snapshots().by_ids(old).commit()
    assert len(out.table.refresh().metadata.snapshots) == 1
    assert read_ledger(out.table.metadata, "t").held == ranges(("a", 0, 0, 9))
    # another writer's snapshot becomes current and the last load snapshot is expired: the
    # ledger is gone, so the next load stops instead of loading everything again
    out.table.append(pa.Table.from_batches([rows("other", "z", 9, range(2))]).cast(out.table.schema().as_arrow()))
    out.table.refresh().maintenance.expire_snapshots().by_id(current.snapshot_id).commit()
    with pytest.raises(LedgerError, match="no longer holds a load snapshot"):
        out.state()


def test_rollback_to_before_every_load_holds_nothing(tmp_path: Path) -> None:
    conf = catalog_conf(tmp_path)
    out = _table(URL, conf)
    out.table.append(pa.Table.from_batches([rows("other", "z", 9, range(2))]).cast(out.table.schema().as_arrow()))
    before = out.table.refresh().current_snapshot()
    assert before is not None
    load(URL, conf, ranges(("a", 0, 0, 5)), [rows("w1", "a", 0, range(5))])
    out.table.refresh().manage_snapshots().rollback_to_snapshot(before.snapshot_id).commit()
    assert not out.state().held  # the load's snapshot is kept but no longer current: its rows are gone
    loaded = [s.snapshot_id for s in out.table.refresh().metadata.snapshots if s.snapshot_id != before.snapshot_id]
    out.table.maintenance.expire_snapshots().by_ids(loaded).commit()
    with pytest.raises(LedgerError, match="remove the table property rocketmq.last-load"):
        out.state()  # rolled back, then expired: indistinguishable from a lost ledger, so refused


def test_the_cumulative_ledger_of_many_queues_stays_small(tmp_path: Path) -> None:
    conf = catalog_conf(tmp_path)
    claim = OffsetRanges.of((("orders", f"broker-{b}", q), 0, 2) for b in range(4) for q in range(64))
    batches = [rows("w1", f"broker-{b}", q, range(2)) for b in range(4) for q in range(64)]
    load(URL, conf, claim, batches)
    out = _table(URL, conf)
    snap = out.table.current_snapshot()
    assert snap is not None and snap.summary is not None
    held = snap.summary.additional_properties[PROP_HELD]
    assert held.startswith("zlib:") and len(held) < 2000
    assert read_ledger(out.table.metadata, "t").held == claim


# --- task-side files -------------------------------------------------------------------------------

def test_a_task_that_fails_removes_the_files_it_started(tmp_path: Path) -> None:
    conf = catalog_conf(tmp_path)
    out = _table(URL, conf)
    load_ = out.begin()
    bad = rows("w1", "a", 0, range(3)).to_pydict()
    bad["topic"][2] = None  # a required column: the cast fails on the second batch
    with pytest.raises(ValueError, match="with null values to non-nullable"):
        load_.writer().write([rows("w1", "a", 0, range(10, 20)), pa.RecordBatch.from_pydict(
            bad, schema=rows("w", "a", 0, []).schema)], "00000-7")
    assert _data_files(out) == set()


def test_a_task_with_many_open_files_bounds_what_it_buffers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.parquet as pq

    from airflow_provider_rocketmq.spark.load.outputs import iceberg_files

    conf = catalog_conf(tmp_path)
    out = _table(URL, conf)
    monkeypatch.setattr(iceberg_files, "TASK_BUFFER_BYTES", 1)  # every batch goes to disk at once
    batches = [rows(f"w{i % 3}", "a", 0, range(10 * i, 10 * i + 10)) for i in range(9)]
    files = out.begin().writer().write(batches, "00000-1")
    assert sorted((f.window_id, f.rows) for f in files) == [("w0", 30), ("w1", 30), ("w2", 30)]
    assert [pq.read_metadata(f.path.removeprefix("file://")).num_row_groups for f in files] == [3, 3, 3]


def test_task_files_split_by_window_and_roll_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_provider_rocketmq.spark.load.outputs import iceberg_files

    conf = catalog_conf(tmp_path)
    out = _table("iceberg://t/db.flat?create=true&partition=none", conf)
    monkeypatch.setattr(iceberg_files, "ROW_GROUP_BYTES", 1)  # flush every batch
    writer = out.begin().writer()
    writer = type(writer)(**{**writer.__dict__, "target_file_bytes": 1})  # one batch per file
    mixed = pa.Table.from_batches([rows("w1", "a", 0, range(3)), rows("w2", "a", 0, range(3, 5))])
    files = writer.write(mixed.combine_chunks().to_batches() + [rows("w2", "a", 0, range(5, 9))], "00003-2")
    assert sorted((f.window_id, f.rows) for f in files) == [("w1", 3), ("w2", 2), ("w2", 4)]
    assert all(Path(f.path).name.startswith(f"{out.begin().load_id[:0]}") for f in files)
    assert all("-00003-2-" in Path(f.path).name for f in files)
    assert "io_properties" not in repr(writer) and "location" in repr(writer)


def test_tasks_write_through_the_filesystem_the_driver_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.parquet as pq
    import pyiceberg.io

    out = _table(URL, catalog_conf(tmp_path))
    writer = pickle.loads(pickle.dumps(out.begin().writer()))  # as a Spark task gets it
    assert writer.arrow_files is not None

    def no_file_io(*args: object, **kwargs: object) -> None:
        raise AssertionError("a task loaded a FileIO (imports pyiceberg.io.pyarrow)")

    monkeypatch.setattr(pyiceberg.io, "load_file_io", no_file_io)
    files = writer.write([rows("w1", "a", 0, range(5))], "00000-3")
    [f] = files
    local = f.path.removeprefix("file://")
    assert f.path.startswith(out.table.metadata.location + "/data/window_id=w1/") and f.bytes == Path(local).stat().st_size
    table = pq.read_table(local)
    assert table.column("queue_offset").to_pylist() == list(range(5))
    ids = {fl.name: fl.metadata[b"PARQUET:field_id"] for fl in table.schema}
    assert ids["queue_offset"] == str(out.table.schema().find_field("queue_offset").field_id).encode()
    with pytest.raises(FileExistsError):
        writer.arrow_files.new_output(f.path).create()
    assert delete_files(writer.arrow_files, [f.path, f.path]) == [] and not Path(local).exists()


def test_another_file_io_is_loaded_in_the_tasks(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    out = _table(URL, catalog_conf(tmp_path, **{"py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"}))
    writer = out.begin().writer()
    assert writer.arrow_files is None and type(writer.file_io()).__name__ == "FsspecFileIO"
    [f] = writer.write([rows("w1", "a", 0, range(4))], "00000-4")
    assert pq.read_table(f.path.removeprefix("file://")).num_rows == 4


# --- commits racing each other -----------------------------------------------------------------------

def test_concurrent_load_of_overlapping_offsets_conflicts_and_leaves_nothing(tmp_path: Path) -> None:
    conf = catalog_conf(tmp_path)
    _table(URL, conf)
    a = plan(URL, conf, ranges(("a", 0, 0, 10)), [rows("wa", "a", 0, range(10))])
    b = load(URL, conf, ranges(("a", 0, 5, 20)), [rows("wb", "a", 0, range(5, 20))])  # commits first
    with pytest.raises(LedgerConflict, match=r"committed orders a:0 offsets \[5, 10\) while this load ran"):
        commit(a, ["wa"])
    assert table_keys(URL, conf) == [("orders", "a", 0, o) for o in range(5, 20)]
    out = _table(URL, conf)
    assert _data_files(out) == _referenced(out) == {f.path.removeprefix("file://") for f in b.files}
    assert len(out.table.metadata.snapshots) == 1
    rerun = load(URL, conf, ranges(("a", 0, 0, 10)), [rows("wa", "a", 0, range(10))])
    assert rerun.new == ranges(("a", 0, 0, 5))
    keys = table_keys(URL, conf)
    assert keys == [("orders", "a", 0, o) for o in range(20)]


def test_concurrent_load_of_other_offsets_is_retried_on_the_new_state(tmp_path: Path) -> None:
    conf = catalog_conf(tmp_path)
    _table(URL, conf)
    a = plan(URL, conf, ranges(("a", 0, 0, 10)), [rows("wa", "a", 0, range(10))])
    load(URL, conf, ranges(("a", 1, 0, 7)), [rows("wb", "a", 1, range(7))])
    commit(a, ["wa"])
    out = _table(URL, conf)
    assert len(table_keys(URL, conf)) == 17 and len(out.table.metadata.snapshots) == 2
    ledger = read_ledger(out.table.refresh().metadata, "t")
    assert ledger.last is not None and ledger.last.load_id == a.load.load_id
    assert ledger.held == ranges(("a", 0, 0, 10), ("a", 1, 0, 7))  # the other load's ranges carried forward


def test_a_catalog_that_keeps_refusing_gives_up_with_a_conflict(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table import Transaction

    conf = catalog_conf(tmp_path)
    a = plan(URL, conf, ranges(("a", 0, 0, 4)), [rows("wa", "a", 0, range(4))])
    calls = []

    def refuse(self: Transaction) -> None:
        calls.append(1)
        raise CommitFailedException("the catalog's metadata pointer moved")

    monkeypatch.setattr(iceberg_commit, "wait_random_exponential", lambda **_: lambda _state: 0)
    monkeypatch.setattr(Transaction, "commit_transaction", refuse)
    with pytest.raises(LedgerConflict, match=f"refused {iceberg_commit.COMMIT_ATTEMPTS} commits"):
        commit(a)
    assert len(calls) == iceberg_commit.COMMIT_ATTEMPTS
    assert _data_files(a.out) == set()


def test_an_unknown_commit_outcome_keeps_the_files(tmp_path: Path) -> None:
    # the catalog database is locked by someone else when the load commits: the UPDATE fails
    # (not a refusal), the snapshot is not in the table, the load's files must stay in case
    conf = catalog_conf(tmp_path, lock_timeout=0.2)
    a = plan(URL, conf, ranges(("a", 0, 0, 4)), [rows("wa", "a", 0, range(4))])
    db = sqlite3.connect(str(tmp_path / "catalog.db"), isolation_level=None)
    db.execute("BEGIN IMMEDIATE")  # a writer's lock: readers go on, other writers wait
    try:
        with pytest.raises(CommitOutcomeUnknown, match="its data files are kept"):
            commit(a)
    finally:
        db.execute("ROLLBACK")
        db.close()
    assert _data_files(a.out) == {f.path.removeprefix("file://") for f in a.files} != set()
    assert table_keys(URL, conf) == []
    rerun = load(URL, conf, ranges(("a", 0, 0, 4)), [rows("wa", "a", 0, range(4))])
    assert rerun.new == ranges(("a", 0, 0, 4)) and len(table_keys(URL, conf)) == 4


def test_load_on_a_warehouse_in_moto_s3(tmp_path: Path, s3: MotoS3) -> None:
    bucket = s3.new_bucket("ice")
    conf = catalog_conf(tmp_path, warehouse=f"s3://{bucket}/wh", **{
        "s3.endpoint": s3.endpoint, "s3.access-key-id": "testing", "s3.secret-access-key": "testing",
        "s3.region": "us-east-1"})
    load(URL, conf, ranges(("a", 0, 0, 6)), [rows("w1", "a", 0, range(6))])
    a = plan(URL, conf, ranges(("a", 0, 0, 9)), [rows("w2", "a", 0, range(9))])
    load(URL, conf, ranges(("a", 0, 6, 8)), [rows("w3", "a", 0, range(6, 8))])
    with pytest.raises(LedgerConflict):
        commit(a)
    fs = s3.filesystem()
    data = [p for p in fs.find(f"{bucket}/wh") if p.endswith(".parquet")]
    assert len(data) == 2 and all(a.load.load_id not in p for p in data)  # the loser's file is gone
    assert table_keys(URL, conf) == [("orders", "a", 0, o) for o in range(8)]
    out = _table(URL, conf)
    assert "s3.secret-access-key" in out.table.io.properties
    writer = out.begin().writer()
    assert writer.io_properties["s3.endpoint"] == s3.endpoint and "uri" not in writer.io_properties
    task = pickle.loads(pickle.dumps(writer))  # the S3 filesystem the driver resolved, in a task
    assert task.arrow_files is not None and "testing" not in repr(task.arrow_files)
    [f] = task.write([rows("w9", "a", 0, range(3))], "00000-9")
    assert fs.size(f.path.removeprefix("s3://")) == f.bytes
    assert delete_files(task.arrow_files, [f.path, f.path]) == [] and not fs.exists(f.path.removeprefix("s3://"))
