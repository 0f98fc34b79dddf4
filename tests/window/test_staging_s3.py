"""Windows staged on a real S3 API (moto server on 127.0.0.1, s3fs): staging, reuse, torn uploads, checksums."""

from __future__ import annotations

import asyncio
import io
from typing import Any, ClassVar

import pyarrow.parquet as pq
import pytest

from airflow_provider_rocketmq.client.protocol.errors import MessageDecodeError
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from airflow_provider_rocketmq.window import manifest as mf
from airflow_provider_rocketmq.window.manifest import ManifestError, read_manifest, staged_file_urls
from airflow_provider_rocketmq.window.runner import WindowSpec, run_window
from airflow_provider_rocketmq.window.staging import StagingLocation
from airflow_provider_rocketmq.window.writer import WriterError
from tests.s3_server import MotoS3
from tests.window_batches import batch, batch_with_bad_properties

MQ0 = MessageQueue("t", "broker-a", 0)
MQ1 = MessageQueue("t", "broker-a", 1)


class Admin:
    def __init__(self, high_water: dict[MessageQueue, int]) -> None:
        self.hw = high_water
        self.committed: dict[MessageQueue, int] = {}

    def high_water_marks(self, topic: str) -> dict[MessageQueue, int]:
        return dict(self.hw)

    def committed_offset(self, group: str, mq: MessageQueue) -> int:
        return self.committed.get(mq, -1)

    def update_consumer_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        self.committed[mq] = offset

    def min_offset(self, mq: MessageQueue) -> int:
        return 0

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return 0

    def consumer_ids(self, group: str) -> list[str]:
        return ["me"]


class Consumer:
    """Owns both queues and delivers their batches, in order, from start()."""

    made: ClassVar[list[Consumer]] = []

    def __init__(self, listener: Any, batches: list[Any]) -> None:
        self.listener, self.batches, self.state = listener, batches, "CREATED"
        Consumer.made.append(self)

    def on_assignment(self, callback: Any) -> None:
        self.callback = callback

    def on_failure(self, callback: Any) -> None:
        self.failure_callback = callback

    def set_stop_offsets(self, offsets: Any) -> None:
        pass

    def suspend(self) -> None:
        pass

    def start(self) -> None:
        self.state = "RUNNING"
        self.callback("t", [MQ0, MQ1], [MQ0, MQ1])
        for b in self.batches:  # the window's listener is a coroutine function (run on the consumer's loop)
            asyncio.run(self.listener(b, None))

    def shutdown(self, timeout: float | None = None) -> None:
        self.state = "SHUTDOWN"


def spec(url: str, s3: MotoS3, **kwargs: Any) -> WindowSpec:
    return WindowSpec(topic="t", consumer_group="g", staging_dir=url, window_id="w1", assignment_timeout=5,
                      idle_timeout=5, storage_options=s3.storage_options, **kwargs)


def deliveries() -> list[Any]:
    return [batch(("broker-a", 0), range(32)), batch(("broker-a", 1), range(10)),
            batch(("broker-a", 0), range(32, 40))]


def rows(url: str, s3: MotoS3) -> list[dict[str, Any]]:
    manifest = read_manifest(url + "/manifest.json", storage_options=s3.storage_options)
    fs = s3.filesystem()
    out: list[dict[str, Any]] = []
    for file_url in staged_file_urls(url, manifest):
        out += mf.staged_rows(pq.read_table(io.BytesIO(fs.cat_file(file_url)))).to_pylist()
    return out


def test_stage_to_s3_then_reuse_the_manifest(s3: MotoS3) -> None:
    url = f"s3://{s3.new_bucket()}/windows/dag/run1/task"
    admin = Admin({MQ0: 40, MQ1: 10})
    result = run_window(spec(url, s3, rows_per_file=16), admin, lambda listener: Consumer(listener, deliveries()))
    assert result.manifest == url + "/manifest.json" and result.messages == 50
    got = rows(url, s3)  # the manifest read back verifies every file's size, SHA-256 and rows
    assert sorted((r["queue_id"], r["queue_offset"]) for r in got) == \
        sorted([(0, o) for o in range(40)] + [(1, o) for o in range(10)])
    assert {r["window_id"] for r in got} == {"w1"}
    manifest = read_manifest(result.manifest, storage_options=s3.storage_options)
    assert [f.rows for f in manifest.files] == [16, 16, 16, 2]
    assert admin.committed == {MQ0: 40, MQ1: 10}

    # a retry of the task finds the manifest: no consumer, same window
    Consumer.made.clear()
    again = run_window(spec(url, s3), admin, lambda listener: Consumer(listener, []))
    assert (again.reused, again.manifest, again.messages) == (True, result.manifest, 50)
    assert Consumer.made == []


def test_parts_without_a_manifest_and_unfinished_uploads_are_not_trusted(s3: MotoS3) -> None:
    bucket = s3.new_bucket()
    prefix = f"{bucket}/windows/run2"
    fs = s3.filesystem()
    fs.pipe_file(f"{prefix}/part-00000.parquet", b"a part of an attempt that died before its manifest")
    fs.pipe_file(f"{prefix}/part-00007.parquet", b"another")
    # an upload that never completed leaves no object, only a pending multipart upload
    mpu = fs.call_s3("create_multipart_upload", Bucket=bucket, Key="windows/run2/part-00001.parquet")
    fs.call_s3("upload_part", Bucket=bucket, Key="windows/run2/part-00001.parquet", PartNumber=1,
               UploadId=mpu["UploadId"], Body=b"x" * 1024)
    url = f"s3://{prefix}"
    result = run_window(spec(url, s3), Admin({MQ0: 40, MQ1: 10}), lambda listener: Consumer(listener, deliveries()))
    assert result.messages == 50 and len(rows(url, s3)) == 50
    assert sorted(p.rsplit("/", 1)[1] for p in fs.ls(prefix, refresh=True)) == ["manifest.json", "part-00000.parquet"]


def test_a_failed_write_publishes_no_part_and_no_manifest(s3: MotoS3) -> None:
    bucket = s3.new_bucket()
    url = f"s3://{bucket}/w"
    bad = [batch(("broker-a", 0), range(3)), batch_with_bad_properties(("broker-a", 0), 3)]
    admin = Admin({MQ0: 4, MQ1: 0})
    with pytest.raises(WriterError) as err:
        run_window(spec(url, s3), admin, lambda listener: Consumer(listener, bad))
    assert isinstance(err.value.__cause__, MessageDecodeError)
    assert s3.filesystem().ls(bucket, refresh=True) == [] and admin.committed == {}


def test_an_aborted_multipart_upload_leaves_nothing(s3: MotoS3) -> None:
    bucket = s3.new_bucket()
    location = StagingLocation(f"s3://{bucket}/w", {**s3.storage_options, "default_block_size": 5 << 20})
    f = location.open_write("part-00000.parquet")
    f.write(b"x" * (6 << 20))  # past one block: a multipart upload is under way
    fs = s3.filesystem()
    assert fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads")
    f.abort()
    assert not fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads")
    assert not location.exists("part-00000.parquet")
    del f  # the file object's finaliser must not complete the upload either
    assert not location.exists("part-00000.parquet")


def test_a_checksum_mismatch_is_a_clear_error(s3: MotoS3) -> None:
    url = f"s3://{s3.new_bucket()}/w"
    result = run_window(spec(url, s3), Admin({MQ0: 40, MQ1: 10}), lambda listener: Consumer(listener, deliveries()))
    fs = s3.filesystem()
    part = f"{url}/part-00000.parquet"
    data = bytearray(fs.cat_file(part))
    data[len(data) // 2] ^= 0xFF  # same size, different content
    fs.pipe_file(part, bytes(data))
    with pytest.raises(ManifestError) as err:
        read_manifest(result.manifest, storage_options=s3.storage_options)
    assert err.value.field == "files[0].sha256" and "checksum mismatch" in str(err.value)
    with pytest.raises(ManifestError):  # a retry does not reuse (nor commit) a window it cannot trust
        run_window(spec(url, s3), Admin({MQ0: 40, MQ1: 10}), lambda listener: Consumer(listener, []))
