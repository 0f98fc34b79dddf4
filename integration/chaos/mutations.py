"""Remove one protection of the product and show that the chaos checker catches it.

``python -m integration.chaos mutate NAME [--seeds ...] [run options]`` copies the package into a
temporary directory, applies one text change there (found by its text, wherever the file lives),
and runs the seeds with that copy first on ``PYTHONPATH`` (the CLI processes, the Spark driver and
its Python workers all import it). The command succeeds (exit 0) when at least one run *fails* the
check: a protection whose removal no run notices would be a protection the harness does not test.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import airflow_provider_rocketmq


@dataclass(frozen=True)
class Mutation:
    name: str
    what: str
    old: str
    new: str
    seeds: str  # seeds that exercise it (the default of --seeds)
    expect: str  # the checker's count that must show it: "duplicates" or "lost"
    extra: tuple[str, ...] = ()  # default run options


MUTATIONS = {m.name: m for m in (
    Mutation("ledger-check",
             "the load ignores what the output's ledger holds (loads every offset of its manifests again)",
             "    held = state.held\n", "    held = OffsetRanges()  # MUTATION: ledger ignored\n",
             "4", "duplicates", ("--outputs", "local", "--faults", "kill-commit", "--cycles", "1")),
    Mutation("create-if-absent",
             "an object store load creates its ledger entry with a plain PUT (overwriting), not If-None-Match: *",
             "                self._create(self._entry_path(seq), body)\n",
             "                self.fs.pipe_file(self._entry_path(seq), body)  # MUTATION: overwrite\n",
             "1", "duplicates", ("--outputs", "s3", "--faults", "concurrent-loads", "--cycles", "1")),
    Mutation("lost-answer-readback",
             "an object store load whose ledger-entry create failed does not read the entry back (and deletes "
             "its files: the state before the fix found by this harness)",
             "                other = self._entry_after_lost_answer(seq, load_id, exc)\n",
             "                raise  # MUTATION: outcome taken as failed\n",
             "4", "lost", ("--outputs", "s3", "--faults", "objstore-errors,kill-driver,zombie-loader", "--cycles", "1")),
    Mutation("commit-after-load",
             "the window commits its end offsets when staged, not after the load (--no-commit ignored)",
             "commit=not args.no_commit,", "commit=True,  # MUTATION: committed before the load\n       ",
             "4", "lost", ("--outputs", "local", "--faults", "kill-driver", "--cycles", "1")),
)}


def apply(m: Mutation, root: Path) -> Path:
    """Copy the package under ``root`` and apply ``m``; returns the changed file."""
    src = Path(airflow_provider_rocketmq.__file__).parent
    dst = root / "airflow_provider_rocketmq"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    hits = [p for p in dst.rglob("*.py") if m.old in p.read_text()]
    if len(hits) != 1:
        raise SystemExit(f"mutation {m.name}: its text is in {len(hits)} files (want 1): the code moved on; "
                         f"update integration/chaos/mutations.py")
    text = hits[0].read_text()
    if text.count(m.old) != 1:
        raise SystemExit(f"mutation {m.name}: its text occurs {text.count(m.old)} times in {hits[0]}")
    hits[0].write_text(text.replace(m.old, m.new))
    return hits[0]


def main(argv: list[str]) -> int:
    from .__main__ import parser, run_seeds

    if not argv or argv[0] not in MUTATIONS:
        names = "\n".join(f"  {m.name}: {m.what}" for m in MUTATIONS.values())
        raise SystemExit(f"usage: python -m integration.chaos mutate NAME [run options]\nmutations:\n{names}")
    m = MUTATIONS[argv[0]]
    rest = argv[1:]
    if not any(a in ("--seed", "--seeds", "--runs") for a in rest):
        rest = ["--seeds", m.seeds, *rest]
    for i in range(0, len(m.extra), 2):
        if m.extra[i] not in rest:
            rest += [m.extra[i], m.extra[i + 1]]
    args = parser().parse_args(rest)
    root = Path(tempfile.mkdtemp(prefix=f"chaos-mutant-{m.name}-"))
    try:
        changed = apply(m, root)
        print(f"mutation {m.name}: {m.what}\n  applied in {changed.relative_to(root)}", flush=True)
        env = {"PYTHONPATH": str(root)}
        app = str(root / Path(_load_app()).relative_to(Path(airflow_provider_rocketmq.__file__).parent.parent))
        records: list[dict[str, Any]] = []
        run_seeds(args, {"env": env, "app": app}, records)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return verdict(m, records)


def verdict(m: Mutation, records: Sequence[Mapping[str, Any]]) -> int:
    """0 when a run failed the check by the defect the mutation makes (its ``expect`` count above 0).

    A run that fails otherwise (no convergence, a crash) does not count: a mutation whose text no
    longer fits the code around it (a name imported differently) breaks every load, and "caught"
    would then say nothing about the protection.
    """
    hits = [r for r in records if not r["ok"] and (r.get("verdict") or {}).get(m.expect, 0) > 0]
    if hits:
        print(f"mutation {m.name}: CAUGHT: {m.expect} in seed(s) " + ", ".join(str(r["seed"]) for r in hits))
        return 0
    others = [r for r in records if not r["ok"]]
    if others:
        print(f"mutation {m.name}: INCONCLUSIVE: runs failed, but none with {m.expect} (" + "; ".join(
            f"seed {r['seed']}: {'; '.join(r.get('problems') or ['see its log'])}" for r in others) + ")")
    else:
        print(f"mutation {m.name}: NOT CAUGHT: every run passed")
    return 1


def _load_app() -> str:
    from airflow_provider_rocketmq.spark import LOAD_WINDOW_APP

    return LOAD_WINDOW_APP


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
