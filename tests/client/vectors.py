"""Loader for the recorded RocketMQ 4.9.7 frames in /work/shared/protocol/vectors."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

VECTORS_DIR = Path(os.environ.get("ROCKETMQ_VECTORS_DIR", "/work/shared/protocol/vectors"))
FILES = ("producer", "push_concurrent", "two_consumers_rebalance", "push_orderly", "admin", "errors")


def available() -> bool:
    return all((VECTORS_DIR / f"{name}.jsonl").is_file() for name in FILES)


def load(name: str) -> list[dict[str, Any]]:
    with open(VECTORS_DIR / f"{name}.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def all_records() -> list[dict[str, Any]]:
    if not available():
        return []
    out = []
    for name in FILES:
        for rec in load(name):
            rec["_file"] = name
            out.append(rec)
    return out


def rec_id(rec: dict[str, Any]) -> str:
    return f"{rec['_file']}#{rec['index']}:{rec['code']}"
