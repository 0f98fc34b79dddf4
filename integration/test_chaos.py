"""Quick mode of the chaos proof (integration/chaos, docs/reliability.md): a few fixed seeds, each a
short randomized run of window -> spark-submit load -> commit under faults, on an embedded broker
of its own (a subprocess, so broker kills are real kill -9s), ending with the checker's verdict:
every stored message in the output exactly once, per-key order, lag 0.

The seeds are chosen so that the quick runs cover every output kind and every fault kind the
embedded broker allows (all but the network cut, which needs root and a namespace: full mode),
and they include the regression seeds of failures the harness found (``REGRESSIONS``).
Runs do not depend on timing for their verdict; on a loaded machine they only take longer.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .chaos.cluster import EmbeddedProcessCluster
from .chaos.flow import ChaosRun, SparkSetup
from .chaos.regressions import QUICK, Seed
from .chaos.schedule import draw

# a hang guard above the harness's own step bounds: about 50 s per seed on a quiet machine, several times that loaded
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def chaos_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedProcessCluster]:
    cluster = EmbeddedProcessCluster(tmp_path_factory.mktemp("chaos-cluster"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def spark_setup() -> SparkSetup:
    try:
        return SparkSetup.from_env_sh()
    except RuntimeError as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("case", QUICK, ids=[f"seed{c.seed}" for c in QUICK])
def test_chaos_seed(case: Seed, chaos_cluster: EmbeddedProcessCluster, spark_setup: SparkSetup,
                    tmp_path: Path) -> None:
    schedule = draw(case.seed, chaos_cluster.capabilities, cycles=case.cycles, outputs=case.outputs,
                    kinds=case.faults)
    print(schedule.describe())
    record = ChaosRun(schedule, chaos_cluster, tmp_path / "run", spark_setup, log=print).run()
    print(record["line"])
    v = record["verdict"] or {}
    details = "\n".join([*(f"{k}: {e}" for k, e in (v.get("examples") or {}).items()),
                         *record["problems"], record.get("traceback", "")])
    assert record["ok"], f"{record['line']}\n{details}\nfiles: {record['workdir']}"
    if os.environ.get("ROCKETMQ_CHAOS_STRICT_FAULTS") == "1":  # every drawn fault really injected
        missed = [f for f in record["faults"] if not f["verified"]]
        assert not missed, missed
