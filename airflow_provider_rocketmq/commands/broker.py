"""``rocketmq-airflow broker``: run the embedded name server and brokers until SIGINT/SIGTERM.

Prints ``namesrv=127.0.0.1:P`` (then one ``<broker name>=host:port`` line per
broker) on stdout once every server listens, or one JSON object with ``--json``.
Also runnable as ``python -m airflow_provider_rocketmq.embedded``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
from collections.abc import Sequence
from typing import Any

from ..client.protocol.errors import ConfigError
from ..embedded.acl import AclConfig, AclValidator
from ..embedded.acl2 import Acl2Config, load_acl2
from ..embedded.cluster import EmbeddedCluster
from ..embedded.faults import parse_offset_faults

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=9876, help="name server port (0: a free port; default 9876)")
    parser.add_argument("--brokers", type=int, default=1, help="number of brokers (default 1)")
    parser.add_argument("--queues", type=int, default=8, help="queues of auto-created topics (default 8)")
    parser.add_argument("--data-dir", default=None,
                        help="keep messages, offsets and topics here (survive restarts); default: memory only")
    parser.add_argument("--broker-port", type=int, default=0,
                        help="port of the first broker, the next ones follow (default: free ports)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="multiply retry delay levels by this (e.g. 0.01 for fast demos)")
    parser.add_argument("--fsync", action="store_true",
                        help="fsync every write batch before acknowledging (default: write to the OS only)")
    parser.add_argument("--acl-file", default=None, metavar="FILE",
                        help="check signatures and permissions with these plain_acl.yml accounts "
                             "(YAML, or JSON with a .json suffix); default: no ACL")
    parser.add_argument("--acl2-file", default=None, metavar="FILE",
                        help="ACL 2.0 (as a 5.3 broker with authentication and authorization on): the super user, "
                             "users and policies in this JSON or YAML file ({super_user: [name, password], users: "
                             "[...], acls: {user: [...]}}, docs/embedded.md); more with mqadmin createUser/createAcl")
    parser.add_argument("--lock-expiry", type=float, default=60.0,
                        help="seconds an orderly queue lock lives without renewal (default 60, as a real broker)")
    parser.add_argument("--faults", default="",
                        help="a real broker's offset behaviour, e.g. offset-race=0.05,pull-commit-delay=0.2 "
                             "(see docs/embedded.md; default: none)")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("broker", help="run an embedded RocketMQ-compatible name server and brokers",
                                   description=__doc__)
    add_arguments(parser)
    parser.set_defaults(func=run)


def _check(args: argparse.Namespace) -> None:
    for name in ("port", "broker_port"):
        value = getattr(args, name)
        if not 0 <= value <= 65535:
            raise ConfigError(f"--{name.replace('_', '-')}", f"must be a port in [0, 65535], got {value}")
    if args.broker_port and args.broker_port + args.brokers - 1 > 65535:
        raise ConfigError("--broker-port", "leaves no room for every broker below 65536")


def _as_option(exc: ConfigError) -> ConfigError:
    """The same error naming the command-line option (``data_dir`` -> ``--data-dir``)."""
    return ConfigError(f"--{exc.field.replace('_', '-')}", str(exc).split(": ", 1)[-1])


def run(args: argparse.Namespace) -> int:
    _check(args)
    acl = None
    if getattr(args, "acl_file", None):
        try:
            acl = AclConfig.load(args.acl_file)
            AclValidator(acl)  # account errors now, naming the file, rather than at the first request
        except ConfigError as exc:  # "acl: cannot read ..." -> "--acl-file: cannot read ..."
            detail = str(exc).split(": ", 1)[-1] if exc.field == "acl" else str(exc)
            raise ConfigError("--acl-file", detail) from None
    acl2: Acl2Config | None = None
    if getattr(args, "acl2_file", None):
        if acl is not None:
            raise ConfigError("--acl2-file", "a broker runs ACL 1.0 (--acl-file) or ACL 2.0 (--acl2-file), not both")
        try:
            acl2 = load_acl2(args.acl2_file)
        except ConfigError as exc:
            raise ConfigError("--acl2-file", str(exc)) from None
    faults = parse_offset_faults(args.faults, "--faults")
    try:
        cluster = EmbeddedCluster(
            acl=acl, acl2=acl2, brokers=args.brokers, queues=args.queues, data_dir=args.data_dir,
            time_scale=args.time_scale, host=args.host, namesrv_port=args.port, fsync=args.fsync,
            lock_expiry=args.lock_expiry,
            broker_ports=[args.broker_port + i for i in range(args.brokers)] if args.broker_port else None)
    except ConfigError as exc:
        raise _as_option(exc) from None
    if faults.active:
        cluster.set_offset_faults(faults)
    return asyncio.run(_serve(cluster, bool(getattr(args, "json", False))))


async def _serve(cluster: EmbeddedCluster, as_json: bool) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread, or no signals here
            loop.add_signal_handler(sig, stop.set)
    try:
        await cluster.astart()
    except ConfigError as exc:  # e.g. the data dir is unusable or in use
        raise _as_option(exc) from None
    except OSError as exc:
        raise ConfigError("--port", f"cannot listen: {exc}") from None
    try:
        if as_json:
            print(json.dumps(cluster.describe()), flush=True)
        else:
            lines = [f"namesrv={cluster.namesrv_addr}"] + [f"{b.name}={b.addr}" for b in cluster.brokers]
            print("\n".join(lines), flush=True)
        await stop.wait()
    finally:
        await cluster.astop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_provider_rocketmq.embedded", description=__doc__)
    add_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the addresses as one JSON object")
    parser.add_argument("-v", "--verbose", action="store_true", help="log INFO on stderr")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return run(args)
    except (ConfigError, ValueError) as exc:
        sys.stderr.write(f"error: {' '.join(str(exc).split())}\n")
        return 2
