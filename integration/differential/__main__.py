"""``python -m integration.differential [--record] [--cases a,b]``: run the cases against the broker of
ROCKETMQ_NAMESRV (with ROCKETMQ_ACL_NAMESRV + ROCKETMQ_ACL_FILE the ACL 1.0 cases against a plain-ACL
broker, with ROCKETMQ_ACL2_NAMESRV + ROCKETMQ_ACL2_ACCESS_KEY / ROCKETMQ_ACL2_SECRET_KEY - a super
user - the ACL 2.0 cases against a 5.3+ broker) and against the embedded broker; print every
divergence; ``--record`` writes the real answers to tests/data/differential/ for the CI check of the
embedded broker."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

from .compare import compare, rules_for
from .runner import acl_runs, embedded_target, load_accounts, real_target, recording_path, run, save, select


async def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m integration.differential")
    ap.add_argument("--record", action="store_true", help="write the real broker's answers to tests/data")
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--out", default="", help="write the recordings into this directory instead")
    ap.add_argument("--date", default=time.strftime("%Y-%m-%d"), help="the date written into a recording")
    args = ap.parse_args(argv)
    names = [c for c in args.cases.split(",") if c] or None
    runs = acl_runs(os.environ)
    if not runs:
        print("error: name the real brokers: ROCKETMQ_NAMESRV (the plain cases), ROCKETMQ_ACL_NAMESRV + "
              "ROCKETMQ_ACL_FILE (ACL 1.0), ROCKETMQ_ACL2_NAMESRV + ROCKETMQ_ACL2_ACCESS_KEY/SECRET_KEY (ACL 2.0)",
              file=sys.stderr)
        return 2
    status = 0
    for acl, ns, accounts_file, super_user in runs:
        cases = select(names, acl=acl)
        if not cases:
            continue
        target = await real_target(ns, load_accounts(accounts_file) if accounts_file else (), super_user)
        real, version = await run(target, cases)
        async with embedded_target(accounts_file, super_user) as emb:
            embedded, _ = await run(emb, cases)
        report = compare(real, embedded, rules_for(version))
        for d in report.divergences:
            print(d)
        print(report.summary(f"real {version}{f' ({acl})' if acl else ''}", "embedded"))
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
