"""S14 (issue 14): the issue's CLI scenario round after round, against a broker with a real 4.x
broker's offset behaviour (the suite's own embedded broker with OffsetFaults on) or against
ROCKETMQ_NAMESRV / the suite's broker container, under CPU load: the second consume must never get anything again."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ..backends import ContainerCluster
from .conftest import Mode
from .harness import REPO, Broker, Stopwatch, cpu_load, figure, load_average

FAULTS = "offset-race,pull-commit-delay"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflow_provider_rocketmq.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=180, check=False)


def test_s14_clean_shutdown_keeps_offsets(mode: Mode, suite_containers: ContainerCluster | None) -> None:
    rounds = mode.pick(2, 200)
    burners = mode.pick(1, os.cpu_count() or 2)
    own = not os.environ.get("ROCKETMQ_NAMESRV", "").strip() and suite_containers is None
    broker = Broker.from_environment(faults=FAULTS if own else None, queues=4, container=suite_containers)
    clock = Stopwatch()
    redelivered = 0
    bad: list[str] = []
    try:
        ns = broker.namesrv
        with cpu_load(burners):
            for r in range(rounds):
                topic = broker.new_topic(f"s14_{r}", 4)
                group = broker.new_name(f"s14g{r}")
                for count, tag, size in (("6", "TagA", "5000"), ("3", "TagC", "16")):
                    sent = cli("produce", "--namesrv", ns, "--topic", topic, "--count", count, "--tag", tag,
                               "--size", size)
                    assert sent.returncode == 0, sent.stderr
                first = cli("consume", "--namesrv", ns, "--topic", topic, "--group", group, "--from", "first",
                            "--expression", "TagA", "--max-messages", "6", "--idle-timeout", "60", "--json")
                summary = json.loads(first.stderr.strip().splitlines()[-1]) if first.stderr.strip() else {}
                if first.returncode != 0 or len(first.stdout.splitlines()) != 6 or not summary.get("offsets_committed"):
                    bad.append(f"round {r}: first consume rc={first.returncode} "
                               f"lines={len(first.stdout.splitlines())} {first.stderr.strip()[-300:]}")
                again = cli("consume", "--namesrv", ns, "--topic", topic, "--group", group, "--from", "first",
                            "--expression", "TagA", "--idle-timeout", "2", "--json")
                n_again = len(again.stdout.splitlines())
                redelivered += n_again
                if n_again:
                    bad.append(f"round {r}: {n_again} message(s) delivered again: {again.stdout[:300]}")
        load = load_average()
    finally:
        broker.close()
    figure("S14", "issue-14 clean-shutdown offsets (CLI scenario)", rounds=rounds, redelivered=redelivered,
           failed_rounds=len(bad), faults=broker.faults or "none", broker=broker.kind, cpu_burners=burners,
           load=load, seconds=clock())
    assert not bad, bad[:5]
