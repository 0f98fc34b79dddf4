"""Window manifest: round trip, durability of the write, and the typed errors users see."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_provider_rocketmq.client.protocol.errors import RocketMQError
from airflow_provider_rocketmq.client.protocol.message import MessageExt
from airflow_provider_rocketmq.window import manifest as mf
from airflow_provider_rocketmq.window.manifest import (
    ManifestError,
    QueueRange,
    WindowManifest,
    file_sha256,
    new_window_id,
    read_manifest,
    staged_row,
    write_manifest,
    write_parquet_file,
)


def _rows(window_id: str, offsets: range, queue_id: int = 0) -> list[dict]:
    return [{"topic": "T", "broker": "broker-a", "queue_id": queue_id, "queue_offset": o, "msg_id": f"id{o}",
             "tags": "tagA", "keys": None, "properties": {"k": str(o)}, "born_timestamp": 1_700_000_000_000 + o,
             "store_timestamp": 1_700_000_000_100 + o, "reconsume_times": 0, "body": f"body-{o}".encode(),
             "window_id": window_id} for o in offsets]


def _window(tmp_path: Path, n: int = 5) -> tuple[Path, WindowManifest]:
    wid = new_window_id()
    fe = write_parquet_file(_rows(wid, range(n)), tmp_path / "part-00000.parquet", tmp_path)
    m = WindowManifest(window_id=wid, topic="T", consumer_group="G", namesrv="127.0.0.1:9876",
                       queues=[QueueRange("broker-a", 0, 0, n, n + 3, n), QueueRange("broker-a", 1, 7, 7, 7, 0)],
                       files=[fe], messages=n, bytes=sum(len(r["body"]) for r in _rows(wid, range(n))))
    return write_manifest(m, tmp_path), m


def test_round_trip_and_parquet_content(tmp_path: Path) -> None:
    path, m = _window(tmp_path)
    assert path == tmp_path / "manifest.json"
    back = read_manifest(tmp_path)  # a directory resolves to its manifest.json
    assert back == m
    data = json.loads(path.read_text())
    assert data["version"] == 2 and data["files"][0]["path"] == "part-00000.parquet"
    table = pq.read_table(tmp_path / "part-00000.parquet")
    assert table.schema.equals(mf.STAGED_SCHEMA)
    assert table.column("queue_offset").to_pylist() == [0, 1, 2, 3, 4]
    assert table.column("body").to_pylist()[2] == b"body-2"
    assert dict(table.column("properties").to_pylist()[3]) == {"k": "3"}
    # no temp files left behind by the atomic writes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json", "part-00000.parquet"]


def test_gaps_round_trip_and_older_manifests_have_none(tmp_path: Path) -> None:
    m = WindowManifest(window_id="w", topic="T", consumer_group="G",
                       queues=[QueueRange("broker-a", 2, 10, 20, 20, 0, gaps=((12, 15), (17, 18)))])
    path = write_manifest(m, tmp_path)
    assert json.loads(path.read_text())["queues"][0]["gaps"] == [[12, 15], [17, 18]]
    assert read_manifest(path) == m
    data = json.loads(path.read_text())
    del data["queues"][0]["gaps"]  # as written before gaps existed
    path.write_text(json.dumps(data))
    assert read_manifest(path).queues[0].gaps == ()


def test_file_entry_matches_file(tmp_path: Path) -> None:
    sub = tmp_path / "q0"
    fe = write_parquet_file(_rows("w", range(3)), sub / "a.parquet", tmp_path)
    assert fe.path == "q0/a.parquet" and fe.rows == 3
    assert fe.bytes == (sub / "a.parquet").stat().st_size
    assert fe.sha256 == file_sha256(sub / "a.parquet")


def test_empty_window_is_valid(tmp_path: Path) -> None:
    m = WindowManifest(window_id="w-empty", topic="T", consumer_group="G",
                       queues=[QueueRange("broker-a", 0, 4, 4, 4, 0)])
    write_manifest(m, tmp_path / "manifest.json")
    assert read_manifest(tmp_path / "manifest.json").messages == 0


def test_staged_row_from_message_ext(tmp_path: Path) -> None:
    msg = MessageExt()
    msg.topic, msg.queue_id, msg.queue_offset, msg.broker_name = "T", 3, 42, "broker-b"
    msg.born_timestamp, msg.store_timestamp, msg.reconsume_times, msg.body = 1, 2, 1, b"{}"
    msg.properties = {"TAGS": "t1", "KEYS": "k1", "UNIQ_KEY": "U1"}
    row = staged_row(msg, "w1")
    assert (row["broker"], row["queue_id"], row["queue_offset"], row["tags"], row["keys"], row["msg_id"]) == \
        ("broker-b", 3, 42, "t1", "k1", "U1")
    fe = write_parquet_file([row], tmp_path / "one.parquet")
    assert fe.rows == 1 and pq.read_table(tmp_path / "one.parquet").column("window_id").to_pylist() == ["w1"]


def test_corrupted_file_is_reported_by_field(tmp_path: Path) -> None:
    _window(tmp_path)
    f = tmp_path / "part-00000.parquet"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, different content
    f.write_bytes(bytes(data))
    with pytest.raises(ManifestError) as ei:
        read_manifest(tmp_path)
    assert ei.value.field == "files[0].sha256" and "checksum mismatch" in str(ei.value)
    assert isinstance(ei.value, RocketMQError)


def test_truncated_and_missing_files(tmp_path: Path) -> None:
    _window(tmp_path)
    f = tmp_path / "part-00000.parquet"
    f.write_bytes(f.read_bytes()[:-10])
    with pytest.raises(ManifestError, match=r"files\[0\]\.bytes"):
        read_manifest(tmp_path)
    f.unlink()
    with pytest.raises(ManifestError, match=r"files\[0\]\.path: part-00000.parquet does not exist"):
        read_manifest(tmp_path)
    # without verification the manifest itself still reads
    assert read_manifest(tmp_path, verify_files=False).messages == 5


def test_row_count_must_match_parquet(tmp_path: Path) -> None:
    path, _ = _window(tmp_path)
    data = json.loads(path.read_text())
    data["files"][0]["rows"] = 4
    data["messages"] = 4
    data["queues"][0]["messages"] = 4
    path.write_text(json.dumps(data))
    with pytest.raises(ManifestError) as ei:
        read_manifest(path)
    assert ei.value.field == "files[0].rows"


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda d: d.pop("topic"), "topic"),
    (lambda d: d.update(version=3), "version"),
    (lambda d: d.update(version=0), "version"),
    (lambda d: d.update(messages="5"), "messages"),
    (lambda d: d.update(messages=True), "messages"),
    (lambda d: d["queues"][0].update(end_offset=-1), "queues[0].end_offset"),
    (lambda d: d["queues"][0].update(start_offset=-1), "queues[0].start_offset"),
    (lambda d: d["queues"][0].update(high_water=2), "queues[0].high_water"),
    (lambda d: d["queues"][1].update(messages=1), "queues[1].messages"),
    (lambda d: d["queues"][1].update(queue_id=0), "queues[1]"),
    (lambda d: d["queues"].append("x"), "queues[2]"),
    (lambda d: d.update(messages=6), "messages"),
    (lambda d: d["files"][0].update(path="../escape.parquet"), "files[0].path"),
    (lambda d: d["files"][0].update(path="/abs.parquet"), "files[0].path"),
    (lambda d: d["files"][0].update(sha256="XYZ"), "files[0].sha256"),
    (lambda d: d["files"][0].pop("rows"), "files[0].rows"),
    (lambda d: d.update(window_id="a/b"), "window_id"),
    (lambda d: d.update(consumer_group=""), "consumer_group"),
    (lambda d: d["queues"][0].update(gaps="x"), "queues[0].gaps"),
    (lambda d: d["queues"][0].update(gaps=[[1]]), "queues[0].gaps[0]"),
    (lambda d: d["queues"][0].update(gaps=[[3, 9]]), "queues[0].gaps[0]"),  # past end_offset
    (lambda d: d["queues"][0].update(gaps=[[2, 2]]), "queues[0].gaps[0]"),  # empty
    (lambda d: d["queues"][0].update(gaps=[[2, 3], [1, 2]]), "queues[0].gaps[1]"),  # unsorted
    (lambda d: d["queues"][0].update(gaps=[[1, 2]]), "queues[0].messages"),  # 5 messages in 4 own offsets
])
def test_bad_manifest_names_the_field(tmp_path: Path, mutate, field: str) -> None:
    path, _ = _window(tmp_path)
    data = json.loads(path.read_text())
    mutate(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ManifestError) as ei:
        read_manifest(path)
    assert ei.value.field == field, str(ei.value)
    assert str(path) in str(ei.value)


def _raw_file(path: Path, window_id: str, offsets: range, columns: list[str] | None = None) -> mf.FileEntry:
    """A staged file of the ``raw`` layout (what windows write), optionally with ``columns`` only."""
    import pyarrow as pa

    rows = [{"topic": "T", "broker": "broker-a", "queue_id": 0, "queue_offset": o,
             "store_host": bytes([127, 0, 0, 1, 0, 0, 42, 159]), "commit_log_offset": 1000 + 97 * o,
             "properties_raw": f"TAGS\x01tagA\x02k\x01{o}" + (f"\x02UNIQ_KEY\x01U{o}" if o % 2 else ""),
             "born_timestamp": 1, "store_timestamp": 2, "reconsume_times": 0, "body": f"body-{o}".encode(),
             "window_id": window_id} for o in offsets]
    table = pa.Table.from_pylist(rows, schema=mf.staged_file_schema())
    if columns is not None:
        table = table.select(columns)
    pq.write_table(table, path)
    return mf.FileEntry(path=path.name, rows=table.num_rows, bytes=path.stat().st_size, sha256=file_sha256(path))


def test_raw_layout_files_read_back_as_the_loads_see_them(tmp_path: Path) -> None:
    wid = new_window_id()
    fe = _raw_file(tmp_path / "part-00000.parquet", wid, range(3))
    m = WindowManifest(window_id=wid, topic="T", consumer_group="G",
                       queues=[QueueRange("broker-a", 0, 0, 3, 3, 3)], files=[fe], messages=3, bytes=18)
    read_manifest(write_manifest(m, tmp_path))  # verifies the file, its layout included
    rows = mf.staged_rows(pq.read_table(tmp_path / "part-00000.parquet"))
    assert rows.schema.equals(mf.STAGED_SCHEMA) and mf.staged_rows_schema(pq.read_schema(
        tmp_path / "part-00000.parquet")).equals(mf.STAGED_SCHEMA)
    got = rows.to_pylist()
    assert [r["tags"] for r in got] == ["tagA"] * 3 and [dict(r["properties"])["k"] for r in got] == ["0", "1", "2"]
    # UNIQ_KEY where the message has one, else the offset message id (store host + commit-log offset)
    assert [r["msg_id"] for r in got] == ["7F000001" "00002A9F" + f"{1000:016X}", "U1",
                                          "7F000001" "00002A9F" + f"{1000 + 97 * 2:016X}"]
    assert [r["window_id"] for r in got] == [wid] * 3
    # a file of the messages layout reads back unchanged
    plain = pq.read_table(tmp_path.joinpath(write_parquet_file(_rows(wid, range(2)), tmp_path / "m.parquet").path))
    assert mf.staged_rows(plain) is plain


def test_version_1_manifests_still_load_and_list_messages_files_only(tmp_path: Path) -> None:
    path, _ = _window(tmp_path)  # a messages-layout file, as version 1 windows wrote
    data = json.loads(path.read_text())
    data["version"] = 1
    path.write_text(json.dumps(data))
    assert read_manifest(path).version == 1
    fe = _raw_file(tmp_path / "part-00000.parquet", data["window_id"], range(5))
    data["files"][0].update(bytes=fe.bytes, sha256=fe.sha256)
    path.write_text(json.dumps(data))
    with pytest.raises(ManifestError) as ei:
        read_manifest(path)
    assert ei.value.field == "files[0].path" and "not a staged file of manifest version 1" in str(ei.value)
    assert "msg_id" in str(ei.value)


def test_a_staged_file_missing_a_column_names_it(tmp_path: Path) -> None:
    wid = new_window_id()
    cols = [c for c in mf.STAGED_FILE_COLUMNS if c != "properties_raw"]
    fe = _raw_file(tmp_path / "part-00000.parquet", wid, range(3), cols)
    m = WindowManifest(window_id=wid, topic="T", consumer_group="G",
                       queues=[QueueRange("broker-a", 0, 0, 3, 3, 3)], files=[fe], messages=3, bytes=18)
    with pytest.raises(ManifestError) as ei:
        read_manifest(write_manifest(m, tmp_path))
    assert ei.value.field == "files[0].path" and "raw: properties_raw" in str(ei.value)


def test_files_of_both_layouts_in_one_window_are_refused(tmp_path: Path) -> None:
    wid = new_window_id()
    raw = _raw_file(tmp_path / "a.parquet", wid, range(3))
    messages = write_parquet_file(_rows(wid, range(3, 5)), tmp_path / "b.parquet", tmp_path)
    m = WindowManifest(window_id=wid, topic="T", consumer_group="G",
                       queues=[QueueRange("broker-a", 0, 0, 5, 5, 5)], files=[raw, messages], messages=5, bytes=28)
    with pytest.raises(ManifestError) as ei:
        read_manifest(write_manifest(m, tmp_path))
    assert ei.value.field == "files[1].path" and "share one layout" in str(ei.value)


def test_not_json_and_not_found(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_bytes(b"{not json")
    with pytest.raises(ManifestError, match="not valid JSON"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("[1, 2]")
    with pytest.raises(ManifestError, match="expected a JSON object"):
        read_manifest(tmp_path)
    with pytest.raises(ManifestError, match="file not found"):
        read_manifest(tmp_path / "nope.json")


def test_write_refuses_an_invalid_manifest(tmp_path: Path) -> None:
    m = WindowManifest(window_id="w", topic="T", consumer_group="G",
                       queues=[QueueRange("b", 0, 5, 3, 9, 0)])
    with pytest.raises(ManifestError, match=r"queues\[0\]\.end_offset"):
        write_manifest(m, tmp_path / "manifest.json")
    assert not any(tmp_path.iterdir())


def test_overwrite_is_atomic_replace(tmp_path: Path) -> None:
    path, m = _window(tmp_path)
    inode_before = path.stat().st_ino
    m.namesrv = "10.0.0.1:9876"
    write_manifest(m, path)
    assert read_manifest(path).namesrv == "10.0.0.1:9876"
    assert path.stat().st_ino != inode_before  # replaced by rename, never rewritten in place


def test_bad_rows_are_rejected_without_leaving_a_file(tmp_path: Path) -> None:
    rows = _rows("w", range(2))
    rows[1]["queue_offset"] = "seven"
    with pytest.raises(ManifestError, match="cannot stage rows"):
        write_parquet_file(rows, tmp_path / "bad.parquet")
    rows = _rows("w", range(2))
    rows[0]["topic"] = None
    with pytest.raises(ManifestError) as ei:
        write_parquet_file(rows, tmp_path / "bad.parquet")
    assert ei.value.field == "rows.topic"
    assert not [p for p in os.listdir(tmp_path)]

