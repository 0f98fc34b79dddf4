"""One chaos run: the DAG's flow in cycles, the schedule's faults injected into it, then the check.

Each cycle is what one run of the example DAGs does, through the same public surfaces, each step a
process of its own:

1. lag check: ``rocketmq-airflow lag --json`` (the lag sensor's figures);
2. window: ``rocketmq-airflow window --no-commit`` (staging hand-off, the operator's
   ``commit="after_downstream"``) or ``--handoff offsets``, into a directory or an ``s3://`` prefix
   per window;
3. load: ``spark-submit load_window.py --manifest M --output OUT --result-file R --abandon-after A``;
4. commit: ``rocketmq-airflow window-commit M``.

A failed step runs again at once up to ``schedule.retries`` times (Airflow's task retries); when it
still fails, that cycle (DAG run) ends there and the next one starts from whatever the broker holds.
A producer sends keyed messages during all of it. After the last cycle the faults are healed, the
producer stops, and cycles without faults run until the group's committed offsets equal the
brokers' high-water marks (lag 0): the time that takes is ``converge_s``. Then the checker reads the
output (checker.py).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checker import Verdict, check
from .cluster import Cluster, cli, committed_snapshot, high_water, reset_offsets_by_time
from .objstore import ObjectStore
from .outputs import Output, make_output
from .procs import Injection, Step, after
from .producer import ChaosProducer
from .s3proxy import FaultPlan
from .schedule import (
    BROKER_KILL,
    CONCURRENT_LOADS,
    HANDOFFS,
    INITIAL_QUEUES,
    KILL_COMMIT,
    KILL_DRIVER,
    KILL_WINDOW,
    NET_CUT,
    OBJSTORE_ERRORS,
    OFFSET_RESET,
    TOPIC_EXPAND,
    ZOMBIE_LOADER,
    Fault,
    Schedule,
)

REPO = Path(__file__).resolve().parents[2]
BACKGROUND = (BROKER_KILL, NET_CUT, OBJSTORE_ERRORS, TOPIC_EXPAND, OFFSET_RESET)
PATTERNS = {"hwm": r"high-water marks of|offsets window .*: \d+ offsets", "write": r"load_window: write:"}
DRIVER = "load_window.py"  # the Spark driver's Python process: a load fault must find it running
IDLE_TIMEOUT = 45.0  # the window's --idle-timeout: a queue it cannot read stops it after this long
TIMEOUTS = {"lag": 90.0, "window": 300.0, "load": 900.0, "commit": 180.0}
CONVERGE_CYCLES = 8
SETTLE_S = 5.0  # lag 0 must hold this long before the check
WARMUP_S = 5.0  # the producer's head start before the first cycle


@dataclass(frozen=True)
class SparkSetup:
    """``spark-submit`` and the environment scripts/_env.sh exports for it."""

    submit: str
    env: dict[str, str]

    @classmethod
    def from_env_sh(cls) -> SparkSetup:
        proc = subprocess.run(["bash", "-c", "source scripts/_env.sh >/dev/null && env -0"], cwd=REPO,
                              env={**os.environ, "ROCKETMQ_ENV_NO_INSTALL": "1"}, capture_output=True,
                              timeout=120, stdin=subprocess.DEVNULL, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"scripts/_env.sh could not prepare Spark: {proc.stderr.decode()[-500:]}")
        env = dict(item.split("=", 1) for item in proc.stdout.decode().split("\0") if "=" in item)
        return cls(str(Path(env["VIRTUAL_ENV"]) / "bin" / "spark-submit"), env)


class ChaosRun:
    def __init__(self, schedule: Schedule, cluster: Cluster, workdir: Path, spark: SparkSetup, *,
                 app: str | None = None, env: dict[str, str] | None = None,
                 log: Callable[[str], None] = print) -> None:
        from airflow_provider_rocketmq.spark import LOAD_WINDOW_APP

        self.s = schedule
        self.cluster = cluster
        self.workdir = workdir
        self.spark = spark
        self.app = app or LOAD_WINDOW_APP
        self.extra_env = dict(env or {})
        self.log = log
        self.rng = random.Random(schedule.seed ^ 0x5EED)  # convergence cycles' hand-offs
        tag = uuid.uuid4().hex[:6]
        self.topic = f"CHAOS_{schedule.seed}_{tag}"
        self.group = f"CHAOS_{schedule.seed}_{tag}_loader"
        self.store: ObjectStore | None = None
        self.output: Output | None = None
        self.injections: list[dict[str, Any]] = []
        self.cycles: list[dict[str, Any]] = []
        self.problems: list[str] = []  # hangs and other failures of the harness's own promises
        self.background: list[threading.Thread] = []
        self.steps: list[Step] = []  # every process started, stopped at the end if still running
        self.windows = 0
        self.started_wall = time.time()
        self.last_window_wall = 0.0  # when the last window step started (its high-water marks)
        self.committed_window_wall = 0.0  # ... of the last window whose offsets were committed
        # queues the topic's route showed when whole (creation, expansion): a settled topic shows them all
        self.route_queues = 0

    # -- the run -------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        t0 = time.monotonic()
        record: dict[str, Any] = {"seed": self.s.seed, "output": self.s.output, "staging": self.s.staging,
                                  "warehouse": self.s.warehouse, "orderly": self.s.orderly,
                                  "backend": self.cluster.kind, "topic": self.topic,
                                  "schedule": self.s.to_json(), "workdir": str(self.workdir)}
        producer = None
        verdict: Verdict | None = None
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            (self.workdir / "logs").mkdir(exist_ok=True)
            (self.workdir / "results").mkdir(exist_ok=True)
            self.route_queues = self.cluster.create_topic(self.topic, INITIAL_QUEUES)
            if self.s.uses_s3:
                self.store = ObjectStore(self.s.seed, str(self.workdir / "moto.log"))
            self.output = make_output(self.s.output, self.workdir, self.store, self.s.warehouse)
            producer = ChaosProducer(self.cluster.namesrv, self.topic, rate=self.s.rate, keys=self.s.keys,
                                     orderly=self.s.orderly).start()
            self.started_wall = time.time()
            time.sleep(WARMUP_S)  # the first window has a backlog to take (and an offset reset something to rewind)
            for cycle in self.s.cycles:
                self._cycle(cycle.handoff, cycle.faults)
            record["schedule_s"] = round(time.monotonic() - t0, 1)
            self._heal()
            producer.stop()
            record["producer"] = producer.counts
            t_conv = time.monotonic()
            snapshot = self._converge()
            record["converge_s"] = round(time.monotonic() - t_conv, 1)
            if snapshot is None:
                self.problems.append(f"no convergence after {CONVERGE_CYCLES} cycles without faults")
                hw = high_water(self.cluster, self.topic)
                committed = committed_snapshot(self.cluster, self.group, self.topic)
            else:
                hw, committed = snapshot
            rows = self.output.read_rows()
            verdict = check(self.topic, [a.to_json() for a in producer.attempts], hw, committed, rows,
                            orderly=self.s.orderly)
            record["queues"] = len(hw)
            self._save_attempts(producer)
        except Exception as exc:
            self.problems.append(f"harness error: {type(exc).__name__}: {exc}")
            record["traceback"] = traceback.format_exc()[-4000:]
        finally:
            for t in self.background:
                t.join(300)
            for step in self.steps:
                if step.returncode is None:
                    step.terminate_group()
            if producer is not None:
                producer.stop()
                self._save_attempts(producer)
            if self.store is not None:
                record["proxy"] = self.store.proxy.stats.snapshot()
                self.store.stop()
        record["cycles"] = self.cycles
        record["faults"] = self.injections
        record["verdict"] = verdict.to_json() if verdict is not None else None
        record["problems"] = self.problems
        record["duration_s"] = round(time.monotonic() - t0, 1)
        record["ok"] = verdict is not None and verdict.ok and not self.problems
        record["line"] = summary_line(record)
        return record

    def _converge(self) -> tuple[dict[Any, int], dict[Any, int]] | None:
        """Cycles without faults until the group caught up (`_caught_up`'s snapshot), at most
        CONVERGE_CYCLES of them; None if it never did."""
        for _ in range(CONVERGE_CYCLES + 1):
            snapshot = self._caught_up()
            if snapshot is not None:
                return snapshot
            if len(self.cycles) >= len(self.s.cycles) + CONVERGE_CYCLES:
                return None
            self._cycle(self.rng.choice(HANDOFFS), ())
        return None

    def _save_attempts(self, producer: ChaosProducer) -> None:
        with open(self.workdir / "attempts.jsonl", "w") as fh:
            fh.writelines(json.dumps(a.to_json()) + "\n" for a in list(producer.attempts))

    def _caught_up(self) -> tuple[dict[Any, int], dict[Any, int]] | None:
        """(high-water marks, committed offsets) once the group's lag is 0 and stays 0 for SETTLE_S (a
        send that timed out during a fault may still land: the checker judges a settled topic), else None."""
        try:
            first = high_water(self.cluster, self.topic)
            committed = committed_snapshot(self.cluster, self.group, self.topic)
            # a broker the name server dropped from the route (its channel reset after a cut or a
            # restart) comes back with its next registration (30 s): until then its queues, and what
            # they hold, are invisible to the lag, the windows and the checker alike (seed 1041)
            if len(first) < self.route_queues or any(committed.get(q, -1) != off for q, off in first.items()):
                return None
            time.sleep(SETTLE_S)
            hw = high_water(self.cluster, self.topic)
            committed = committed_snapshot(self.cluster, self.group, self.topic)
        except Exception:
            return None
        if hw != first or any(committed.get(q, -1) != off for q, off in hw.items()):
            return None
        return hw, committed

    # -- one cycle --------------------------------------------------------------------------------------
    def _cycle(self, handoff: str, faults: tuple[Fault, ...]) -> None:
        wid = f"w{self.windows:03d}"
        self.windows += 1
        rec: dict[str, Any] = {"window": wid, "handoff": handoff, "faults": [f.describe() for f in faults],
                               "steps": [], "t": round(time.time() - self.started_wall, 1)}
        self.cycles.append(rec)
        fired: set[int] = set()
        load_done = threading.Event()  # faults lasting "until the load step ends" wait for it

        def fire(step: str) -> None:
            for i, f in enumerate(faults):
                if f.kind in BACKGROUND and i not in fired and (f.step == step or step == "end"):
                    fired.add(i)
                    self._start_background(f, wid, load_done)

        def mine(step: str) -> list[Fault]:
            return [f for f in faults if f.step == step and f.kind not in BACKGROUND]

        self.log(f"chaos: {wid} {handoff} {'; '.join(rec['faults']) or 'no fault'}")
        try:
            fire("lag")
            self._lag(rec)
            fire("window")
            manifest = self._window(wid, handoff, mine("window"), rec)
            if manifest is None:
                rec["result"] = "window failed"
                return
            fire("load")
            loaded = self._load(wid, manifest, mine("load"), rec)
            load_done.set()
            if not loaded:
                rec["result"] = "load failed"
                return
            fire("commit")
            window_wall = self.last_window_wall
            committed = self._commit(manifest, mine("commit"), rec)
            rec["result"] = "committed" if committed else "commit failed"
            if committed:
                self.committed_window_wall = window_wall
        finally:
            load_done.set()
            fire("end")  # faults whose step this DAG run never reached strike now

    def _env(self) -> dict[str, str]:
        env = {**os.environ, **self.extra_env, "NAMESRV_ADDR": self.cluster.namesrv}
        if self.store is not None:
            env["FSSPEC_S3"] = json.dumps({k: v for k, v in self.store.options().items()})
        return env

    def _step(self, name: str, argv: list[str], env: dict[str, str]) -> Step:
        step = Step(name, argv, env, cwd=str(self.workdir), log_dir=self.workdir / "logs")
        self.steps.append(step)
        return step

    def _finish(self, step: Step, what: str, rec: dict[str, Any], fault_threads: list[threading.Thread]) -> int | None:
        rc = step.wait(TIMEOUTS[what])
        if rc is None:
            self.problems.append(f"{step.name} hung: still running after {TIMEOUTS[what]:.0f} s")
            step.terminate_group()
            rc = step.returncode
        for t in fault_threads:
            t.join(120)
            for inj in getattr(t, "result", []):
                self._record(inj, rec["window"])
        rec["steps"].append({"step": step.name, "exit": rc, "s": round(time.monotonic() - step.started, 2),
                             "tail": step.output[-300:] if rc not in (0, -9) else ""})
        return rc

    def _record(self, inj: Injection, wid: str) -> None:
        data = {**inj.to_json(), "window": wid}
        self.injections.append(data)
        self.log(f"chaos:   {'+' if inj.verified else '-'} {inj.kind}: {inj.detail}")

    # -- steps ------------------------------------------------------------------------------------------
    def _lag(self, rec: dict[str, Any]) -> None:
        step = self._step(f"{rec['window']}-lag", [*cli(), "lag", "--namesrv", self.cluster.namesrv, "--group",
                                                   self.group, "--topic", self.topic, "--json"], self._env())
        rc = self._finish(step, "lag", rec, [])
        if rc == 0:
            try:
                rec["lag"] = json.loads(step.stdout.strip().splitlines()[-1])["total_lag"]
            except (ValueError, KeyError, IndexError):
                rec["lag"] = None

    def _staging(self, wid: str) -> str:
        if self.s.staging == "s3":
            assert self.store is not None
            return self.store.url("stage", wid)
        return str(self.workdir / "stage" / wid)

    def _window(self, wid: str, handoff: str, faults: list[Fault], rec: dict[str, Any]) -> str | None:
        argv = [*cli(), "-v", "window", "--namesrv", self.cluster.namesrv, "--group", self.group, "--topic",
                self.topic, "--staging", self._staging(wid), "--window-id", wid, "--json",
                "--idle-timeout", str(IDLE_TIMEOUT)]
        argv += ["--no-commit"] if handoff == "staging" else ["--handoff", "offsets"]
        if self.s.staging == "s3":
            assert self.store is not None
            argv += ["--storage-options", self.store.options_json()]
        for attempt in range(1 + self.s.retries):
            self.last_window_wall = time.time()
            step = self._step(f"{wid}-window-{attempt}", argv, self._env())
            threads = []
            if attempt == 0:
                for f in faults:
                    if f.kind == KILL_WINDOW:
                        threads.append(after(step, f.trigger, f.delay, lambda s=step: s.kill9(KILL_WINDOW),
                                             PATTERNS, TIMEOUTS["window"]))
            rc = self._finish(step, "window", rec, threads)
            if rc == 0:
                try:
                    return str(json.loads(step.stdout.strip().splitlines()[-1])["manifest"])
                except (ValueError, KeyError, IndexError):
                    self.problems.append(f"{step.name}: exit 0 without a JSON result: {step.stdout[-300:]}")
                    return None
        return None

    def _load_argv(self, wid: str, manifest: str, tag: str) -> list[str]:
        assert self.output is not None
        return [self.spark.submit, "--master", "local[2]", "--driver-memory", "512m",
                "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
                "--conf", "spark.driver.extraJavaOptions=-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
                self.app, "--manifest", manifest, "--output", self.output.url,
                "--result-file", str(self.workdir / "results" / f"{wid}-{tag}.json"),
                "--abandon-after", f"{self.s.abandon_after:g}", "--body-format", "utf8",
                *self.output.load_args()]

    def _load_env(self) -> dict[str, str]:
        assert self.output is not None
        env = {**self.spark.env, **self.extra_env, "NAMESRV_ADDR": self.cluster.namesrv, **self.output.spark_env()}
        if self.store is not None:
            env["FSSPEC_S3"] = json.dumps(self.store.options())
        return env

    def _load(self, wid: str, manifest: str, faults: list[Fault], rec: dict[str, Any]) -> bool:
        kinds = {f.kind: f for f in faults}
        for attempt in range(1 + self.s.retries):
            step = self._step(f"{wid}-load-{attempt}", self._load_argv(wid, manifest, str(attempt)), self._load_env())
            threads: list[threading.Thread] = []
            twin: Step | None = None
            zombie = kinds.get(ZOMBIE_LOADER) if attempt == 0 else None
            if attempt == 0:
                f = kinds.get(KILL_DRIVER)
                if f is not None:
                    threads.append(after(step, f.trigger, f.delay, lambda s=step: s.kill9(KILL_DRIVER, need=DRIVER),
                                         PATTERNS, TIMEOUTS["load"], need=DRIVER))
                f = kinds.get(CONCURRENT_LOADS)
                if f is not None:
                    time.sleep(f.delay)
                    twin = self._step(f"{wid}-load-twin", self._load_argv(wid, manifest, "twin"), self._load_env())
            if zombie is not None:
                ok = self._zombie(step, zombie, wid, manifest, rec, threads)
                if ok is not None:
                    return ok
            rc = self._finish(step, "load", rec, threads)
            if twin is not None:
                twin_rc = self._finish(twin, "load", rec, [])
                both = sorted([rc, twin_rc], key=lambda x: (x is None, x))
                verified = step.started <= twin.started and twin_rc is not None and rc is not None
                overlap = min(step.started + _ran(step), twin.started + _ran(twin)) - max(step.started, twin.started)
                self._record(Injection(CONCURRENT_LOADS, verified and overlap > 0,
                                       f"two loads of {wid} at once, {overlap:.1f} s overlapping: exits {both}",
                                       data={"exits": both, "overlap_s": round(overlap, 2)}), wid)
            if rc == 0:
                return True
        return False

    def _zombie(self, step: Step, f: Fault, wid: str, manifest: str, rec: dict[str, Any],
                threads: list[threading.Thread]) -> bool | None:
        """SIGSTOP the load, wait past --abandon-after, run the take-over load (the task's retry), then
        SIGCONT the stopped one and let it finish. None: the stop did not happen (the load ran on)."""
        t = after(step, f.trigger, f.delay, lambda: step.stop(ZOMBIE_LOADER, need=DRIVER), PATTERNS, TIMEOUTS["load"],
                  need=DRIVER)
        t.join(TIMEOUTS["load"])
        inj = t.result[0] if t.result else Injection(ZOMBIE_LOADER, False, "no result")  # type: ignore[attr-defined]
        if not inj.verified:
            self._record(inj, wid)
            return None
        wait = self.s.abandon_after + 1.0 - (time.monotonic() - (step.stopped_at or time.monotonic()))
        if wait > 0:
            time.sleep(wait)
        takeover = self._step(f"{wid}-load-takeover", self._load_argv(wid, manifest, "takeover"), self._load_env())
        t_rc = self._finish(takeover, "load", rec, [])
        stopped = step.cont()
        z_rc = self._finish(step, "load", rec, threads)
        inj.data.update(stopped_s=round(stopped, 2), zombie_exit=z_rc, takeover_exit=t_rc)
        inj.verified = inj.verified and stopped > self.s.abandon_after
        inj.detail += f"; stopped {stopped:.1f} s (> --abandon-after {self.s.abandon_after:g}), take-over load " \
                      f"exit {t_rc}, the woken load exit {z_rc}"
        self._record(inj, wid)
        return t_rc == 0

    def _commit(self, manifest: str, faults: list[Fault], rec: dict[str, Any]) -> bool:
        argv = [*cli(), "window-commit", "--namesrv", self.cluster.namesrv, manifest, "--json"]
        if self.s.staging == "s3":
            assert self.store is not None
            argv += ["--storage-options", self.store.options_json()]
        for attempt in range(1 + self.s.retries):
            step = self._step(f"{rec['window']}-commit-{attempt}", argv, self._env())
            threads = []
            if attempt == 0:
                for f in faults:
                    if f.kind == KILL_COMMIT:
                        threads.append(after(step, f.trigger, f.delay, lambda s=step: s.kill9(KILL_COMMIT),
                                             PATTERNS, TIMEOUTS["commit"]))
            if self._finish(step, "commit", rec, threads) == 0:
                return True
        return False

    # -- faults in the background -----------------------------------------------------------------------
    def _start_background(self, f: Fault, wid: str, load_done: threading.Event) -> None:
        def run() -> None:
            time.sleep(f.delay)
            try:
                inj = self._inject(f, load_done)
            except Exception as exc:
                inj = Injection(f.kind, False, f"could not inject: {type(exc).__name__}: {exc}")
            self._record(inj, wid)

        t = threading.Thread(target=run, daemon=True, name=f"fault-{f.kind}")
        self.background.append(t)
        t.start()

    def _heal(self) -> None:
        """Wait until every background fault has ended (brokers up, link up, proxy clean)."""
        for t in self.background:
            t.join(600)
            if t.is_alive():
                self.problems.append(f"{t.name} did not end within 600 s")
        if self.store is not None:
            self.store.proxy.clear()

    def _inject(self, f: Fault, load_done: threading.Event) -> Injection:
        if f.kind == BROKER_KILL:
            with self.cluster.fault_lock:
                try:
                    inj = self.cluster.kill_brokers()
                except Exception as exc:
                    inj = Injection(BROKER_KILL, False, f"the kill did not complete: {exc}", data={"killed": True})
                if not inj.data.get("killed"):
                    return inj  # nothing was killed (the brokers were not all up): nothing to restart
                time.sleep(f.params["down_s"])
                try:
                    inj.data.update(self.cluster.start_brokers(), down_s=round(f.params["down_s"], 2))
                except Exception as exc:
                    self.problems.append(f"the brokers did not come back after a kill: {exc}")
                return inj
        if f.kind == NET_CUT:
            link = self.cluster.netlink
            assert link is not None
            with self.cluster.fault_lock:
                info = link.cut()
                time.sleep(f.params["duration_s"])
                back = link.restore(info)
            ok = bool(info["cut_verified"]) and int(back["dropped_while_cut"]) > 0 and bool(back["restored"])  # type: ignore[call-overload]
            return Injection(NET_CUT, ok, f"link of {link.broker_addr} down {f.params['duration_s']:.1f} s: a connect "
                             f"{'timed out' if info['cut_verified'] else 'got through'} while cut, "
                             f"{back['dropped_while_cut']} packets dropped, restored={back['restored']}",
                             data={**info, **back, "duration_s": round(f.params["duration_s"], 2)})
        if f.kind == OBJSTORE_ERRORS:
            assert self.store is not None
            proxy = self.store.proxy
            before = proxy.stats.snapshot()
            now = time.monotonic()
            mix = f.params["mix"]
            plan = FaultPlan(slowdown=mix["slowdown"], reset_before=mix["reset_before"],
                             reset_after=mix["reset_after"], slow=mix["slow"], slow_s=mix["slow_s"],
                             until=now + f.params["duration_s"], ledger_only=bool(f.params.get("ledger_only")))
            if "outage_s" in f.params:
                plan.outage_from = now + f.params["outage_after_s"]
                plan.outage_until = plan.outage_from + f.params["outage_s"]
            if f.params.get("until") == "load-end":
                plan.until = float("inf")
                proxy.set_plan(plan)
                load_done.wait(TIMEOUTS["load"] * 3)
            else:
                proxy.set_plan(plan)
                time.sleep(f.params["duration_s"])
            proxy.clear()
            after_ = proxy.stats.snapshot()
            injected = {k: v - before["injected"].get(k, 0) for k, v in after_["injected"].items()
                        if v - before["injected"].get(k, 0)}
            ledger = {k: v - before["ledger_injected"].get(k, 0) for k, v in after_["ledger_injected"].items()
                      if v - before["ledger_injected"].get(k, 0)}
            requests = after_["requests"] - before["requests"]
            lasted = time.monotonic() - now
            return Injection(OBJSTORE_ERRORS, sum(injected.values()) > 0,
                             f"{lasted:.1f} s of object-store faults{' on ledger entries' if plan.ledger_only else ''}: "
                             f"{requests} requests, "
                             f"injected {injected or 'nothing'}" + (f", on ledger writes {ledger}" if ledger else ""),
                             data={"requests": requests, "injected": injected, "ledger_injected": ledger})
        if f.kind == TOPIC_EXPAND:
            total = self.cluster.create_topic(self.topic, f.params["queues"])
            self.route_queues = max(self.route_queues, total)
            return Injection(TOPIC_EXPAND, total == f.params["queues"] * len(self.cluster.masters()),
                             f"{self.topic} grown to {f.params['queues']} queues per broker: the route shows {total}",
                             data={"queues": total})
        if f.kind == OFFSET_RESET:
            with self.cluster.fault_lock:  # a reset needs every broker: it waits for a kill or cut to end
                return self._reset(f)
        raise ValueError(f.kind)

    def _reset(self, f: Fault) -> Injection:
        # a point between the run's start and the snapshot of the last window that was committed: what was
        # committed after it is rewound (a later time would move nothing: resets never go forward)
        upto = self.committed_window_wall or self.last_window_wall or time.time()
        ts_ms = int((self.started_wall + f.params["back"] * (upto - self.started_wall)) * 1000)
        before = committed_snapshot(self.cluster, self.group, self.topic)
        out = reset_offsets_by_time(self.cluster, self.group, self.topic, ts_ms)
        rewound = 0
        deadline = time.monotonic() + 15  # online members reset (and persist) after settling
        while True:
            now_c = committed_snapshot(self.cluster, self.group, self.topic)
            rewound = sum(max(0, before[q] - now_c.get(q, before[q])) for q in before if before[q] >= 0)
            if rewound or time.monotonic() > deadline or str(out.get("via")).endswith("+update"):
                break
            time.sleep(0.5)
        return Injection(OFFSET_RESET, rewound > 0,
                         f"offsets of {self.group} reset to {f.params['back']:.0%} of the time up to the last committed window "
                         f"({out.get('via')}): "
                         f"{rewound} offsets rewound" + ("" if rewound else f" ({json.dumps(out)[:300]})"),
                         data={"rewound": rewound, "reset": out})


def _ran(step: Step) -> float:
    """How long the step's process ran (up to now if it still runs)."""
    return (step.ended if step.ended is not None else time.monotonic()) - step.started


def summary_line(record: dict[str, Any]) -> str:
    v = record.get("verdict") or {}
    faults = [f for f in record.get("faults", []) if f.get("verified")]
    kinds = sorted({f["kind"] for f in faults})
    status = "ok" if record.get("ok") else "FAILED"
    line = (f"chaos: seed={record['seed']} faults={len(faults)} cycles={len(record.get('cycles', []))} "
            f"produced={v.get('produced', '?')} loaded={v.get('loaded', '?')} lost={v.get('lost', '?')} "
            f"duplicates={v.get('duplicates', '?')} converge_s={record.get('converge_s', '?')} "
            f"output={record['output']} kinds={','.join(kinds) or '-'} {status}")
    if record.get("problems"):
        line += " problems=" + "; ".join(record["problems"])[:300]
    return line


def cleanup(workdir: Path) -> None:
    """Remove a passing run's data (staged windows, output, stores), keeping its step logs."""
    for entry in workdir.iterdir() if workdir.exists() else []:
        if entry.name == "logs":
            continue
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
