"""``rocketmq-airflow window --handoff offsets`` and ``window-commit`` against the embedded broker:
the offsets window consumes and commits nothing; window-commit moves the group to the manifest's
end offsets once, never backwards, and a bad manifest commits nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_provider_rocketmq.cli import main
from airflow_provider_rocketmq.client import Admin, ClientConfig, Message, Producer
from airflow_provider_rocketmq.embedded import EmbeddedCluster
from airflow_provider_rocketmq.window.manifest import read_manifest

TOPIC, GROUP = "CliWinT", "cli_win_group"


@pytest.fixture
def cluster(embedded_cluster_factory: Callable[..., EmbeddedCluster]) -> EmbeddedCluster:
    c = embedded_cluster_factory(brokers=1, queues=2)
    c.create_topic(TOPIC, 2)
    with Producer(ClientConfig(namesrv_addr=c.namesrv_addr), group="cli_win_p") as producer:
        for i, mq in enumerate(producer.publish_queues(TOPIC)):  # 10 and 20 messages
            producer.send_batch([Message(TOPIC, f"m{i}-{j}".encode()) for j in range(10 * (i + 1))], queue=mq)
    return c


def _lag(cluster: EmbeddedCluster) -> int:
    with Admin(ClientConfig(namesrv_addr=cluster.namesrv_addr)) as admin:
        return int(admin.lag(GROUP, TOPIC).to_dict()["total_lag"])


def _cli(capsys: pytest.CaptureFixture[str], cluster: EmbeddedCluster, *argv: str) -> tuple[int, str, str]:
    code = main([argv[0], "--namesrv", cluster.namesrv_addr, *argv[1:]])
    out, err = capsys.readouterr()
    return code, out, err


def test_offsets_handoff_then_window_commit(cluster: EmbeddedCluster, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    staging = tmp_path / "w1"
    code, out, err = _cli(capsys, cluster, "window", "--group", GROUP, "--topic", TOPIC, "--staging", str(staging),
                          "--handoff", "offsets", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["handoff"] == "offsets" and result["messages"] == 30 and result["committed"] is None
    manifest = read_manifest(staging)
    assert manifest.handoff == "offsets" and manifest.files == []
    assert sorted((q.queue_id, q.start_offset, q.end_offset) for q in manifest.queues) == [(0, 0, 10), (1, 0, 20)]
    assert _lag(cluster) == 30  # nothing consumed, nothing committed

    code, out, err = _cli(capsys, cluster, "window-commit", str(staging), "--json")
    assert code == 0, err
    assert sorted(json.loads(out)["committed"].values()) == [10, 20]
    assert _lag(cluster) == 0
    code, out, err = _cli(capsys, cluster, "window-commit", str(staging / "manifest.json"))
    assert code == 0 and "nothing to commit" in out, err  # a second commit moves nothing

    # the next offsets window starts where the group is; committing the older one again never goes back
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr), group="cli_win_p") as producer:
        producer.send_batch([Message(TOPIC, b"late") for _ in range(5)], queue=producer.publish_queues(TOPIC)[0])
    code, out, err = _cli(capsys, cluster, "window", "--group", GROUP, "--topic", TOPIC, "--staging",
                          str(tmp_path / "w2"), "--handoff", "offsets")
    assert code == 0 and "5 offsets" in out and "not committed" in out, err
    assert [(q.start_offset, q.end_offset) for q in read_manifest(tmp_path / "w2").queues] == [(10, 15), (20, 20)]
    code, out, err = _cli(capsys, cluster, "window-commit", str(staging), str(tmp_path / "w2"))
    assert code == 0, err
    assert _lag(cluster) == 0


def test_bad_input_names_the_flag_or_manifest_and_commits_nothing(cluster: EmbeddedCluster, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, cluster, "window", "--group", GROUP, "--topic", TOPIC, "--staging",
                          str(tmp_path / "w"), "--handoff", "offsets", "--max-bytes", "100")
    assert code == 2 and out == "" and "--max-bytes" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "w").exists()

    good = tmp_path / "good"
    assert _cli(capsys, cluster, "window", "--group", GROUP, "--topic", TOPIC, "--staging", str(good),
                "--handoff", "offsets")[0] == 0
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifest.json").write_text("{not json", encoding="utf-8")
    code, out, err = _cli(capsys, cluster, "window-commit", str(good), str(bad))
    assert code == 2 and out == "" and "not valid JSON" in err and str(bad) in err, err
    assert _lag(cluster) == 30  # the good manifest was not committed either
    code, out, err = _cli(capsys, cluster, "window-commit", str(tmp_path / "missing"))
    assert code == 2 and "file not found" in err, err


def test_a_staging_window_with_no_commit_is_committed_by_window_commit(
        cluster: EmbeddedCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    staging = tmp_path / "s"
    code, out, err = _cli(capsys, cluster, "window", "--group", GROUP, "--topic", TOPIC, "--staging", str(staging),
                          "--no-commit", "--max-duration", "30", "--json")
    assert code == 0, err
    assert json.loads(out)["messages"] == 30 and _lag(cluster) == 30
    code, out, err = _cli(capsys, cluster, "window-commit", str(staging))
    assert code == 0 and out.count("committed ") == 2, err
    assert _lag(cluster) == 0


def test_a_pull_refused_by_the_acl_fails_the_window_at_once(cluster: EmbeddedCluster, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The heartbeat passes, every pull is refused (a 5.x broker's answer): the window ends with the
    refusal - exit 2, no manifest, nothing committed - rather than staging nothing after its idle timeout."""
    cluster.brokers[0].faults.respond(
        11, 16, f"User:etl has no permission to access Group:{GROUP} from 127.0.0.1, the decision is deny.")
    staging = tmp_path / "refused"
    code, out, err = _cli(capsys, cluster, "window", "--group", GROUP, "--topic", TOPIC, "--staging", str(staging),
                          "--idle-timeout", "600", "--assignment-timeout", "600", "--json")
    assert code == 2 and out == "", err
    assert "access denied by broker" in err and f"user etl lacks Sub on Group:{GROUP} (PULL_MESSAGE)" in err
    assert not (staging / "manifest.json").exists()
    assert _lag(cluster) == 30
