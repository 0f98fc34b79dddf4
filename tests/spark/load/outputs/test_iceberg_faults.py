"""The fault matrix of load_window.py for the Iceberg output, with real spark-submit processes.

Kinds: ``iceberg`` (pyiceberg SQL catalog on sqlite, warehouse on local disk) and ``iceberg-s3``
(the same catalog kind, warehouse on moto's S3 server on 127.0.0.1: Spark tasks write the data
files through pyiceberg's FileIO). Cases, each into its own table, loading one staged window W
(3 queues x N offsets):

(a) the driver is killed (SIGKILL of the Python driver and the spark-submit JVM) by the first
    task that finished its files, while the other task still writes;
(b) the driver dies after every data file is written, before the commit;
(c) the driver dies during the commit: manifests and manifest list written, the catalog not
    asked yet (c); right after the catalog swapped the metadata (c1, committed);
(d) the load succeeds, the offset commit fails, and the next window restages the same offsets
    plus new ones under another window id;
(e) two loads of the same offsets into the same table at once (both planned against the same
    table state, held at a barrier until both reach the commit);
(f) a task attempt fails after writing its files and Spark retries it (local[2,2]);

and, on the local warehouse, two more loads through the same application: (j) JSON bodies
(stored as the validated text; an invalid body fails the load before anything is committed) and
(o) an offsets hand-off read from the embedded broker by the Spark tasks (the direct plan).

After each, W is loaded again (the next DAG run) and the table must hold rows == distinct
(topic, broker, queue, offset) == every offset of the loaded ranges, as pyiceberg and DuckDB read
it; no data file of a killed or losing load is referenced by the table (they stay as orphans).

Quick size in CI: N=1,000, every case on the local warehouse and (d) on S3 (the commit point
is the catalog's, whatever the warehouse; the S3 writes and a conflict on S3 are also covered
without Spark by test_iceberg_output.py, and the window DAG loads to S3 in test_airflow_dag_e2e.py);
``ROCKETMQ_LOAD_FAULTS_FULL=1`` runs every case on both, ``ROCKETMQ_LOAD_FAULTS_N`` sets N,
``ROCKETMQ_LOAD_FAULTS_CASES=c,e`` / ``ROCKETMQ_LOAD_FAULTS_KINDS=iceberg`` run only those.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_rocketmq.client import Admin, ClientConfig, Message, Producer
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from airflow_provider_rocketmq.embedded import EmbeddedCluster
from airflow_provider_rocketmq.spark import LOAD_WINDOW_APP
from airflow_provider_rocketmq.spark.load.crash_points import BARRIER_ENV, CRASH_ENV, CRASH_EXIT
from airflow_provider_rocketmq.window.snapshot import OffsetsWindow, snapshot_window
from tests.s3_server import MotoS3
from tests.spark.conftest import FAULT_QUEUES, TWO_TASKS, Key, SparkRun, build_window, expected
from tests.spark.load.outputs.iceberg_helpers import catalog_conf, conf_properties, duckdb_keys

STEPS_APP = str(Path(__file__).parents[1] / "load_steps_app.py")
N = int(os.environ.get("ROCKETMQ_LOAD_FAULTS_N", "1000"))
FULL = os.environ.get("ROCKETMQ_LOAD_FAULTS_FULL", "") not in ("", "0")
QUEUES = FAULT_QUEUES
KINDS = ("iceberg", "iceberg-s3")
CRASHES = {"a": "task_write", "b": "before_commit", "c": "mid_commit", "c1": "before_publish"}
# what runs on each kind (crash cases and the others); CI keeps S3 to the cases that differ most
CASES = {"iceberg": (*CRASHES, "d", "e", "f", "j", "o"),
         "iceberg-s3": (*CRASHES, "d", "e", "f") if FULL else ("d",)}
# a subset, to check one case quickly (e.g. while trying a mutation): ROCKETMQ_LOAD_FAULTS_CASES=c,e
_ONLY = [c for c in os.environ.get("ROCKETMQ_LOAD_FAULTS_CASES", "").split(",") if c]
if _ONLY:
    CASES = {k: tuple(c for c in v if c in _ONLY) for k, v in CASES.items()}
if os.environ.get("ROCKETMQ_LOAD_FAULTS_KINDS"):  # e.g. iceberg: the local warehouse only
    CASES = {k: v if k in os.environ["ROCKETMQ_LOAD_FAULTS_KINDS"].split(",") else () for k, v in CASES.items()}
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(7200)]  # a hang guard: minutes on a quiet machine


@dataclass
class Observed:
    """What the table holds (as pyiceberg reads it) and which data files exist / are referenced."""

    keys: list[Key]
    snapshots: int
    files: set[str]  # every data file under the table's data path
    referenced: set[str]
    duckdb: list[Key] | None = None

    @property
    def figures(self) -> dict[str, int]:
        return {"rows": len(self.keys), "distinct": len(set(self.keys)),
                "duplicates": len(self.keys) - len(set(self.keys))}


@dataclass
class Matrix:
    root: Path
    s3: MotoS3
    bucket: str
    confs: dict[str, Path] = field(default_factory=dict)
    crashes: dict[tuple[str, str], tuple[SparkRun, Observed]] = field(default_factory=dict)
    concurrent: dict[str, list[SparkRun]] = field(default_factory=dict)
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    app_output: str = ""
    final: dict[tuple[str, str], Observed] = field(default_factory=dict)
    json_bodies: list[str] = field(default_factory=list)

    def url(self, kind: str, case: str) -> str:
        return f"iceberg://faults/db.{kind.replace('-', '_')}_{case}?create=true"

    def argv(self, manifest: Path, kind: str, case: str) -> list[str]:
        return ["--manifest", str(manifest), "--output", self.url(kind, case), "--catalog-conf", str(self.confs[kind])]

    def observe(self, kind: str, case: str) -> Observed:
        from pyiceberg.catalog import load_catalog
        from pyiceberg.exceptions import NoSuchTableError

        catalog = load_catalog("faults", **conf_properties(self.confs[kind]))
        try:
            table = catalog.load_table(f"db.{kind.replace('-', '_')}_{case}")
        except NoSuchTableError:
            return Observed([], 0, set(), set())
        t = table.scan(selected_fields=("broker", "queue_id", "queue_offset")).to_arrow()
        keys = sorted(zip(*(t.column(c).to_pylist() for c in ("broker", "queue_id", "queue_offset")), strict=True))
        data = table.metadata.location.rstrip("/") + "/data"
        if kind == "iceberg":
            root = Path(data.removeprefix("file://"))
            files = {"file://" + str(p) for p in root.rglob("*.parquet")} if root.exists() else set()
        else:
            fs = self.s3.filesystem()
            fs.invalidate_cache()
            files = {"s3://" + p for p in fs.find(data.removeprefix("s3://")) if p.endswith(".parquet")}
        referenced = {task.file.file_path for task in table.scan().plan_files()}
        dk = None
        if kind == "iceberg" and table.current_snapshot() is not None:
            dk = [(b, q, o) for _, b, q, o in duckdb_keys(table.metadata_location)]
        return Observed(keys, len(table.metadata.snapshots), files, referenced, dk)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory, spark_app: Callable[..., SparkRun], s3: MotoS3) -> Matrix:
    root = tmp_path_factory.mktemp("iceberg-faults")
    m = Matrix(root, s3, s3.new_bucket("icefaults"))
    m.confs["iceberg"] = catalog_conf(root / "catalog-local")
    m.confs["iceberg-s3"] = catalog_conf(root / "catalog-s3", warehouse=f"s3://{m.bucket}/wh", **{
        "s3.endpoint": s3.endpoint, "s3.access-key-id": "testing", "s3.secret-access-key": "testing",
        "s3.region": "us-east-1"})
    w = build_window(root / "stage" / "w", "w", [(b, q, range(N)) for b, q in QUEUES])
    w_twin = build_window(root / "stage" / "w-twin", "w-twin", [(b, q, range(N)) for b, q in QUEUES])
    w_more = build_window(root / "stage" / "w-more", "w-more", [(b, q, range(N + N // 2)) for b, q in QUEUES])
    _crash_and_race(m, spark_app, w, w_twin)
    # phase 2: the next loads, on one Spark application that allows a task retry (case f)
    plan = _next_loads(m, w, w_twin, w_more) + _json_loads(m, root)
    with EmbeddedCluster() as cluster:
        if "o" in CASES["iceberg"]:
            plan += _offsets_loads(m, root, cluster)
        plan_file, results_file = root / "plan.json", root / "results.json"
        plan_file.write_text(json.dumps(plan))
        app = spark_app(STEPS_APP, str(plan_file), str(results_file),
                        options=["--master", "local[2,2]", *TWO_TASKS], timeout=1800)
    assert app.returncode == 0, app.output[-4000:]
    m.steps = {r["label"]: r for r in json.loads(results_file.read_text())}
    m.app_output = app.output
    for kind in KINDS:
        for case in CASES[kind]:
            m.final[(kind, case)] = m.observe(kind, case)
    if "j" in CASES["iceberg"]:
        m.json_bodies = _bodies(m, "j")
    _print_figures(m)
    if os.environ.get("ROCKETMQ_LOAD_FAULTS_KEEP") is None:
        shutil.rmtree(root / "stage", ignore_errors=True)
    return m


def _crash_and_race(m: Matrix, spark_app: Callable[..., SparkRun], w: Path, w_twin: Path) -> None:
    """Phase 1: the killed drivers and the concurrent pairs, two spark-submits at a time."""
    jobs = [(kind, case, point) for kind in KINDS for case, point in CRASHES.items() if case in CASES[kind]]

    def crash(job: tuple[str, str, str]) -> SparkRun:
        kind, case, point = job
        return spark_app(LOAD_WINDOW_APP, *m.argv(w, kind, case), options=TWO_TASKS, env={CRASH_ENV: point},
                         timeout=1800)

    with ThreadPoolExecutor(2) as pool:
        for (kind, case, _), run in zip(jobs, pool.map(crash, jobs), strict=True):
            m.crashes[(kind, case)] = (run, m.observe(kind, case))
        for kind in (k for k in KINDS if "e" in CASES[k]):
            barrier = m.root / f"barrier-{kind}"
            pair = [pool.submit(spark_app, LOAD_WINDOW_APP, *m.argv(man, kind, "e"), options=TWO_TASKS,
                                env={BARRIER_ENV: f"{barrier}:2"}, timeout=1800) for man in (w, w_twin)]
            m.concurrent[kind] = [f.result() for f in pair]


def _next_loads(m: Matrix, w: Path, w_twin: Path, w_more: Path) -> list[dict[str, Any]]:
    """The loads after the crashes and races (cases a-c1, e), growing windows (d), a task retry (f)."""
    plan: list[dict[str, Any]] = []
    for kind in KINDS:
        for case in CRASHES:
            if case in CASES[kind]:
                plan.append({"label": f"{kind}-{case}", "argv": m.argv(w, kind, case), "output": m.url(kind, case)})
        if "e" in CASES[kind]:
            plan.append({"label": f"{kind}-e-again", "argv": m.argv(w_twin, kind, "e"), "output": m.url(kind, "e")})
        if "d" in CASES[kind]:
            plan.append({"label": f"{kind}-d-1", "argv": m.argv(w, kind, "d"), "output": m.url(kind, "d")})
            plan.append({"label": f"{kind}-d-2", "argv": m.argv(w_more, kind, "d"), "output": m.url(kind, "d")})
        if "f" in CASES[kind]:
            plan.append({"label": f"{kind}-f", "argv": m.argv(w, kind, "f"), "output": m.url(kind, "f"),
                         "env": {CRASH_ENV: "task_fail_once"}})
    return plan


def _json_loads(m: Matrix, root: Path) -> list[dict[str, Any]]:
    """Case j: ``--body-format json``, a window with a bad body first (refused), then a good one."""
    if "j" not in CASES["iceberg"]:
        return []
    good = build_window(root / "stage" / "json", "wj", [("broker-a", 0, range(5))],
                        body=lambda b, q, o: json.dumps({"n": o, "b": b}).encode())
    bad = build_window(root / "stage" / "json-bad", "wjb", [("broker-a", 1, range(3))],
                       body=lambda b, q, o: b"{oops" if o == 1 else b"{}")
    return [{"label": label, "argv": [*m.argv(man, "iceberg", "j"), "--body-format", "json"],
             "output": m.url("iceberg", "j")} for label, man in (("iceberg-j-bad", bad), ("iceberg-j", good))]


def _offsets_loads(m: Matrix, root: Path, cluster: EmbeddedCluster) -> list[dict[str, Any]]:
    """Case o: an offsets hand-off of live messages on the embedded broker, loaded twice."""
    cluster.create_topic("orders", 2)
    cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr)
    with Producer(cfg, group="ice_p") as producer:
        for q in (0, 1):
            producer.send_batch([Message("orders", f"live/{q}/{i}".encode()) for i in range(10)],
                                queue=MessageQueue("orders", cluster.brokers[0].name, q))
    with Admin(cfg) as admin:
        offsets = snapshot_window(OffsetsWindow("orders", "ice_g", str(root / "stage" / "offsets"),
                                                window_id="wo"), admin, namesrv=cluster.namesrv_addr)
    return [{"label": label, "argv": m.argv(Path(offsets.manifest), "iceberg", "o"), "output": m.url("iceberg", "o")}
            for label in ("iceberg-o-1", "iceberg-o-2")]


def _bodies(m: Matrix, case: str) -> list[str]:
    from pyiceberg.catalog import load_catalog

    table = load_catalog("faults", **conf_properties(m.confs["iceberg"])).load_table(f"db.iceberg_{case}")
    return sorted(table.scan(selected_fields=("body",)).to_arrow().column("body").to_pylist())


def _print_figures(m: Matrix) -> None:
    lines = ["kind        case  after-crash rows/distinct/dup  final rows distinct duplicates lost  orphans"]
    for (kind, case), obs in sorted(m.final.items()):
        if case in ("j", "o"):
            continue
        want = expected(range(N + N // 2)) if case == "d" else expected(range(N))
        crash = m.crashes.get((kind, case))
        at_crash = "-" if crash is None else "/".join(str(v) for v in crash[1].figures.values())
        f = obs.figures
        lines.append(f"{kind:11} {case:5} {at_crash:30} {f['rows']:5} {f['distinct']:8} {f['duplicates']:10} "
                     f"{len(set(want) - set(obs.keys)):4}  {len(obs.files - obs.referenced):7}")
    print("\n" + "\n".join(lines))


def step(m: Matrix, label: str) -> dict[str, Any]:
    s = m.steps[label]
    assert s["rc"] == 0, s["stdout"] + s["stderr"]
    return s


def counts(s: dict[str, Any]) -> dict[str, int]:
    line = next(ln for ln in s["stdout"].splitlines() if ln.startswith("load_window: windows="))
    return {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}


def load_id(s: dict[str, Any]) -> str:
    line = next(ln for ln in s["stderr"].splitlines() if "committed snapshot" in ln)
    return line.split("load ", 1)[1].split()[0]


def exact(obs: Observed, offsets: range) -> None:
    """rows == distinct == every offset of the loaded ranges (pyiceberg and DuckDB): no duplicate, nothing lost."""
    assert obs.figures["duplicates"] == 0
    assert obs.keys == expected(offsets)
    if obs.duckdb is not None:
        assert sorted(obs.duckdb) == obs.keys


def kinds_with(case: str) -> list[str]:
    """The kinds ``case`` runs on; skips the test when none (a subset was selected)."""
    kinds = [k for k in KINDS if case in CASES[k]]
    if not kinds:
        pytest.skip(f"case {case} not selected (ROCKETMQ_LOAD_FAULTS_CASES / _KINDS)")
    return kinds


def test_a_driver_killed_while_tasks_write_leaves_nothing_visible(matrix: Matrix) -> None:
    for kind in kinds_with("a"):
        run, seen = matrix.crashes[(kind, "a")]
        assert run.returncode in (-9, 137), run.output[-3000:]  # SIGKILL, not a clean exit
        assert seen.keys == [] and seen.snapshots == 0 and seen.referenced == set()
        assert len(seen.files) >= 1  # the finished task's files: orphans, referenced by nothing
        again = step(matrix, f"{kind}-a")
        assert counts(again)["rows_out"] == 3 * N
        final = matrix.final[(kind, "a")]
        exact(final, range(N))
        assert final.snapshots == 1 and not final.referenced & seen.files
        assert all(f.rsplit("/", 1)[1].startswith(load_id(again)) for f in final.referenced)


def test_b_driver_killed_before_the_commit_leaves_nothing_visible(matrix: Matrix) -> None:
    for kind in kinds_with("b"):
        run, seen = matrix.crashes[(kind, "b")]
        assert run.returncode == CRASH_EXIT and "test crash at before_commit" in run.output, run.output[-3000:]
        assert seen.keys == [] and seen.snapshots == 0 and len(seen.files) >= 2
        again = step(matrix, f"{kind}-b")
        assert counts(again) == {"windows": 1, "rows_in": 3 * N, "rows_out": 3 * N, "duplicates": 0,
                                 "already_loaded": 0}
        final = matrix.final[(kind, "b")]
        exact(final, range(N))
        assert not final.referenced & seen.files and final.files - final.referenced == seen.files


def test_c_driver_killed_during_the_commit_is_all_or_nothing(matrix: Matrix) -> None:
    for kind in kinds_with("c"):
        run, seen = matrix.crashes[(kind, "c")]
        assert run.returncode == CRASH_EXIT and "test crash at mid_commit" in run.output, run.output[-3000:]
        assert seen.keys == [] and seen.snapshots == 0  # manifests written, the catalog never asked
        again = step(matrix, f"{kind}-c")
        assert counts(again)["rows_out"] == 3 * N
        final = matrix.final[(kind, "c")]
        exact(final, range(N))
        assert final.snapshots == 1 and not final.referenced & seen.files
    for kind in kinds_with("c1"):
        run, seen = matrix.crashes[(kind, "c1")]
        assert run.returncode == CRASH_EXIT and "test crash at before_publish" in run.output, run.output[-3000:]
        assert "committed snapshot" in run.output
        exact(seen, range(N))  # committed: every row visible at once, each once
        again = step(matrix, f"{kind}-c1")
        assert counts(again) == {"windows": 1, "rows_in": 3 * N, "rows_out": 0, "duplicates": 0,
                                 "already_loaded": 3 * N}
        final = matrix.final[(kind, "c1")]
        exact(final, range(N))
        assert final.snapshots == 1 and final.referenced == seen.referenced


def test_d_offset_commit_failed_and_the_next_window_overlaps(matrix: Matrix) -> None:
    for kind in kinds_with("d"):
        assert counts(step(matrix, f"{kind}-d-1"))["rows_out"] == 3 * N
        more = counts(step(matrix, f"{kind}-d-2"))
        assert more == {"windows": 1, "rows_in": 3 * (N + N // 2), "rows_out": 3 * (N // 2), "duplicates": 0,
                        "already_loaded": 3 * N}
        final = matrix.final[(kind, "d")]
        exact(final, range(N + N // 2))
        assert final.snapshots == 2


def test_e_two_loads_of_one_table_at_once_one_commits(matrix: Matrix) -> None:
    for kind in kinds_with("e"):
        runs = matrix.concurrent[kind]
        assert sorted(r.returncode for r in runs) == [0, 3], [r.output[-2000:] for r in runs]
        loser = next(r for r in runs if r.returncode == 3)
        # spark-submit shows the Python driver's stderr on its stdout
        assert "load_window: conflict:" in loser.output and "nothing of this load was committed" in loser.output
        winner = next(r for r in runs if r.returncode == 0)
        assert winner.counts()["rows_out"] == 3 * N
        assert counts(step(matrix, f"{kind}-e-again"))["rows_out"] == 0  # the loser again: all held
        final = matrix.final[(kind, "e")]
        exact(final, range(N))
        assert final.snapshots == 1
        assert final.files == final.referenced  # the loser deleted the files it had written


def test_f_a_retried_task_attempt_commits_its_rows_once(matrix: Matrix) -> None:
    for kind in kinds_with("f"):
        s = step(matrix, f"{kind}-f")
        assert matrix.app_output.count("test failure of a task attempt after it wrote its files") >= 2
        assert counts(s)["rows_out"] == 3 * N
        final = matrix.final[(kind, "f")]
        exact(final, range(N))
        assert len(final.files - final.referenced) >= 1  # the failed attempt's file, never referenced


def test_j_json_bodies_are_stored_as_validated_text(matrix: Matrix) -> None:
    kinds_with("j")
    bad = matrix.steps["iceberg-j-bad"]
    assert bad["rc"] == 2 and "is not valid JSON" in bad["stderr"], bad["stderr"][-2000:]
    s = step(matrix, "iceberg-j")
    assert counts(s)["rows_out"] == 5
    final = matrix.final[("iceberg", "j")]
    assert final.snapshots == 1 and final.files == final.referenced  # the failed load wrote nothing
    assert matrix.json_bodies == sorted(json.dumps({"n": o, "b": "broker-a"}) for o in range(5))


def test_o_offsets_handoff_is_read_by_spark_tasks_into_the_table(matrix: Matrix) -> None:
    kinds_with("o")
    first = step(matrix, "iceberg-o-1")
    assert counts(first)["rows_out"] == 20
    assert "load_window: read: plan=direct " in first["stderr"]  # the tasks read the broker and write the table
    assert counts(step(matrix, "iceberg-o-2"))["rows_out"] == 0
    final = matrix.final[("iceberg", "o")]
    assert final.snapshots == 1 and len(final.keys) == len(set(final.keys)) == 20
