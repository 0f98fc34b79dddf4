"""Which Iceberg table a load writes: the ``iceberg://`` target, its catalog, the table's columns.

Target (the loader's ``--output``)::

    iceberg://<catalog>/<namespace>.<table>[?create=true][&partition=window_id|none]

``<catalog>`` is a pyiceberg catalog name (empty: pyiceberg's default catalog), ``<namespace>``
may have several levels (``a.b.events``). ``create=true`` creates the table (and its namespace)
when it does not exist, partitioned by ``identity(window_id)`` (``partition=window_id``, the
default, like the Parquet output's ``window_id=`` directories) or not at all (``partition=none``).
No other option is accepted: nothing secret may travel in a URL, which logs and ``ps`` show.

Catalog properties (``type``, ``uri``, ``warehouse``, ``s3.endpoint``, credentials...) come, later
ones winning, from

1. pyiceberg's own configuration: ``.pyiceberg.yaml`` in ``$PYICEBERG_HOME`` or the home
   directory, and ``PYICEBERG_CATALOG__<CATALOG>__<PROPERTY>`` environment variables;
2. ``$ROCKETMQ_OUTPUT_STORAGE_OPTIONS``, a JSON object: what the example DAGs render from the
   output's Airflow connection (its extra) into the job's environment;
3. a properties file named by the loader's ``--catalog-conf PATH`` or else by
   ``$ROCKETMQ_ICEBERG_CATALOG_CONF``: a JSON object, or ``key=value`` lines (``#`` comments).

The executors get only the table's FileIO properties (storage endpoint and credentials; the
catalog's ``uri``, tokens and passwords stay on the driver), inside the serialized Spark task.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, unquote, urlsplit

from tenacity import retry, retry_if_exception, stop_after_attempt, wait_random_exponential

from airflow_provider_rocketmq.client.protocol.errors import ConfigError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.types import IcebergType

SCHEME = "iceberg://"
CONF_ENV = "ROCKETMQ_ICEBERG_CATALOG_CONF"
OPTIONS_ENV = "ROCKETMQ_OUTPUT_STORAGE_OPTIONS"  # spark/load/load_window.py's STORAGE_OPTIONS_ENV
PARTITIONINGS = ("window_id", "none")
# FileIO property prefixes the executors need (pyiceberg.io); everything else stays on the driver
_IO_PREFIXES = ("s3.", "gcs.", "adls.", "hdfs.", "oss.", "hf.", "client.", "py-io-impl", "pyarrow.")


class IcebergUnavailable(ConfigError):
    """pyiceberg is not installed (the ``iceberg`` extra)."""


@dataclass(frozen=True)
class IcebergTarget:
    """A parsed ``iceberg://`` output."""

    catalog: str | None
    identifier: tuple[str, ...]
    create: bool = False
    partition: str = "window_id"

    @property
    def table_name(self) -> str:
        return ".".join(self.identifier)

    def __str__(self) -> str:
        return f"{SCHEME}{self.catalog or ''}/{self.table_name}"


def is_iceberg(output: str) -> bool:
    return output.startswith(SCHEME)


def parse_target(output: str, where: str = "--output") -> IcebergTarget:
    """Parse ``iceberg://<catalog>/<namespace>.<table>[?options]``; `ConfigError` naming ``where``."""
    if not is_iceberg(output):
        raise ConfigError(where, f"{output!r} is not an {SCHEME}<catalog>/<namespace>.<table> URL")
    parts = urlsplit(output)
    if "@" in parts.netloc or ":" in parts.netloc:
        raise ConfigError(where, "an iceberg:// URL names a catalog, not a host: no user, password or port "
                          "(catalog properties go in the environment or a --catalog-conf file)")
    if parts.fragment:
        raise ConfigError(where, f"unexpected fragment #{parts.fragment}")
    name = unquote(parts.path.lstrip("/"))
    identifier = tuple(name.split("."))
    if len(identifier) < 2 or not all(identifier) or "/" in name:
        raise ConfigError(where, f"{output!r}: expected {SCHEME}<catalog>/<namespace>.<table> "
                          "(a namespace and a table name, dot-separated)")
    options: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query)):
        if key not in ("create", "partition"):
            raise ConfigError(f"{where}?{key}", "unknown option (known: create, partition); catalog "
                              f"properties and secrets go in the environment or ${CONF_ENV}, never in the URL")
        options[key] = value
    create = options.get("create", "false").lower()
    if create not in ("true", "false", "1", "0", "yes", "no"):
        raise ConfigError(f"{where}?create", f"{options['create']!r} is not a boolean (true/false)")
    partition = options.get("partition", "window_id")
    if partition not in PARTITIONINGS:
        raise ConfigError(f"{where}?partition", f"{partition!r}: expected one of {', '.join(PARTITIONINGS)}")
    return IcebergTarget(unquote(parts.netloc) or None, identifier,
                         create in ("true", "1", "yes"), partition)


def _json_properties(text: str, where: str, source: str = "") -> dict[str, str]:
    at = f"{source}: " if source else ""
    try:
        data = json.loads(text)
    except ValueError as exc:  # the position only: the text may hold secrets
        raise ConfigError(where, f"{at}not valid JSON ({exc.__class__.__name__} at char "
                          f"{getattr(exc, 'pos', '?')})") from None
    if not isinstance(data, dict):
        raise ConfigError(where, f"{at}must be a JSON object of catalog properties")
    bad = [k for k, v in data.items() if not isinstance(v, (str, int, float, bool))]
    if bad:
        raise ConfigError(where, f"{at}property {bad[0]!r} must be a string, number or boolean")
    return {str(k): (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in data.items()}


def read_properties_file(path: str, where: str) -> dict[str, str]:
    """A catalog properties file: a JSON object of strings, or ``key=value`` lines."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(where, f"cannot read {path}: {exc.strerror or exc}") from None
    if text.lstrip().startswith("{"):
        return _json_properties(text, where, path)
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ConfigError(where, f"{path} line {n}: expected key=value")
        out[key.strip()] = value.strip()
    return out


def catalog_properties(conf_path: str | None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Properties added to pyiceberg's own catalog configuration, later ones winning: the JSON object
    in ``$ROCKETMQ_OUTPUT_STORAGE_OPTIONS`` (what the example DAGs render from the output's Airflow
    connection), then the ``--catalog-conf`` file (else the one ``$ROCKETMQ_ICEBERG_CATALOG_CONF`` names)."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    if env.get(OPTIONS_ENV):
        out.update(_json_properties(env[OPTIONS_ENV], OPTIONS_ENV))
    if conf_path:
        out.update(read_properties_file(conf_path, "--catalog-conf"))
    elif env.get(CONF_ENV):
        out.update(read_properties_file(env[CONF_ENV], CONF_ENV))
    return out


def require_pyiceberg() -> None:
    try:
        import pyiceberg  # noqa: F401
    except ModuleNotFoundError:
        raise IcebergUnavailable("--output", "an iceberg:// output needs pyiceberg: pip install "
                                 "'airflow-provider-rocketmq[iceberg]' (with the extra for your catalog, "
                                 "e.g. pyiceberg[sql-sqlite], [glue], [hive])") from None


def _may_pass(exc: BaseException) -> bool:
    """Whether loading the catalog again may succeed: not for a configuration mistake (pyiceberg
    raises ValueError/TypeError/KeyError for an unknown type or a missing property), but for a
    database or network error - e.g. two loads creating a fresh SQL catalog's tables at once, where
    one fails with "table iceberg_tables already exists" (SQLAlchemy checks, then creates)."""
    return not isinstance(exc, (ValueError, TypeError, KeyError, ImportError, NotImplementedError))


# loading a catalog only reads it or creates what is missing: idempotent, so it may be retried
_load_retry = retry(retry=retry_if_exception(_may_pass), stop=stop_after_attempt(4),
                    wait=wait_random_exponential(multiplier=0.2, max=2.0), reraise=True)


def open_catalog(target: IcebergTarget, properties: Mapping[str, str]) -> Catalog:
    require_pyiceberg()
    from pyiceberg.catalog import load_catalog

    try:
        return _load_retry(load_catalog)(target.catalog, **properties)
    except Exception as exc:
        name = target.catalog or "default"
        raise ConfigError(f"catalog {name}", f"cannot load the catalog ({type(exc).__name__}: {exc}); set its properties in "
                          f"PYICEBERG_CATALOG__{name.upper()}__<PROPERTY> variables, .pyiceberg.yaml or "
                          f"${CONF_ENV}") from None


# --- the table's columns ------------------------------------------------------------------------

def _columns(body_format: str) -> list[tuple[str, IcebergType, bool]]:
    """(name, type, required) of the rows a load writes, in `load_window`'s column order."""
    from pyiceberg.types import BinaryType, IntegerType, LongType, MapType, StringType

    string, long_, int_ = StringType(), LongType(), IntegerType()
    props = MapType(key_id=1, key_type=string, value_id=2, value_type=string, value_required=False)
    return [("topic", string, True), ("broker", string, True), ("queue_id", int_, True),
            ("queue_offset", long_, True), ("msg_id", string, False), ("tags", string, False),
            ("keys", string, False), ("properties", props, False), ("born_timestamp", long_, False),
            ("store_timestamp", long_, False), ("reconsume_times", int_, False),
            ("body", BinaryType() if body_format == "binary" else string, False),
            ("window_id", string, True)]


def new_schema(body_format: str) -> Schema:
    """The schema of a table the loader creates (pyiceberg assigns the final field ids)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    return Schema(*(NestedField(i, name, typ, required=req)
                    for i, (name, typ, req) in enumerate(_columns(body_format), start=100)))


def new_spec(schema: Schema, partition: str) -> PartitionSpec:
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    if partition == "none":
        return UNPARTITIONED_PARTITION_SPEC
    source = schema.find_field("window_id").field_id
    return PartitionSpec(PartitionField(source_id=source, field_id=1000, transform=IdentityTransform(),
                                        name="window_id"))


def _same_type(have: IcebergType, want: IcebergType) -> bool:
    from pyiceberg.types import IntegerType, LongType, MapType

    if isinstance(want, MapType):
        return (isinstance(have, MapType) and have.key_type == want.key_type
                and have.value_type == want.value_type and not have.value_required)
    return have == want or (isinstance(want, IntegerType) and isinstance(have, LongType))


def check_table(table: Table, body_format: str) -> None:
    """The table must take every column a load writes (same type, ``long`` for ``int`` too; optional
    where a load may write nulls) and need no other column; its partition fields must be computable
    from those columns. `ConfigError` naming the first column that does not fit."""
    schema = table.schema()
    where = "table " + ".".join(table.name())
    ours = _columns(body_format)
    for name, typ, required in ours:
        try:
            field = schema.find_field(name)
        except ValueError:
            raise ConfigError(f"{where}.{name}", "column missing (the loader writes it; add it or load into "
                              "a new table with ?create=true)") from None
        if not _same_type(field.field_type, typ):
            hint = " (--body-format binary needs a binary body, utf8/json a string one)" if name == "body" else ""
            raise ConfigError(f"{where}.{name}", f"type {field.field_type} does not take the loader's {typ}{hint}")
        if field.required and not required:
            raise ConfigError(f"{where}.{name}", "column is required but the loader may write nulls to it")
    names = {name for name, _, _ in ours}
    for field in schema.fields:
        if field.name not in names and field.required:
            raise ConfigError(f"{where}.{field.name}", "required column the loader does not write")
    from pyiceberg.types import IntegerType, LongType, StringType

    for pf in table.spec().fields:
        source = schema.find_column_name(pf.source_id)
        at = f"{where} partition field {pf.name}"
        if source not in names or not isinstance(schema.find_type(pf.source_id), (StringType, IntegerType, LongType)):
            raise ConfigError(at, f"source column {source} is not a string or integer column the loader writes")
        try:
            pf.transform.pyarrow_transform(schema.find_type(pf.source_id))
        except Exception as exc:
            raise ConfigError(at, f"the loader's writer cannot compute transform {pf.transform} ({exc})") from None


def open_table(catalog: Catalog, target: IcebergTarget, body_format: str) -> tuple[Table, bool]:
    """Load the table (creating it when the target asks); returns it and whether this call created it."""
    from pyiceberg.exceptions import (
        NoSuchNamespaceError,
        NoSuchTableError,
        TableAlreadyExistsError,
    )

    try:
        table = catalog.load_table(target.identifier)
    except NoSuchTableError:
        if not target.create:
            raise ConfigError("--output", f"{target}: no such table (add ?create=true to create it)") from None
    else:
        check_table(table, body_format)
        return table, False
    schema = new_schema(body_format)
    namespace = target.identifier[:-1]
    for attempt in range(2):
        try:
            table = catalog.create_table(target.identifier, schema=schema,
                                         partition_spec=new_spec(schema, target.partition))
            return table, True
        except TableAlreadyExistsError:  # a concurrent load created it first
            table = catalog.load_table(target.identifier)
            check_table(table, body_format)
            return table, False
        except NoSuchNamespaceError:
            if attempt:
                raise
            _create_namespace(catalog, namespace)
    raise AssertionError("unreachable")  # pragma: no cover


def _create_namespace(catalog: Catalog, namespace: tuple[str, ...]) -> None:
    """Create the namespace unless another load already has.

    Two loads that create the same table at once also race here. A catalog that checks before it
    inserts (pyiceberg's SQL catalog) lets both pass the check, and the second insert fails with
    its database's error (a unique-constraint violation), not NamespaceAlreadyExistsError: the
    namespace is there all the same, which is all this load needs.
    """
    from pyiceberg.exceptions import NamespaceAlreadyExistsError

    try:
        catalog.create_namespace(namespace)
    except NamespaceAlreadyExistsError:
        pass
    except Exception:
        if not catalog.namespace_exists(namespace):
            raise


def io_properties(table: Table) -> dict[str, str]:
    """The FileIO properties Spark tasks need to write the table's data files."""
    return {k: v for k, v in table.io.properties.items() if k.startswith(_IO_PREFIXES)}
