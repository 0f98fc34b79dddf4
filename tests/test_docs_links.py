"""The README and docs/ link to each other by relative path and heading anchor; a moved section
(docs/benchmarks.md took the history out of the README and docs/consumer.md) must not leave a
reader at a dead link. Checks every relative link of every Markdown file in the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set()
    for line in text.splitlines():
        if line.startswith("#"):
            base = github_anchor(line.lstrip("#"))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def relative_links(path: Path) -> list[str]:
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    return [m for m in _LINK.findall(text) if not re.match(r"^[a-z]+:", m)]


def test_anchor_rule_matches_githubs() -> None:
    assert github_anchor(" Throughput (`bench/consume_throughput.py`)") == "throughput-benchconsume_throughputpy"
    assert github_anchor("Where 5.3.3 answers differently from 4.9.7") == "where-533-answers-differently-from-497"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_reaches_a_file_and_heading(doc: Path) -> None:
    broken = []
    for link in relative_links(doc):
        target, _, anchor = link.partition("#")
        dest = (doc.parent / target).resolve() if target else doc
        if not dest.exists():
            broken.append(f"{link}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{link}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


PKG = ROOT / "airflow_provider_rocketmq"
# where a path in the docs may start: the repository's top level, or the package's own folders
# (`spark/load/ledger.py` means airflow_provider_rocketmq/spark/load/ledger.py)
_ROOTS = {"airflow_provider_rocketmq", "tests", "bench", "dags", "docs", "scripts", "integration", ".ci"}
_PATH = re.compile(r"(?<![\w./:<>=$@~%-])[\w.-]+/[\w./-]*")
_PLACEHOLDER = set("<{*[")


def mentioned_paths(path: Path) -> list[tuple[int, str]]:
    """Repository paths a Markdown file mentions, in prose or code (``spark/load/ledger.py``,
    ``tests/window/``), with their line numbers; placeholders (``rocketmq-<version>.json``,
    ``part-*.parquet``, ``airflow_provider_rocketmq/...``) are not paths."""
    roots = _ROOTS | {p.name for p in PKG.iterdir() if p.is_dir() and not p.name.startswith("_")}
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for m in _PATH.finditer(line):
            token = m.group()
            if "..." in token or line[m.end():m.end() + 1] in _PLACEHOLDER:
                continue
            token = token.rstrip(".-")
            if token.split("/")[0] not in roots:
                continue
            out.append((n, token))
    return out


def test_path_rule_reads_paths_not_urls_nor_placeholders(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text("`spark/load/ledger.py`, tests/window/. and s3://bkt/tests/x, /data/window/w1,\n"
                   "window_id=<id>/part, tests/data/rocketmq-<version>.json, airflow_provider_rocketmq/...\n")
    assert mentioned_paths(doc) == [(1, "spark/load/ledger.py"), (1, "tests/window/")]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_path_mentioned_exists(doc: Path) -> None:
    missing = [f"line {n}: {token}" for n, token in mentioned_paths(doc)
               if not (ROOT / token).exists() and not (PKG / token).exists()]
    assert not missing, f"{doc.relative_to(ROOT)} mentions paths that do not exist:\n" + "\n".join(missing)


def test_the_readmes_complete_dag_is_the_example_dag_file() -> None:
    """The README's complete DAG is dags/rocketmq_s3_to_iceberg.py (tests/dags runs that file), its
    docstring aside: the two must not drift apart."""
    import ast

    source = (ROOT / "dags" / "rocketmq_s3_to_iceberg.py").read_text(encoding="utf-8")
    after_docstring = source.splitlines()[ast.parse(source).body[0].end_lineno or 0:]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", readme, re.DOTALL | re.MULTILINE)
    dag_blocks = [b for b in blocks if 'DAG("rocketmq_s3_to_iceberg"' in b]
    assert len(dag_blocks) == 1, "the README shows the complete DAG once"
    assert dag_blocks[0].strip("\n") == "\n".join(after_docstring).strip("\n")
