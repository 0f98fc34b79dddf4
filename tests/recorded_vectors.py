"""Loader for the recorded RocketMQ 4.9.7 frames in ``tests/data/vectors`` (see its INDEX.md).

The captures travel with the repository, so a bare checkout runs every vector test.
``ROCKETMQ_VECTORS_DIR`` (the only override) points the tests at another copy. A
missing or incomplete directory is an error, never a skip: the tests that read it
would otherwise pass while checking nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

DEFAULT_DIR = Path(__file__).resolve().parent / "data" / "vectors"
VECTORS_DIR = Path(os.environ.get("ROCKETMQ_VECTORS_DIR") or DEFAULT_DIR)
FILES = ("producer", "push_concurrent", "two_consumers_rebalance", "push_orderly", "admin", "errors")


class VectorsMissingError(RuntimeError):
    """The recorded frames are not where the tests expect them."""


def path(name: str) -> Path:
    """The JSONL file of one recording; raises if it is missing."""
    p = VECTORS_DIR / f"{name}.jsonl"
    if not p.is_file():
        raise VectorsMissingError(f"recorded vectors missing: {p} (restore tests/data/vectors or set "
                                  f"ROCKETMQ_VECTORS_DIR to a directory holding {', '.join(FILES)})")
    return p


def load(name: str) -> list[dict[str, Any]]:
    with open(path(name), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def all_records() -> list[dict[str, Any]]:
    out = []
    for name in FILES:
        for rec in load(name):
            rec["_file"] = name
            out.append(rec)
    return out


def rec_id(rec: dict[str, Any]) -> str:
    return f"{rec['_file']}#{rec['index']}:{rec['code']}"
