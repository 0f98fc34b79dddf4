"""``rocketmq-airflow`` command line.

Sub-commands are contributed by the modules that own them: each module in
`COMMAND_MODULES` has ``register(subparsers)`` adding its parsers with
``set_defaults(func=run)`` where ``run(args) -> int``. Every command module imports
without the optional extras (they import what an extra installs when they run), so a
module that cannot be imported is a bug and the command line fails loudly; a command
that finds an optional package missing says which extra to install.

Every command gets ``--namesrv`` (default ``$NAMESRV_ADDR``, else
127.0.0.1:9876) and ``--json``. Bad input and client errors print one line
``error: ...`` on stderr and exit with status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from .client import RocketMQError

COMMAND_MODULES = [
    "airflow_provider_rocketmq.commands.produce",
    "airflow_provider_rocketmq.commands.admin",
    "airflow_provider_rocketmq.commands.broker",
    "airflow_provider_rocketmq.commands.consume",
    "airflow_provider_rocketmq.commands.window",
    "airflow_provider_rocketmq.commands.spark_package",
]
EXIT_ERROR = 2
# Third-party packages only an extra of pyproject.toml installs -> that extra
OPTIONAL_PACKAGES = {"pyarrow": "columnar", "numpy": "columnar", "pyspark": "spark", "pandas": "spark",
                     "s3fs": "s3", "pyiceberg": "iceberg", "lz4": "compression", "zstandard": "compression"}


class CliParser(argparse.ArgumentParser):
    """argparse with a one-line error (no usage dump) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(EXIT_ERROR)


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """``--namesrv`` and ``--json`` unless the command already declares them."""
    dests = {a.dest for a in parser._actions}
    if "namesrv" not in dests:
        parser.add_argument("--namesrv", default=None,
                            help="name servers host:port[;host:port] (default: $NAMESRV_ADDR or 127.0.0.1:9876)")
    if "json" not in dests:
        parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _leaf_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Parsers that run a command (nested sub-commands such as ``topic create`` included)."""
    out: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases map to one parser
                children = _leaf_parsers(sub)
                out.extend(children or [sub])
    return out


def build_parser(modules: Sequence[str] | None = None) -> CliParser:
    """The parser of every command of ``modules`` (default `COMMAND_MODULES`); an ImportError of one
    of them propagates."""
    parser = CliParser(prog="rocketmq-airflow",
                       description="RocketMQ tools of airflow-provider-rocketmq: produce, consume, lag, "
                                   "topics, windows and an embedded broker.")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log progress and warnings (INFO) on stderr; default: errors only")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES if modules is None else modules:
        importlib.import_module(name).register(subparsers)
    for leaf in _leaf_parsers(parser):
        add_common_options(leaf)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    func: Any = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    try:
        return int(func(args) or 0)
    except (RocketMQError, ValueError) as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__  # one line, whatever the message
        sys.stderr.write(f"error: {text}\n")
        return EXIT_ERROR
    except ModuleNotFoundError as exc:
        package = (exc.name or "").split(".")[0]
        extra = OPTIONAL_PACKAGES.get(package)
        if extra is None:
            raise
        sys.stderr.write(f"error: `{args.command}` needs {package}, which is not installed: "
                         f"pip install 'airflow-provider-rocketmq[{extra}]'\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
