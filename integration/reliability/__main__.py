"""``python -m integration.reliability [--full] [pytest options]``: run the reliability checks."""

from __future__ import annotations

import sys

import pytest


def main(argv: list[str]) -> int:
    args = ["integration/reliability", "-p", "no:cacheprovider", "-q", "-rfEs", "--timeout=7200"]
    rest = []
    for a in argv:
        if a == "--full":
            args.append("--reliability-full")
        else:
            rest.append(a)
    return int(pytest.main(args + rest))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
