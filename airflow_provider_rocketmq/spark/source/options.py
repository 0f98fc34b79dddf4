"""Options of the ``rocketmq`` Spark data source, parsed and checked once (no Spark, no Airflow).

Spark hands a data source its options as a case-insensitive string map. `parse_options`
turns that map into a `SourceOptions` value, raising `ConfigError` naming the option
for anything wrong, so a typo fails the query at once with one clear line instead
of a stack trace from an executor. Option names follow Spark's Kafka source where
one exists (``startingOffsets``, ``endingOffsets``, ``minPartitions``,
``failOnDataLoss``, ``maxOffsetsPerTrigger``).

Secrets (``accessKey``, ``secretKey``, ``securityToken``) never appear in
``repr``, in errors or in logs: `SourceOptions.__repr__` masks them and no message
built here quotes an option's value unless the option is known not to be secret.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_rocketmq.client.config import ClientConfig, parse_namesrv
from airflow_provider_rocketmq.client.consumer.subscription import build_subscription
from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.client.protocol.names import check_topic

EARLIEST = "earliest"
LATEST = "latest"
# in a JSON offsets object, like Spark's Kafka source: -2 = the queue's earliest, -1 = its latest
JSON_EARLIEST = -2
JSON_LATEST = -1

DEFAULT_READER_GROUP = "rocketmq_spark_reader"
DEFAULT_PULL_BATCH = 32  # a broker answers at most 32 messages per pull by default
MAX_PULL_BATCH = 1024
# on a real 4.9.7, two tasks on 2 cores: 256 rather than 64 kept the broker working while the tasks decode
# and write (offsets load ~8 % faster) and cost it ~15 % less CPU per row (64 rather than 16: ~30 % less)
DEFAULT_PULLS_IN_FLIGHT = 256
MAX_PULLS_IN_FLIGHT = 1024
SECRET_OPTIONS = ("accessKey", "secretKey", "securityToken")

QueueKey = tuple[str, int]  # (broker name, queue id)
# "earliest" | "latest" | {topic: {(broker, queue id): offset or JSON_EARLIEST/JSON_LATEST}}
OffsetSpec = str | dict[str, dict[QueueKey, int]]

# canonical spelling of every option; Spark lower-cases the keys it passes
KNOWN_OPTIONS = (
    "namesrv", "topic", "startingOffsets", "endingOffsets", "manifest", "minPartitions", "expression",
    "failOnDataLoss", "accessKey", "secretKey", "securityToken", "namespace", "requestTimeout", "tls",
    "maxOffsetsPerTrigger", "commitGroup", "readerGroup", "pullBatchSize", "pullsInFlight",
)
_CANONICAL = {name.lower(): name for name in KNOWN_OPTIONS}


@dataclass(frozen=True)
class SourceOptions:
    """Everything the driver and the tasks need to read; picklable, secrets masked in ``repr``."""

    namesrv: str
    topics: tuple[str, ...] = ()
    starting: OffsetSpec = EARLIEST
    ending: OffsetSpec = LATEST
    manifest: str | None = None
    min_partitions: int | None = None
    expression: str | None = None  # None: not given (a manifest's expression then applies)
    fail_on_data_loss: bool = True
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    security_token: str | None = field(default=None, repr=False)
    namespace: str = ""
    request_timeout: float = 10.0
    use_tls: bool = False
    max_offsets_per_trigger: int | None = None
    commit_group: str | None = None
    reader_group: str = DEFAULT_READER_GROUP
    pull_batch_size: int = DEFAULT_PULL_BATCH
    pulls_in_flight: int = DEFAULT_PULLS_IN_FLIGHT

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.public_items())
        hidden = ", ".join(f"{name}='***'" for name in SECRET_OPTIONS if self._secret(name) is not None)
        return f"SourceOptions({shown}{', ' if hidden else ''}{hidden})"

    __str__ = __repr__

    def _secret(self, option: str) -> str | None:
        return {"accessKey": self.access_key, "secretKey": self.secret_key,
                "securityToken": self.security_token}[option]

    def public_items(self) -> list[tuple[str, Any]]:
        """The non-secret settings, for logs and ``repr``."""
        return [("namesrv", self.namesrv), ("topics", self.topics), ("starting", self.starting),
                ("ending", self.ending), ("manifest", self.manifest), ("min_partitions", self.min_partitions),
                ("expression", self.expression), ("fail_on_data_loss", self.fail_on_data_loss),
                ("namespace", self.namespace), ("request_timeout", self.request_timeout),
                ("use_tls", self.use_tls), ("max_offsets_per_trigger", self.max_offsets_per_trigger),
                ("commit_group", self.commit_group), ("reader_group", self.reader_group),
                ("pull_batch_size", self.pull_batch_size), ("pulls_in_flight", self.pulls_in_flight)]

    def client_config(self) -> ClientConfig:
        """A `ClientConfig` for this source (a distinct instance name per process)."""
        return ClientConfig(namesrv_addr=self.namesrv, access_key=self.access_key, secret_key=self.secret_key,
                            security_token=self.security_token, namespace=self.namespace,
                            request_timeout=self.request_timeout, use_tls=self.use_tls,
                            instance_name=f"spark-{os.getpid()}")

    def redact(self, text: str) -> str:
        """``text`` with every credential replaced by ``***`` (brokers quote the access key in ACL
        refusals, e.g. "Check signature failed for accessKey=...")."""
        for secret in (self.secret_key, self.security_token, self.access_key):
            if secret:
                text = text.replace(secret, "***")
        return text

    def tag_filter(self) -> frozenset[str] | None:
        """The exact tags to keep, or None for every message."""
        if self.expression is None:
            return None
        sub = build_subscription("topic", self.expression)
        return None if sub.match_all else sub.tags_set


@contextlib.contextmanager
def redacting(opts: SourceOptions) -> Iterator[None]:
    """Re-raise any exception of the block (and its causes) with the credentials redacted."""
    try:
        yield
    except BaseException as exc:
        if opts.access_key or opts.secret_key or opts.security_token:
            seen: set[int] = set()
            e: BaseException | None = exc
            while e is not None and id(e) not in seen:
                seen.add(id(e))
                e.args = tuple(opts.redact(a) if isinstance(a, str) else a for a in e.args)
                for attr in ("remark",):  # BrokerError keeps the broker's text apart as well
                    value = getattr(e, attr, None)
                    if isinstance(value, str):
                        setattr(e, attr, opts.redact(value))
                e = e.__cause__ or e.__context__
        raise


def parse_options(raw: Mapping[str, str], *, streaming: bool = False) -> SourceOptions:
    """Check Spark's option map and build `SourceOptions`; `ConfigError` names the bad option."""
    opts = _canonical(raw)
    namesrv = opts.get("namesrv", "").strip()
    if not namesrv:
        raise ConfigError("namesrv", "is required (name servers host:port[;host:port])")
    parse_namesrv(namesrv, "namesrv")
    manifest = opts.get("manifest") or None
    topics = _topics(opts.get("topic", ""))
    _check_what_to_read(opts, manifest, topics, streaming)
    starting, ending = _offset_bounds(opts, topics, streaming)
    expression = opts.get("expression")
    if expression is not None:
        build_subscription("topic", expression)  # ConfigError("expression", ...) for a bad one
    access_key, secret_key, token = _credentials(opts)
    commit_group = opts.get("commitGroup") or None
    if commit_group is not None:
        if not streaming:
            raise ConfigError("commitGroup", "is for streaming reads (batch reads commit nothing)")
        check_topic(commit_group, "commitGroup")
    reader_group = check_topic(opts.get("readerGroup", DEFAULT_READER_GROUP), "readerGroup")
    max_per_trigger = _int(opts, "maxOffsetsPerTrigger", 1, None)
    if max_per_trigger is not None and not streaming:
        raise ConfigError("maxOffsetsPerTrigger", "is for streaming reads only")

    result = SourceOptions(
        namesrv=namesrv,
        topics=topics,
        starting=starting,
        ending=ending,
        manifest=manifest,
        min_partitions=_int(opts, "minPartitions", 1, None),
        expression=expression,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        access_key=access_key,
        secret_key=secret_key,
        security_token=token,
        namespace=opts.get("namespace", ""),
        request_timeout=_float(opts, "requestTimeout", 10.0),
        use_tls=_bool(opts, "tls", False),
        max_offsets_per_trigger=max_per_trigger,
        commit_group=commit_group,
        reader_group=reader_group,
        pull_batch_size=_int(opts, "pullBatchSize", 1, MAX_PULL_BATCH) or DEFAULT_PULL_BATCH,
        pulls_in_flight=_int(opts, "pullsInFlight", 1, MAX_PULLS_IN_FLIGHT) or DEFAULT_PULLS_IN_FLIGHT,
    )
    try:
        result.client_config().validate()
    except ConfigError as exc:  # name the data source option, not the ClientConfig field
        raise ConfigError(_CLIENT_FIELD_TO_OPTION.get(exc.field, exc.field), _message(exc)) from None
    return result


def _canonical(raw: Mapping[str, str]) -> dict[str, str]:
    """The options under their canonical names (Spark lower-cases keys); unknown ones refused."""
    opts: dict[str, str] = {}
    for key, value in raw.items():
        name = _CANONICAL.get(str(key).lower())
        if name is None:
            close = difflib.get_close_matches(str(key).lower(), list(_CANONICAL), n=1)
            hint = f"did you mean {_CANONICAL[close[0]]}? " if close else ""
            raise ConfigError(str(key), f"unknown option of the rocketmq data source ({hint}known: "
                              f"{', '.join(KNOWN_OPTIONS)})")
        if value is not None:
            opts[name] = str(value)
    return opts


def _check_what_to_read(opts: Mapping[str, str], manifest: str | None, topics: tuple[str, ...],
                        streaming: bool) -> None:
    """A manifest (a fixed window, batch only, one topic) or topics with offset bounds."""
    if manifest is None:
        if not topics:
            raise ConfigError("topic", "is required (one topic or a comma-separated list), unless manifest is given")
        return
    if streaming:
        raise ConfigError("manifest", "reads a fixed window: use spark.read, not spark.readStream")
    for other in ("startingOffsets", "endingOffsets"):
        if other in opts:
            raise ConfigError(other, "cannot be combined with manifest (the manifest holds the ranges)")
    if len(topics) > 1:
        raise ConfigError("topic", "a manifest covers one topic")


def _offset_bounds(opts: Mapping[str, str], topics: tuple[str, ...], streaming: bool) -> tuple[OffsetSpec, OffsetSpec]:
    starting = _offset_spec(opts.get("startingOffsets", EARLIEST), "startingOffsets", topics)
    ending = _offset_spec(opts.get("endingOffsets", LATEST), "endingOffsets", topics)
    if streaming and "endingOffsets" in opts:
        raise ConfigError("endingOffsets", "is for batch reads only (a stream has no end)")
    if ending == EARLIEST:
        raise ConfigError("endingOffsets", "must be 'latest' or a JSON object of offsets, not 'earliest'")
    if isinstance(ending, dict) and any(v == JSON_EARLIEST for q in ending.values() for v in q.values()):
        raise ConfigError("endingOffsets", f"{JSON_EARLIEST} (earliest) is not a valid end offset")
    return starting, ending


def _credentials(opts: Mapping[str, str]) -> tuple[str | None, str | None, str | None]:
    """accessKey, secretKey, securityToken: both keys or neither, a token only with them."""
    access_key, secret_key = opts.get("accessKey") or None, opts.get("secretKey") or None
    token = opts.get("securityToken") or None
    if (access_key is None) != (secret_key is None):
        raise ConfigError("secretKey" if access_key else "accessKey", "ACL needs both accessKey and secretKey")
    if token is not None and access_key is None:
        raise ConfigError("securityToken", "needs accessKey and secretKey")
    return access_key, secret_key, token


_CLIENT_FIELD_TO_OPTION = {"namesrv_addr": "namesrv", "access_key": "accessKey", "secret_key": "secretKey",
                           "security_token": "securityToken", "request_timeout": "requestTimeout",
                           "use_tls": "tls", "namespace": "namespace"}


def _message(exc: ConfigError) -> str:
    text = str(exc)
    prefix = f"{exc.field}: "
    return text.removeprefix(prefix)


def _topics(value: str) -> tuple[str, ...]:
    out: list[str] = []
    for part in value.split(","):
        part = part.strip()
        if part:
            check_topic(part, "topic")
            if part not in out:
                out.append(part)
    return tuple(out)


def _offset_spec(value: str, name: str, topics: tuple[str, ...]) -> OffsetSpec:
    text = value.strip()
    if text.lower() in (EARLIEST, LATEST):
        return text.lower()
    try:
        data = json.loads(text)
    except ValueError:
        raise ConfigError(name, f"must be 'earliest', 'latest' or a JSON object "
                          f'{{"<topic>": {{"<broker>:<queue_id>": <offset>}}}}, got {text[:80]!r}') from None
    if not isinstance(data, dict):
        raise ConfigError(name, "a JSON value must be an object {topic: {\"broker:queue_id\": offset}}")
    spec: dict[str, dict[QueueKey, int]] = {}
    for topic, queues in data.items():
        if topics and topic not in topics:
            raise ConfigError(f"{name}.{topic}", f"topic is not among the read topics ({', '.join(topics)})")
        if not isinstance(queues, dict):
            raise ConfigError(f"{name}.{topic}", "must be an object {\"<broker>:<queue_id>\": offset}")
        per_topic: dict[QueueKey, int] = {}
        for key, offset in queues.items():
            broker, sep, qid = str(key).rpartition(":")
            if not sep or not broker or not qid.isdigit():
                raise ConfigError(f"{name}.{topic}", f"queue key {key!r} is not '<broker>:<queue_id>'")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < JSON_EARLIEST:
                raise ConfigError(f"{name}.{topic}.{key}", f"must be an offset >= 0 (or -2 earliest, -1 latest), "
                                  f"got {offset!r}")
            per_topic[(broker, int(qid))] = offset
        spec[topic] = per_topic
    return spec


def _int(opts: Mapping[str, str], name: str, low: int, high: int | None) -> int | None:
    if name not in opts:
        return None
    try:
        value = int(opts[name].strip())
    except ValueError:
        raise ConfigError(name, f"must be an integer, got {opts[name]!r}") from None
    if value < low or (high is not None and value > high):
        raise ConfigError(name, f"must be in {low}..{high if high is not None else 'inf'}, got {value}")
    return value


def _float(opts: Mapping[str, str], name: str, default: float) -> float:
    if name not in opts:
        return default
    try:
        value = float(opts[name].strip())
    except ValueError:
        raise ConfigError(name, f"must be a number of seconds, got {opts[name]!r}") from None
    if not 0 < value <= 3600:
        raise ConfigError(name, f"must be in (0, 3600] seconds, got {value}")
    return value


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    if name not in opts:
        return default
    value = opts[name].strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ConfigError(name, f"must be true or false, got {opts[name]!r}")
