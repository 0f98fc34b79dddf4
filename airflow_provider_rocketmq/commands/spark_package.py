"""``rocketmq-airflow spark-package``: build the ``--py-files`` zip (spark/package.py) for spark-submit."""

from __future__ import annotations

import argparse
import json

from ..spark.package import DEFAULT_NAME, build_package
from ..spark.package import __doc__ as DESCRIPTION


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]  # generic only in typeshed
    p = subparsers.add_parser("spark-package", help="build a --py-files zip for spark-submit (no Airflow inside)",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", default=DEFAULT_NAME, help=f"zip file or directory (default: ./{DEFAULT_NAME})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = build_package(args.output)
    if args.json:
        print(json.dumps(result))
    else:
        print(result["path"])
    return 0
