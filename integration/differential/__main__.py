"""``python -m integration.differential [--record] [--cases a,b]``: run the cases against the broker of
ROCKETMQ_NAMESRV (and, with ROCKETMQ_ACL_NAMESRV + ROCKETMQ_ACL_FILE, the ACL cases against an ACL
broker) and against the embedded broker; print every divergence; ``--record`` writes the real
answers to tests/data/differential/ for the CI check of the embedded broker."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

from .compare import compare, rules_for
from .runner import embedded_target, load_accounts, real_target, recording_path, run, save, select


async def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m integration.differential")
    ap.add_argument("--record", action="store_true", help="write the real broker's answers to tests/data")
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--out", default="", help="write the recordings into this directory instead")
    ap.add_argument("--date", default=time.strftime("%Y-%m-%d"), help="the date written into a recording")
    args = ap.parse_args(argv)
    names = [c for c in args.cases.split(",") if c] or None
    namesrv = os.environ.get("ROCKETMQ_NAMESRV", "").strip()
    if not namesrv:
        print("error: ROCKETMQ_NAMESRV must name the real broker's name server", file=sys.stderr)
        return 2
    status = 0
    runs: list[tuple[bool, str, str | None]] = [(False, namesrv, None)]
    acl_ns, acl_file = os.environ.get("ROCKETMQ_ACL_NAMESRV", "").strip(), os.environ.get("ROCKETMQ_ACL_FILE", "")
    if acl_ns and acl_file:
        runs.append((True, acl_ns, acl_file))
    else:
        print("ACL cases skipped: set ROCKETMQ_ACL_NAMESRV and ROCKETMQ_ACL_FILE to run them")
    for acl, ns, accounts_file in runs:
        cases = select(names, acl=acl)
        if not cases:
            continue
        target = await real_target(ns, load_accounts(accounts_file) if accounts_file else ())
        real, version = await run(target, cases)
        async with embedded_target(accounts_file) as emb:
            embedded, _ = await run(emb, cases)
        report = compare(real, embedded, rules_for(version))
        for d in report.divergences:
            print(d)
        print(report.summary(f"real {version}{' (ACL)' if acl else ''}", "embedded"))
        if report.unexplained:
            status = 1
        if args.record or args.out:
            path = recording_path(version, acl)
            if args.out:
                path = Path(args.out) / path.name
            save(path, real, version, args.date)
            print(f"recorded {path}")
    return status


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(sys.argv[1:])))
