"""``rocketmq-airflow spark-package``: a ``--py-files`` zip that lets plain ``spark-submit`` executors
read RocketMQ without installing this package.

The zip holds what the ``rocketmq`` data source and the Spark apps import on the
driver and the executors, and nothing of the Airflow layer: ``client/`` (the
RocketMQ client), ``spark/`` (data source, loaders), ``window/__init__.py`` and
``window/manifest.py`` (the manifest format) with the modules of this package they
import, plus the pure-Python dependency ``tenacity``. Executors still need ``pyarrow`` (Spark's Arrow path needs it anyway)
and, for LZ4/ZSTD bodies, ``lz4``/``zstandard``.

    rocketmq-airflow spark-package --output /tmp/rocketmq-spark.zip
    spark-submit --py-files /tmp/rocketmq-spark.zip my_app.py

Entries are written in sorted order with a fixed timestamp, so the same sources
give the same zip (byte for byte).
"""

from __future__ import annotations

import ast
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path

from airflow_provider_rocketmq.client.protocol.errors import ConfigError

DEFAULT_NAME = "rocketmq-spark.zip"
PACKAGE = "airflow_provider_rocketmq"
# package-relative paths: whole directories (recursively) or single files
INCLUDED = ("__init__.py", "client", "spark", "window/__init__.py", "window/manifest.py")
THIRD_PARTY = ("tenacity",)
_EPOCH = (1980, 1, 1, 0, 0, 0)  # zip's earliest timestamp: reproducible archives
_NAMESPACE_INIT = b'"""Package marker added by spark-package (zipimport needs one)."""\n'


def _imported_package_modules(path: Path, root: Path) -> set[Path]:
    """Files of this package that ``path`` imports (absolute imports only, as the package's own style)."""
    out: set[Path] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
        for name in names:
            if name.startswith(PACKAGE + "."):
                rel = Path(*name.split(".")[1:])
                for candidate in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
                    if candidate.is_file():
                        out.add(candidate)
    return out


def _package_files() -> Iterator[tuple[Path, str]]:
    root = Path(__file__).resolve().parents[1]
    wanted: set[Path] = set()
    for rel in INCLUDED:
        path = root / rel
        wanted.update([path] if path.is_file() else path.rglob("*.py"))
    # and whatever of window/ (or elsewhere) those modules import, transitively (e.g. window/staging.py)
    todo = list(wanted)
    while todo:
        for dep in _imported_package_modules(todo.pop(), root):
            if dep not in wanted:
                wanted.add(dep)
                todo.append(dep)
    for f in sorted(wanted):
        yield f, f"{PACKAGE}/{f.relative_to(root).as_posix()}"
    for name in THIRD_PARTY:
        module = __import__(name)
        base = Path(module.__file__).resolve().parent  # type: ignore[arg-type]  # a regular package has a __file__
        for f in sorted(base.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts and f.suffix in (".py", ".typed"):
                yield f, f"{name}/{f.relative_to(base).as_posix()}"


def build_package(output: str | os.PathLike[str]) -> dict[str, object]:
    """Write the zip to ``output`` (a file, or a directory for `DEFAULT_NAME`); return path, files, bytes."""
    target = Path(output)
    if target.is_dir() or os.fspath(output).endswith(("/", os.sep)):
        target = target / DEFAULT_NAME
    if target.suffix != ".zip":
        raise ConfigError("output", f"{target} must end in .zip (spark-submit --py-files wants .zip, .egg or .py)")
    target.parent.mkdir(parents=True, exist_ok=True)
    files = {arcname: src.read_bytes() for src, arcname in _package_files()}
    # zipimport does not do implicit namespace packages (client/consumer has no __init__.py)
    for arcname in list(files):
        parts = arcname.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            files.setdefault("/".join(parts[:i]) + "/__init__.py", _NAMESPACE_INIT)
    tmp = target.with_name(f".{target.name}.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for arcname, data in sorted(files.items()):
            info = zipfile.ZipInfo(arcname, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    os.replace(tmp, target)
    return {"path": str(target), "files": len(files), "bytes": target.stat().st_size}
