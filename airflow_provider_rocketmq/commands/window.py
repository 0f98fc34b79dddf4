"""``rocketmq-airflow window`` and ``window-commit``: one bounded window from the command line.

Same code as the Airflow operators (`window.runner.run_window`, `window.snapshot.snapshot_window`,
`window.commit.commit_manifest_files`), without Airflow:

    rocketmq-airflow window --namesrv 127.0.0.1:9876 --group G --topic T --staging DIR \\
        [--expression 'TagA || TagB'] [--max-messages N] [--max-bytes B] [--max-duration S] \\
        [--no-commit] [--from first|last] [--handoff staging|offsets] [--progress-interval S] [--json]
    rocketmq-airflow window-commit DIR_OR_MANIFEST [...] [--json]

``--handoff offsets`` writes a manifest of each queue's [committed, high-water) range and consumes
nothing (a Spark job reads the ranges through the ``rocketmq`` data source); such a window is never
committed by ``window``: run ``window-commit`` once the load succeeded. ``--no-commit`` staging
windows are committed the same way.

Progress: on a terminal (stderr) and without ``--json`` a live bar; with ``-v`` a progress line
every ``--progress-interval`` seconds in the log (window/progress.py). stdout is the same either way.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Callable, Iterator
from typing import Any

from airflow_provider_rocketmq.client.protocol.errors import RocketMQError

log = logging.getLogger(__name__)

_FROM = {"first": "CONSUME_FROM_FIRST_OFFSET", "last": "CONSUME_FROM_LAST_OFFSET"}


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``window`` command to the ``rocketmq-airflow`` parser."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "window",
        help="consume one bounded window of a topic into Parquet files plus a manifest",
        description="Snapshot every queue's max offset, consume the group's queues up to it, stage the "
        "messages as Parquet with a manifest.json, then commit the end offsets (unless --no-commit).",
    )
    # declared here too (cli.py adds them only where missing) so the command also works on its own parser
    p.add_argument("--namesrv", default=None, help="name servers host:port[;host:port] "
                   "(default: $NAMESRV_ADDR or 127.0.0.1:9876)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--group", required=True, help="consumer group")
    p.add_argument("--topic", required=True, help="topic")
    p.add_argument("--staging", required=True, help="window directory (manifest.json + part-*.parquet): a "
                   "path or a URL (s3://bucket/prefix, gs://..., file://...; s3 needs s3fs)")
    p.add_argument("--storage-options", default=None, metavar="JSON",
                   help='fsspec storage options for a URL, e.g. \'{"endpoint_url": "http://127.0.0.1:9000"}\'')
    p.add_argument("--expression", default="*", help="tag expression, e.g. 'TagA || TagB' (default *)")
    p.add_argument("--window-id", default=None, help="window id (default: time-based)")
    p.add_argument("--max-messages", type=int, default=None)
    p.add_argument("--max-bytes", type=int, default=None)
    p.add_argument("--max-duration", type=float, default=None, help="seconds")
    p.add_argument("--assignment-timeout", type=float, default=60.0,
                   help="seconds to wait for a first queue assignment (default 60)")
    p.add_argument("--idle-timeout", type=float, default=120.0,
                   help="stage what is contiguous after this many seconds without progress (default 120)")
    p.add_argument("--settle-time", type=float, default=0.0,
                   help="join suspended and take queues once the group's membership was stable this long "
                   "(use when several window commands of one group start together)")
    p.add_argument("--from", dest="start_from", choices=sorted(_FROM), default="first",
                   help="where a group without committed offsets starts (default first)")
    p.add_argument("--no-commit", action="store_true",
                   help="do not commit the end offsets (commit later with window-commit)")
    p.add_argument("--handoff", choices=HANDOFFS, default="staging",
                   help="staging (default): consume and stage Parquet; offsets: write only the offset "
                   "ranges for a Spark job reading through the rocketmq data source (nothing consumed, "
                   "nothing committed)")
    p.add_argument("--progress-interval", type=float, default=30.0, metavar="S",
                   help="with -v, log a progress line every S seconds (default 30; 0: none); on a terminal "
                   "a live bar is shown unless --json")
    p.set_defaults(func=run)

    c: argparse.ArgumentParser = subparsers.add_parser(
        "window-commit",
        help="commit the end offsets of window manifests (after the load succeeded)",
        description="Read and validate every manifest first (a corrupt one commits nothing), then set each "
        "manifest's consumer group to its end offsets, never backwards, reading them back from the broker.",
    )
    c.add_argument("--namesrv", default=None, help="name servers host:port[;host:port] "
                   "(default: $NAMESRV_ADDR or 127.0.0.1:9876)")
    c.add_argument("--json", action="store_true", help="print the offsets moved as JSON")
    c.add_argument("manifests", nargs="+", metavar="MANIFEST",
                   help="a window directory, its manifest.json, or a URL of either")
    c.add_argument("--storage-options", default=None, metavar="JSON", help="fsspec storage options for URLs")
    c.set_defaults(func=run_commit)
    return p


HANDOFFS = ("staging", "offsets")


def run(args: argparse.Namespace) -> int:
    """Execute the command; returns the exit code (one-line error on stderr for bad input)."""
    try:
        result = _run(args)
    except (RocketMQError, OSError) as exc:
        print(f"rocketmq-airflow window: error: {exc}", file=sys.stderr)
        return 2
    if getattr(args, "json", False):
        print(json.dumps({**result.to_xcom(), "window_id": result.window_id, "reused": result.reused,
                          "committed": result.committed, "handoff": args.handoff}))
    elif args.handoff == "offsets":
        print(f"offsets window {result.window_id}: {result.messages} offsets -> {result.manifest} "
              "(not committed: run window-commit after the load)")
    else:
        print(f"window {result.window_id}: {result.messages} messages, {result.bytes} bytes -> "
              f"{result.manifest}")
    return 0


def run_commit(args: argparse.Namespace) -> int:
    """``window-commit``: exit 0 with the offsets moved, 2 with one error line."""
    from airflow_provider_rocketmq.client import Admin, ClientConfig
    from airflow_provider_rocketmq.client.config import env_client_options
    from airflow_provider_rocketmq.window.commit import commit_manifest_files

    try:
        storage_options = _storage_options(args.storage_options)
        options = env_client_options(args.namesrv)
        with Admin(ClientConfig(**options).validate()) as admin:
            moved = commit_manifest_files(admin, args.manifests, storage_options=storage_options)
    except (RocketMQError, OSError) as exc:
        print(f"rocketmq-airflow window-commit: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"committed": moved}))
    else:
        for key, offset in sorted(moved.items()):
            print(f"committed {key} -> {offset}")
        if not moved:
            print("nothing to commit: the broker already holds these offsets or later ones")
    return 0


def _snapshot(args: argparse.Namespace, options: dict[str, Any], storage_options: dict[str, Any]) -> Any:
    """``--handoff offsets``: the manifest of [committed, high-water) ranges; nothing consumed or committed."""
    from airflow_provider_rocketmq.client import Admin, ClientConfig
    from airflow_provider_rocketmq.client.consumer.config import ConsumeFromWhere
    from airflow_provider_rocketmq.client.protocol.errors import ConfigError
    from airflow_provider_rocketmq.window.snapshot import OffsetsWindow, snapshot_window

    for flag, value in (("--max-bytes", args.max_bytes), ("--max-duration", args.max_duration)):
        if value is not None:
            raise ConfigError(flag, "an offsets window has no byte or time bound (nothing is consumed); "
                              "use --max-messages")
    if args.no_commit:
        log.info("--no-commit: an offsets window is never committed by this command anyway")
    spec = OffsetsWindow(
        topic=args.topic, consumer_group=args.group, staging_dir=args.staging, window_id=args.window_id,
        expression=args.expression, consume_from_where=ConsumeFromWhere[_FROM[args.start_from]],
        max_messages=args.max_messages, storage_options=storage_options)
    with Admin(ClientConfig(**options).validate()) as admin:
        return snapshot_window(spec, admin, namesrv=options["namesrv_addr"])


def _storage_options(text: str | None) -> dict[str, Any]:
    from airflow_provider_rocketmq.client.protocol.errors import ConfigError

    try:
        options = json.loads(text) if text else {}
    except ValueError as exc:
        raise ConfigError("storage_options", f"not valid JSON ({exc})") from None
    if not isinstance(options, dict):
        raise ConfigError("storage_options", "must be a JSON object")
    return options


def _run(args: argparse.Namespace) -> Any:
    from airflow_provider_rocketmq.client import Admin, ClientConfig, PushConsumer
    from airflow_provider_rocketmq.client.config import env_client_options
    from airflow_provider_rocketmq.client.consumer.config import ConsumeFromWhere, ConsumerConfig
    from airflow_provider_rocketmq.client.protocol.errors import ConfigError
    from airflow_provider_rocketmq.window.runner import (
        WINDOW_CONSUMER_DEFAULTS,
        Listener,
        WindowSpec,
        register_window_listener,
        run_window,
    )

    options = env_client_options(args.namesrv)  # namesrv, ACL credentials, namespace
    namesrv = options["namesrv_addr"]
    storage_options = _storage_options(args.storage_options)
    if args.handoff == "offsets":
        return _snapshot(args, options, storage_options)
    consumer_config = ConsumerConfig(**options, **WINDOW_CONSUMER_DEFAULTS, enable_offset_commit=False,
                                     consume_from_where=_FROM[args.start_from])
    consumer_config.validate()
    spec = WindowSpec(
        topic=args.topic, consumer_group=args.group, staging_dir=args.staging, window_id=args.window_id,
        storage_options=storage_options,
        expression=args.expression, max_messages=args.max_messages, max_bytes=args.max_bytes,
        max_duration=args.max_duration, commit=not args.no_commit,
        assignment_timeout=args.assignment_timeout, idle_timeout=args.idle_timeout,
        settle_time=args.settle_time,
        consume_from_where=ConsumeFromWhere[_FROM[args.start_from]],
    )
    spec.validate()
    if not args.progress_interval >= 0:
        raise ConfigError("--progress-interval", f"must be >= 0 seconds, got {args.progress_interval}")

    def make_consumer(listener: Listener) -> Any:
        consumer = PushConsumer(args.group, consumer_config)
        consumer.subscribe(args.topic, "*")  # tags are filtered by the window itself
        register_window_listener(consumer, listener)
        return consumer

    with Admin(ClientConfig(**options).validate()) as admin, _progress(args, spec) as progress:
        return run_window(spec, admin, make_consumer, namesrv=namesrv, progress=progress)


@contextlib.contextmanager
def _progress(args: argparse.Namespace, spec: Any) -> Iterator[Any]:
    """The window's progress hook: log lines with -v, a live bar on a terminal unless --json."""
    from airflow_provider_rocketmq.commands import terminal
    from airflow_provider_rocketmq.window.progress import Figures, WindowProgress

    lines = args.progress_interval if log.isEnabledFor(logging.INFO) else 0.0
    with contextlib.ExitStack() as stack:
        live: Callable[[Figures], None] | None = None
        if not args.json and terminal.wanted():
            bar = stack.enter_context(terminal.LiveBar(f"window {args.topic}"))

            def live(f: Figures) -> None:
                bar.update(f.completed, f.target or None, f.brief())
        yield WindowProgress(interval=lines, emit=lambda text: log.info("window progress: %s", text),
                             live=live, max_messages=spec.max_messages)
