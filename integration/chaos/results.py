"""Run records (one JSON object per line, appended) and the table printed over them."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .schedule import FAULT_KINDS, OUTPUT_KINDS


def append(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")
        fh.flush()


def load(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a line cut short by a killed run
    return out


def done_seeds(records: Iterable[dict[str, Any]]) -> set[int]:
    return {int(r["seed"]) for r in records if r.get("verdict") is not None or r.get("problems")}


def table(records: list[dict[str, Any]]) -> str:
    """Fault kind x output kind -> runs, verified injections (missed), lost, duplicates, worst convergence."""
    cell: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: {"runs": 0, "inj": 0, "missed": 0, "lost": 0,
                                                                       "dup": 0, "conv": 0.0, "failed": 0})
    totals: dict[str, dict[str, Any]] = defaultdict(lambda: {"runs": 0, "ok": 0, "lost": 0, "dup": 0, "conv": 0.0,
                                                             "dur": 0.0, "produced": 0})
    for r in records:
        out = r.get("output", "?")
        v = r.get("verdict") or {}
        lost, dup = int(v.get("lost", 0) or 0), int(v.get("duplicates", 0) or 0)
        conv = float(r.get("converge_s") or 0.0)
        t = totals[out]
        t["runs"] += 1
        t["ok"] += bool(r.get("ok"))
        t["lost"] += lost
        t["dup"] += dup
        t["conv"] = max(t["conv"], conv)
        t["dur"] += float(r.get("duration_s") or 0.0)
        t["produced"] += int(v.get("produced", 0) or 0)
        per_kind: dict[str, list[bool]] = defaultdict(list)
        for f in r.get("faults", []):
            per_kind[f.get("kind", "?")].append(bool(f.get("verified")))
        for kind, flags in per_kind.items():
            c = cell[(kind, out)]
            c["inj"] += sum(flags)
            c["missed"] += len(flags) - sum(flags)
            if any(flags):
                c["runs"] += 1
                c["lost"] += lost
                c["dup"] += dup
                c["conv"] = max(c["conv"], conv)
                c["failed"] += not r.get("ok")
    outs = [o for o in OUTPUT_KINDS if o in totals] + sorted(o for o in totals if o not in OUTPUT_KINDS)
    head = "| fault kind | " + " | ".join(outs) + " | all kinds |"
    legend = ("Each cell: runs with the fault injected / injections (not injected) / lost / duplicates / worst "
              "convergence s.")
    lines = [legend, "", head, "|" + "---|" * (len(outs) + 2)]
    kinds = [k for k in FAULT_KINDS if any((k, o) in cell for o in outs)]
    for kind in kinds:
        row = [kind]
        agg = {"runs": 0, "inj": 0, "missed": 0, "lost": 0, "dup": 0, "conv": 0.0}
        for o in outs:
            c = cell.get((kind, o))
            if c is None:
                row.append("-")
                continue
            row.append(_fmt(c))
            for k in ("runs", "inj", "missed", "lost", "dup"):
                agg[k] += c[k]
            agg["conv"] = max(agg["conv"], c["conv"])
        row.append(_fmt(agg))
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines.append("| output | runs | passed | produced | lost | duplicates | worst convergence s | mean run s |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for o in outs:
        t = totals[o]
        lines.append(f"| {o} | {t['runs']} | {t['ok']} | {t['produced']} | {t['lost']} | {t['dup']} | "
                     f"{t['conv']:.1f} | {t['dur'] / max(t['runs'], 1):.0f} |")
    return "\n".join(lines)


def _fmt(c: dict[str, Any]) -> str:
    missed = f" ({c['missed']})" if c["missed"] else ""
    return f"{c['runs']} / {c['inj']}{missed} / {c['lost']} / {c['dup']} / {c['conv']:.0f}"
