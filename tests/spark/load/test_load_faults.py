"""The fault matrix of load_window.py, per output kind, with real spark-submit processes.

Kinds: ``local`` (a directory: hard-linked ledger entries, flock) and ``s3`` (moto's S3 server on
127.0.0.1 through s3fs: create-if-absent ledger entries, Spark tasks writing through fsspec).
Cases, each on its own output, loading one staged window W (3 queues x N offsets):

(a) the driver is killed (SIGKILL of the Python driver and the spark-submit JVM) by the first
    task that finished its files, while the other task still writes;
(b) the driver dies after every data file is written, before the ledger commit;
(c) the driver dies after the commit, before publishing (c0) / after publishing one file (c1);
(d) the load succeeds, the offset commit fails, and the next window restages the same offsets
    plus new ones under another window id;
(e) two loads of the same offsets into the same output at once (both planned against the empty
    ledger, held at a barrier until both reach the commit);
(f) a task attempt fails after writing its files and Spark retries it (local[2,2]);
(oa) / (of): (a) and (f) for an offsets hand-off of the same ranges (the embedded broker holds the
    messages): its tasks read their spans from the broker and write them (the direct plan), one
    task kills the driver while the other still reads and writes / partition 0's first attempt
    fails after writing its files.

After each, W is loaded again (the next DAG run) and the output must hold rows == distinct
(topic, broker, queue, offset) == every offset of the loaded ranges; after a kill before the
commit no row of the killed load is visible; after a kill during publication the reader sees a
part of the committed load and never a duplicate, until the next load finishes it.

Quick size in CI (N=1,000); ``ROCKETMQ_LOAD_FAULTS_N=200000`` for the full size. The crashed runs
go two at a time (independent outputs); the recovery loads share one Spark application.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from airflow_provider_rocketmq.client import ClientConfig, Message, MessageQueue, Producer
from airflow_provider_rocketmq.embedded import EmbeddedCluster
from airflow_provider_rocketmq.spark import LOAD_WINDOW_APP
from airflow_provider_rocketmq.spark.load.crash_points import BARRIER_ENV, CRASH_ENV, CRASH_EXIT
from airflow_provider_rocketmq.spark.load.ledger import LEDGER_DIR, LOADS_DIR
from airflow_provider_rocketmq.window.manifest import (
    HANDOFF_OFFSETS,
    QueueRange,
    WindowManifest,
    write_manifest,
)
from tests.s3_server import MotoS3
from tests.spark.conftest import FAULT_QUEUES, TWO_TASKS, Key, SparkRun, build_window, expected

STEPS_APP = str(Path(__file__).with_name("load_steps_app.py"))
N = int(os.environ.get("ROCKETMQ_LOAD_FAULTS_N", "1000"))
QUEUES = FAULT_QUEUES
# a subset (e.g. while checking that a test fails without its protection): ROCKETMQ_LOAD_FAULTS_KINDS=s3,
# ROCKETMQ_LOAD_FAULTS_CASES=a,e
KINDS = tuple(os.environ.get("ROCKETMQ_LOAD_FAULTS_KINDS", "local,s3").split(","))
CASES = tuple(os.environ.get("ROCKETMQ_LOAD_FAULTS_CASES", "a,b,c0,c1,d,e,f,oa,of").split(","))
CRASHES = {c: p for c, p in {"a": "task_write", "b": "before_commit", "c0": "before_publish",
                             "c1": "mid_publish", "oa": "task_write"}.items() if c in CASES}
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(7200)]  # a hang guard: minutes on a quiet machine


@dataclass
class Observed:
    """What a reader of the published dataset sees, and what the ledger/staging hold."""

    keys: list[Key]
    entries: int
    staged_files: int

    @property
    def figures(self) -> dict[str, int]:
        return {"rows": len(self.keys), "distinct": len(set(self.keys)),
                "duplicates": len(self.keys) - len(set(self.keys))}


@dataclass
class Matrix:
    root: Path
    s3: MotoS3
    bucket: str
    crashes: dict[tuple[str, str], tuple[SparkRun, Observed]] = field(default_factory=dict)
    concurrent: dict[str, list[SparkRun]] = field(default_factory=dict)
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    app_output: str = ""
    final: dict[tuple[str, str], Observed] = field(default_factory=dict)

    def url(self, kind: str, case: str) -> str:
        return str(self.root / "out" / case) if kind == "local" else f"s3://{self.bucket}/{case}"

    def env(self) -> dict[str, str]:
        return {"ROCKETMQ_OUTPUT_STORAGE_OPTIONS": json.dumps(self.s3.storage_options)}

    def observe(self, kind: str, case: str) -> Observed:
        url = self.url(kind, case)
        if kind == "local":
            fs, path = None, url
            exists = Path(url).exists()
        else:
            fs, path = self.s3.filesystem(), url.removeprefix("s3://")
            fs.invalidate_cache()
            exists = fs.exists(path)
        if not exists:
            return Observed([], 0, 0)
        d = ds.dataset(path, filesystem=fs, format="parquet", partitioning="hive")
        keys: list[Key] = []
        if d.files:
            t = d.to_table(columns=["broker", "queue_id", "queue_offset"])
            keys = sorted(zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True))
        if fs is None:
            entries = len(list((Path(url) / LEDGER_DIR).glob("*.json")))
            staged = len(list((Path(url) / LOADS_DIR).rglob("*.parquet")))
        else:
            entries = len([p for p in fs.find(f"{path}/{LEDGER_DIR}") if p.endswith(".json")])
            staged = len([p for p in fs.find(f"{path}/{LOADS_DIR}") if p.endswith(".parquet")])
        return Observed(keys, entries, staged)


def _argv(manifest: Path, url: str, *extra: str) -> list[str]:
    return ["--manifest", str(manifest), "--output", url, *extra]


def offsets_window(cluster: EmbeddedCluster, directory: Path) -> Path:
    """The fault matrices' queues on ``cluster``, offsets 0..N-1 each, and an offsets manifest of them."""
    cluster.create_topic("orders", 2, brokers=["broker-a"])
    cluster.create_topic("orders", 1, brokers=["broker-b"])
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr), group="faults_p") as producer:
        for b, q in QUEUES:
            for lo in range(0, N, 500):
                producer.send_batch([Message("orders", f"{b}/{q}/{o}".encode()) for o in range(lo, min(N, lo + 500))],
                                    queue=MessageQueue("orders", b, q))
    m = WindowManifest(window_id="wo", topic="orders", consumer_group="G", namesrv=cluster.namesrv_addr,
                       queues=[QueueRange(b, q, 0, N, N, 0) for b, q in QUEUES], handoff=HANDOFF_OFFSETS)
    directory.mkdir(parents=True)
    return write_manifest(m, directory)


@pytest.fixture(scope="module")
def broker() -> Any:
    with EmbeddedCluster(brokers=2, queues=2) as cluster:
        yield cluster


def _next_loads(m: Matrix, w: Path, w_twin: Path, w_more: Path, wo: Path) -> list[dict[str, Any]]:
    """Phase 2's loads: what runs after each crash (the next DAG run), and cases d, e, f, of."""
    plan: list[dict[str, Any]] = []
    for kind in KINDS:
        extra = ("--abandon-after", "0") if kind == "s3" else ()  # the killed loads are discarded now
        for case in CRASHES:
            plan.append({"label": f"{kind}-{case}", "argv": _argv(wo if case.startswith("o") else w,
                                                                  m.url(kind, case), *extra),
                         "output": m.url(kind, case)})
        if "e" in CASES:
            plan.append({"label": f"{kind}-e-again", "argv": _argv(w_twin, m.url(kind, "e")),
                         "output": m.url(kind, "e")})
        if "d" in CASES:
            plan.append({"label": f"{kind}-d-1", "argv": _argv(w, m.url(kind, "d")), "output": m.url(kind, "d")})
            plan.append({"label": f"{kind}-d-2", "argv": _argv(w_more, m.url(kind, "d")),
                         "output": m.url(kind, "d")})
        if "f" in CASES:
            plan.append({"label": f"{kind}-f", "argv": _argv(w, m.url(kind, "f")), "output": m.url(kind, "f"),
                         "env": {CRASH_ENV: "task_fail_once"}})
        if "of" in CASES:
            plan.append({"label": f"{kind}-of", "argv": _argv(wo, m.url(kind, "of")), "output": m.url(kind, "of"),
                         "env": {CRASH_ENV: "task_fail_once"}})
    return plan


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory, spark_app: Callable[..., SparkRun], s3: MotoS3,
           broker: EmbeddedCluster) -> Matrix:
    root = tmp_path_factory.mktemp("faults")
    m = Matrix(root, s3, s3.new_bucket("faults"))
    w = build_window(root / "stage" / "w", "w", [(b, q, range(N)) for b, q in QUEUES])
    wo = offsets_window(broker, root / "stage" / "wo")
    w_twin = build_window(root / "stage" / "w-twin", "w-twin", [(b, q, range(N)) for b, q in QUEUES])
    w_more = build_window(root / "stage" / "w-more", "w-more", [(b, q, range(N + N // 2)) for b, q in QUEUES])

    # phase 1: the killed drivers and the concurrent pair, two spark-submits at a time
    jobs = [(kind, case, point) for kind in KINDS for case, point in CRASHES.items()]

    def crash(job: tuple[str, str, str]) -> SparkRun:
        kind, case, point = job
        return spark_app(LOAD_WINDOW_APP, *_argv(wo if case.startswith("o") else w, m.url(kind, case)),
                         options=TWO_TASKS, env={**m.env(), CRASH_ENV: point}, timeout=1800)

    with ThreadPoolExecutor(2) as pool:
        for (kind, case, _), run in zip(jobs, pool.map(crash, jobs), strict=True):
            m.crashes[(kind, case)] = (run, m.observe(kind, case))
        for kind in KINDS if "e" in CASES else ():
            barrier = root / f"barrier-{kind}"
            pair = [pool.submit(spark_app, LOAD_WINDOW_APP, *_argv(man, m.url(kind, "e")), options=TWO_TASKS,
                                env={**m.env(), BARRIER_ENV: f"{barrier}:2"}, timeout=1800) for man in (w, w_twin)]
            m.concurrent[kind] = [f.result() for f in pair]

    # phase 2: the next loads, on one Spark application that allows a task retry (case f)
    plan = _next_loads(m, w, w_twin, w_more, wo)
    plan_file, results_file = root / "plan.json", root / "results.json"
    plan_file.write_text(json.dumps(plan))
    app = spark_app(STEPS_APP, str(plan_file), str(results_file), options=["--master", "local[2,2]", *TWO_TASKS],
                    env=m.env(), timeout=1800)
    assert app.returncode == 0, app.output[-4000:]
    m.steps = {r["label"]: r for r in json.loads(results_file.read_text())}
    m.app_output = app.output
    for kind in KINDS:
        for case in CASES:
            m.final[(kind, case)] = m.observe(kind, case)
    _print_figures(m)
    if os.environ.get("ROCKETMQ_LOAD_FAULTS_KEEP") is None:
        shutil.rmtree(root / "stage", ignore_errors=True)
    return m


def _print_figures(m: Matrix) -> None:
    lines = ["kind  case  after-crash rows/distinct/dup  final rows distinct duplicates lost"]
    for (kind, case), obs in sorted(m.final.items()):
        want = len(expected(range(N + N // 2))) if case == "d" else len(expected(range(N)))
        crash = m.crashes.get((kind, case))
        at_crash = "-" if crash is None else "/".join(str(v) for v in crash[1].figures.values())
        f = obs.figures
        lines.append(f"{kind:5} {case:5} {at_crash:30} {f['rows']:5} {f['distinct']:8} {f['duplicates']:10} "
                     f"{want - len(set(obs.keys) & set(expected(range(N + N // 2)))):4}")
    print("\n" + "\n".join(lines))


def _need(kind: str, case: str) -> None:
    if kind not in KINDS or case not in CASES:
        pytest.skip(f"not selected: ROCKETMQ_LOAD_FAULTS_KINDS={','.join(KINDS)} CASES={','.join(CASES)}")


def step(m: Matrix, label: str) -> dict[str, Any]:
    s = m.steps[label]
    assert s["rc"] == 0, s["stdout"] + s["stderr"]
    return s


def counts(s: dict[str, Any]) -> dict[str, int]:
    line = next(ln for ln in s["stdout"].splitlines() if ln.startswith("load_window: windows="))
    return {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}


def exact(obs: Observed, offsets: range) -> None:
    """rows == distinct == every offset of the loaded ranges: no duplicate, nothing lost."""
    assert obs.figures["duplicates"] == 0
    assert obs.keys == expected(offsets)


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_a_driver_killed_while_tasks_write_leaves_nothing_visible(matrix: Matrix, kind: str) -> None:
    _need(kind, "a")
    run, seen = matrix.crashes[(kind, "a")]
    assert run.returncode in (-9, 137), run.output[-3000:]  # SIGKILL, not a clean exit
    assert seen.keys == [] and seen.entries == 0
    assert seen.staged_files >= 1  # the finished task's files, invisible under _rocketmq_loads/
    again = step(matrix, f"{kind}-a")
    assert "load_window: note: removed load" in again["stderr"]
    assert counts(again)["rows_out"] == 3 * N
    exact(matrix.final[(kind, "a")], range(N))
    assert matrix.final[(kind, "a")].staged_files == 0


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_b_driver_killed_before_the_commit_leaves_nothing_visible(matrix: Matrix, kind: str) -> None:
    _need(kind, "b")
    run, seen = matrix.crashes[(kind, "b")]
    assert run.returncode == CRASH_EXIT and "test crash at before_commit" in run.output, run.output[-3000:]
    assert seen.keys == [] and seen.entries == 0 and seen.staged_files >= 2
    again = step(matrix, f"{kind}-b")
    assert "load_window: note: removed load" in again["stderr"]
    assert counts(again) == {"windows": 1, "rows_in": 3 * N, "rows_out": 3 * N, "duplicates": 0, "already_loaded": 0}
    exact(matrix.final[(kind, "b")], range(N))
    assert matrix.final[(kind, "b")].staged_files == 0


@pytest.mark.parametrize("kind", ["local", "s3"])
@pytest.mark.parametrize("case", ["c0", "c1"])
def test_c_driver_killed_while_publishing_converges_at_the_next_load(matrix: Matrix, kind: str, case: str) -> None:
    _need(kind, case)
    run, seen = matrix.crashes[(kind, case)]
    assert run.returncode == CRASH_EXIT and f"test crash at {CRASHES[case]}" in run.output, run.output[-3000:]
    assert seen.entries == 1  # committed
    assert seen.figures["duplicates"] == 0 and set(seen.keys) <= set(expected(range(N)))
    if case == "c0":
        assert seen.keys == []  # nothing published yet
    else:
        assert 0 < len(seen.keys) < 3 * N  # one file of the committed load is visible, the rest not yet
    again = step(matrix, f"{kind}-{case}")
    assert "load_window: note: finished publishing load" in again["stderr"]
    # the next load finishes the publication and finds every offset held (the window is not even read)
    assert counts(again) == {"windows": 1, "rows_in": 3 * N, "rows_out": 0, "duplicates": 0, "already_loaded": 3 * N}
    exact(matrix.final[(kind, case)], range(N))
    assert matrix.final[(kind, case)].entries == 1 and matrix.final[(kind, case)].staged_files == 0


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_d_offset_commit_failed_and_the_next_window_overlaps(matrix: Matrix, kind: str) -> None:
    _need(kind, "d")
    assert counts(step(matrix, f"{kind}-d-1"))["rows_out"] == 3 * N
    more = counts(step(matrix, f"{kind}-d-2"))
    assert more == {"windows": 1, "rows_in": 3 * (N + N // 2), "rows_out": 3 * (N // 2), "duplicates": 0,
                    "already_loaded": 3 * N}
    exact(matrix.final[(kind, "d")], range(N + N // 2))


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_e_two_loads_of_one_output_at_once_one_commits(matrix: Matrix, kind: str) -> None:
    _need(kind, "e")
    runs = matrix.concurrent[kind]
    if sorted(r.returncode for r in runs) != [0, 3]:
        # pytest.fail keeps the whole text (an assertion message is cut in the middle)
        pytest.fail("exit codes " + str([r.returncode for r in runs]) + "".join(
            f"\n--- run {i} exit {r.returncode} stdout:\n{r.stdout[-6000:]}\n--- run {i} stderr:\n{r.stderr[-3000:]}"
            for i, r in enumerate(runs)), pytrace=False)
    loser = next(r for r in runs if r.returncode == 3)
    # (spark-submit may relay the driver's stderr on its stdout)
    assert "load_window: conflict:" in loser.output and "nothing of this load was published" in loser.output
    winner = next(r for r in runs if r.returncode == 0)
    assert winner.counts()["rows_out"] == 3 * N
    # the loser run again: its offsets are held, nothing is added
    assert counts(step(matrix, f"{kind}-e-again"))["rows_out"] == 0
    final = matrix.final[(kind, "e")]
    exact(final, range(N))
    assert final.entries == 1


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_f_a_retried_task_attempt_publishes_its_rows_once(matrix: Matrix, kind: str) -> None:
    _need(kind, "f")
    s = step(matrix, f"{kind}-f")
    assert counts(s)["rows_out"] == 3 * N
    exact(matrix.final[(kind, "f")], range(N))
    # the first attempt of partition 0 wrote its files and failed; Spark ran it again
    assert matrix.app_output.count("test failure of a task attempt after it wrote its files") >= 2
    seen = Counter(k for k in matrix.final[(kind, "f")].keys)
    assert max(seen.values()) == 1


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_oa_offsets_handoff_driver_killed_while_tasks_read_and_write_leaves_nothing_visible(
        matrix: Matrix, kind: str) -> None:
    _need(kind, "oa")
    run, seen = matrix.crashes[(kind, "oa")]
    assert run.returncode in (-9, 137), run.output[-3000:]  # SIGKILL, not a clean exit
    assert seen.keys == [] and seen.entries == 0
    assert seen.staged_files >= 1  # the finished task's files, invisible under _rocketmq_loads/
    again = step(matrix, f"{kind}-oa")
    assert "load_window: note: removed load" in again["stderr"]
    assert "load_window: read: plan=direct " in again["stderr"]  # the tasks read the broker themselves
    assert counts(again) == {"windows": 1, "rows_in": 3 * N, "rows_out": 3 * N, "duplicates": 0, "already_loaded": 0}
    exact(matrix.final[(kind, "oa")], range(N))
    assert matrix.final[(kind, "oa")].staged_files == 0


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_of_offsets_handoff_retried_task_attempt_publishes_its_rows_once(matrix: Matrix, kind: str) -> None:
    _need(kind, "of")
    s = step(matrix, f"{kind}-of")
    assert "load_window: read: plan=direct " in s["stderr"]
    assert counts(s)["rows_out"] == 3 * N
    exact(matrix.final[(kind, "of")], range(N))
    assert "test failure of a task attempt after it wrote its files" in matrix.app_output
