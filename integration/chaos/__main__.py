"""``python -m integration.chaos``: run chaos seeds, print the results table, manage the namespace.

    python -m integration.chaos --seeds 7,8,9                 # on an embedded broker of its own
    python -m integration.chaos --seed 7 --show-schedule      # what seed 7 does, without running it
    ROCKETMQ_NAMESRV=... ROCKETMQ_BROKER_KILL_CMD=... ROCKETMQ_BROKER_START_CMD=... \\
      python -m integration.chaos --full --results chaos.jsonl    # full mode: appends, resumable
    python -m integration.chaos table chaos.jsonl             # fault kind x output kind table
    python -m integration.chaos netns up chaosb               # namespace + veth (198.51.100.0/24)
    python -m integration.chaos regressions                   # the seeds that once found a failure
    python -m integration.chaos mutate ledger-check           # the checker must fail (mutations.py)

See docs/reliability.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import netns, results
from .cluster import Cluster, EmbeddedProcessCluster, ExistingCluster, capabilities_from_env
from .flow import ChaosRun, SparkSetup, cleanup
from .schedule import FAULT_KINDS, OUTPUT_KINDS, draw

FULL_RUNS = 200


def _csv(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if bad:
        raise SystemExit(f"error: {what}: unknown {', '.join(bad)} (known: {', '.join(allowed)})")
    return items


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m integration.chaos", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, action="append", default=[], help="a seed to run (repeatable)")
    p.add_argument("--seeds", default="", help="seeds, comma-separated")
    p.add_argument("--runs", type=int, default=None, help="run this many seeds from --start (full mode: 200)")
    p.add_argument("--start", type=int, default=1000, help="first seed of --runs (default 1000)")
    p.add_argument("--cycles", type=int, default=2, help="cycles with faults per run (default 2)")
    p.add_argument("--outputs", default=",".join(OUTPUT_KINDS), help="output kinds to draw from")
    p.add_argument("--rotate-outputs", action="store_true",
                   help="seed N loads into output kind N mod 3 (balanced kinds; full mode does this)")
    p.add_argument("--faults", default=",".join(FAULT_KINDS), help="fault kinds to draw from")
    p.add_argument("--full", action="store_true",
                   help=f"against ROCKETMQ_NAMESRV, {FULL_RUNS} runs by default, outputs rotated, results appended")
    p.add_argument("--results", default=None, help="append one JSON line per run here (full mode: chaos-results.jsonl)")
    p.add_argument("--workdir", default=None, help="where runs keep their files (default: a temp directory)")
    p.add_argument("--keep", action="store_true", help="keep all files of passing runs (default: only their step logs)")
    p.add_argument("--show-schedule", action="store_true", help="print the schedules and exit")
    p.add_argument("--quiet", action="store_true", help="only the summary line per run")
    return p


def schedule_for(seed: int, args: argparse.Namespace, caps: Any) -> Any:
    outputs = _csv(args.outputs, OUTPUT_KINDS, "--outputs")
    if args.rotate_outputs:
        outputs = [outputs[seed % len(outputs)]]
    return draw(seed, caps, cycles=args.cycles, outputs=outputs, kinds=_csv(args.faults, FAULT_KINDS, "--faults"))


def seeds_of(args: argparse.Namespace) -> list[int]:
    seeds = list(args.seed) + [int(s) for s in args.seeds.split(",") if s.strip()]
    runs = args.runs if args.runs is not None else (FULL_RUNS if args.full and not seeds else 0)
    seeds += list(range(args.start, args.start + runs))
    if not seeds:
        raise SystemExit("error: no seed: give --seed, --seeds or --runs")
    return seeds


def make_cluster(workdir: Path, full: bool) -> Cluster:
    if os.environ.get("ROCKETMQ_NAMESRV", "").strip():
        return ExistingCluster(os.environ)
    if full:
        raise SystemExit("error: --full needs ROCKETMQ_NAMESRV (and the broker kill/start commands); see "
                         "docs/reliability.md")
    return EmbeddedProcessCluster(workdir / "cluster")


def run_seeds(args: argparse.Namespace, run_args: dict[str, Any] | None = None,
              records: list[dict[str, Any]] | None = None) -> int:
    """Run the seeds of ``args``; 1 when a run failed the check. Each run's record is appended to
    ``records`` when given (and to ``--results``)."""
    if args.full:
        args.rotate_outputs = True
        args.results = args.results or "chaos-results.jsonl"
    seeds = seeds_of(args)
    base = Path(args.workdir or tempfile.mkdtemp(prefix="chaos-"))
    base.mkdir(parents=True, exist_ok=True)
    # the harness's own clients (producer, admin) log their retries there, not on the terminal
    logging.basicConfig(level=logging.INFO, filename=str(base / "harness.log"),
                        format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
    out_file = Path(args.results) if args.results else None
    done = results.done_seeds(results.load(out_file)) if out_file else set()
    cluster: Cluster | None = None
    failed = 0
    try:
        for seed in seeds:
            if seed in done:
                print(f"chaos: seed={seed} already in {out_file}: skipped")
                continue
            if args.show_schedule:
                print(schedule_for(seed, args, capabilities_from_env(os.environ)).describe())
                continue
            if cluster is None:
                cluster = make_cluster(base, args.full)
            sched = schedule_for(seed, args, cluster.capabilities)
            print(sched.describe(), flush=True)
            run = ChaosRun(sched, cluster, base / f"seed-{seed}", SparkSetup.from_env_sh(),
                           log=(lambda s: None) if args.quiet else (lambda s: print(s, flush=True)),
                           **(run_args or {}))
            record = run.run()
            record["args"] = {"cycles": args.cycles, "outputs": args.outputs, "faults": args.faults,
                              "rotate_outputs": args.rotate_outputs}
            record["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            print(record["line"], flush=True)
            if records is not None:
                records.append(record)
            if not record["ok"]:
                failed += 1
                _explain(record)
            if out_file:
                results.append(out_file, record)
            if record["ok"] and not args.keep:
                cleanup(base / f"seed-{seed}")
    finally:
        if cluster is not None:
            cluster.stop()
    return 1 if failed else 0


def _explain(record: dict[str, Any]) -> None:
    v = record.get("verdict") or {}
    for what, examples in (v.get("examples") or {}).items():
        print(f"chaos:   {what}: {'; '.join(examples)}")
    for p in record.get("problems", []):
        print(f"chaos:   problem: {p}")
    if record.get("traceback"):
        print(record["traceback"])
    a = record.get("args", {})
    print(f"chaos:   files kept in {record['workdir']}; replay: python -m integration.chaos --seed {record['seed']} "
          f"--cycles {a.get('cycles')} --outputs {a.get('outputs')} --faults {a.get('faults')}"
          + (" --rotate-outputs" if a.get("rotate_outputs") else ""))


def _stop_on_sigterm() -> None:
    """SIGTERM ends the harness like Ctrl-C: its finally blocks stop the processes it started."""
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str]) -> int:
    _stop_on_sigterm()
    if argv[:1] == ["table"]:
        path = Path(argv[1] if len(argv) > 1 else "chaos-results.jsonl")
        print(results.table(results.load(path)))
        return 0
    if argv[:1] == ["netns"]:
        if len(argv) != 3 or argv[1] not in ("up", "down"):
            raise SystemExit("usage: python -m integration.chaos netns up|down NAME")
        if argv[1] == "up":
            host, inside = netns.up(argv[2])
            print(f"namespace {argv[2]}: host end {host}, namespace end {inside} (interfaces {argv[2]}-h, {argv[2]}-n)")
        else:
            netns.down(argv[2])
        return 0
    if argv[:1] == ["regressions"]:
        from .regressions import REGRESSIONS

        backend = "existing" if os.environ.get("ROCKETMQ_NAMESRV", "").strip() else "embedded"
        rc = 0
        for case in REGRESSIONS:
            if case.backend != backend and case.backend == "existing":
                print(f"chaos: regression seed {case.seed} needs a real cluster with its namespace: skipped")
                continue
            print(f"chaos: regression seed {case.seed}: {case.found}")
            rc |= main([*case.command.split()[3:], *argv[1:]])
        return rc
    if argv[:1] == ["mutate"]:
        from .mutations import main as mutate

        return mutate(argv[1:])
    args = parser().parse_args(argv)
    return run_seeds(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
