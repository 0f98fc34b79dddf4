"""What a response looks like once what legitimately differs between two brokers is taken out.

An observation is a flat ``{field path: value}`` map of one answer: ``code``, ``remark``,
``serialize``, ``ext.<key>``, and the body - ``body.json`` (``standard`` or ``fastjson``) plus the
flattened JSON value, or ``body.msg[i].<field>`` for stored-message records (pull, view by id),
or ``body.bytes`` for anything else. Strings are normalised: the run's names, host:port addresses,
offset message ids, millisecond timestamps and the other run-specific values become placeholders.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

from airflow_provider_rocketmq.client.protocol import fastjson
from airflow_provider_rocketmq.client.protocol.command import RemotingCommand
from airflow_provider_rocketmq.client.protocol.errors import RocketMQError
from airflow_provider_rocketmq.client.protocol.message import decode_messages

MESSAGE_BODY_CODES = frozenset({11, 33})  # PULL_MESSAGE, VIEW_MESSAGE_BY_ID answer stored records
VARIES = "{varies}"

_ADDR = re.compile(r"/?\b\d{1,3}(?:\.\d{1,3}){3}:\d{1,5}\b")
_HOST_ONLY = re.compile(r"\b(?:127\.0\.0\.1|0\.0\.0\.0)\b")
_MSGID = re.compile(r"\b[0-9A-F]{32}\b")
_TS = re.compile(r"(?<!\d)1[6-9]\d{11}(?!\d)")  # epoch milliseconds 2020..2033
_STACK_LINE = re.compile(r"(\.java):\d+\)")
_FAQ = re.compile(r"See https?://rocketmq\.apache\.org/\S+ for further details\.")  # the URL moved in 5.x
Fields = dict[str, Any]


class Normalizer:
    """Replaces run-specific parts of strings; ``names`` maps literal text to its placeholder."""

    def __init__(self, names: dict[str, str]) -> None:
        # longest first, so a name that contains another is replaced whole
        self.names = sorted(names.items(), key=lambda kv: -len(kv[0]))

    def text(self, s: str) -> str:
        for literal, placeholder in self.names:
            s = s.replace(literal, placeholder)
        s = _ADDR.sub("{addr}", s)
        s = _HOST_ONLY.sub("{host}", s)
        s = _MSGID.sub("{msgid}", s)
        s = _TS.sub("{ts}", s)
        s = _FAQ.sub("See {faq} for further details.", s)
        return _STACK_LINE.sub(r"\1)", s)

    def value(self, v: Any) -> Any:
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, bool) or v is None:
            return v
        if isinstance(v, int):
            return "{ts}" if 1_600_000_000_000 <= v < 2_100_000_000_000 else v
        if isinstance(v, float):
            return v
        if isinstance(v, dict):
            return {self.text(str(k)): self.value(x) for k, x in v.items()}
        if isinstance(v, list):
            items = [self.value(x) for x in v]
            return sorted(items, key=lambda x: json.dumps(x, sort_keys=True))  # Java sets: no order
        return self.text(repr(v))


def flatten(value: Any, prefix: str, out: Fields) -> None:
    """``{"a": {"b": 1}, "l": [2]}`` -> ``prefix.a.b = 1``, ``prefix.l[0] = 2`` (``prefix = {}``/``[]`` when empty)."""
    if isinstance(value, dict):
        if not value:
            out[prefix] = {}
        for k, v in value.items():
            flatten(v, f"{prefix}.{k}", out)
    elif isinstance(value, list):
        if not value or not any(isinstance(v, (dict, list)) for v in value):
            out[prefix] = value  # a list of scalars is one field (reported whole)
            return
        for i, v in enumerate(value):
            flatten(v, f"{prefix}[{i}]", out)
    else:
        out[prefix] = value


def message_fields(body: bytes, norm: Normalizer) -> Fields:
    out: Fields = {}
    try:
        msgs = decode_messages(body)
    except RocketMQError as exc:
        return {"body.undecodable": norm.text(str(exc))}
    out["body.count"] = len(msgs)
    for i, m in enumerate(msgs):
        p = f"body.msg[{i}]"
        out[f"{p}.topic"] = norm.text(m.topic)
        out[f"{p}.queueId"] = m.queue_id
        out[f"{p}.queueOffset"] = m.queue_offset
        out[f"{p}.reconsumeTimes"] = m.reconsume_times
        out[f"{p}.sysFlag"] = m.sys_flag
        out[f"{p}.flag"] = m.flag
        out[f"{p}.body"] = _body_text(bytes(m.body))
        out[f"{p}.bornTimestamp"] = norm.value(m.born_timestamp)
        out[f"{p}.bornHost"] = norm.text(m.born_host)
        out[f"{p}.storeHost"] = norm.text(m.store_host)
        props = {k: norm.text(v) for k, v in m.properties.items()}
        flatten(dict(sorted(props.items())), f"{p}.props", out)
    return out


def _body_text(b: bytes) -> str:
    if len(b) <= 64:
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return f"{len(b)} bytes sha1={hashlib.sha1(b).hexdigest()[:12]}"


def observe(request_code: int, resp: RemotingCommand | None, norm: Normalizer, *,
            vary: Iterable[str] = (), view: Any = None) -> Fields:
    """The observation of one answer (``None``: no answer). ``vary`` lists field paths whose value
    differs by nature (a random queue id); ``view(json_body)`` reduces a JSON body first."""
    if resp is None:
        return {"code": "no answer"}
    out: Fields = {"code": resp.code, "serialize": resp.serialize_type}
    if resp.code != 0:  # clients read a remark only on failure (a real broker leaves filler text on success)
        out["remark"] = None if resp.remark is None else norm.text(resp.remark)
    for k, v in sorted(resp.ext.items()):
        out[f"ext.{k}"] = norm.text(v)
    out.update(body_fields(request_code, resp, norm, view))
    for path in vary:
        for key in [k for k in out if k == path or k.startswith((path + ".", path + "["))]:
            out[key] = VARIES
    return out


def body_fields(request_code: int, resp: RemotingCommand, norm: Normalizer, view: Any = None) -> Fields:
    """The body's fields: stored-message records, a flattened JSON value, or its length in bytes."""
    body = resp.body
    if body is None:
        return {"body": None}
    if request_code in MESSAGE_BODY_CODES and resp.code == 0:
        return message_fields(body, norm)
    try:
        parsed = fastjson.loads(body)
    except Exception:
        return {"body.bytes": len(body)}
    out: Fields = {"body.json": "standard" if _standard(body) else "fastjson"}
    flatten(norm.value(view(parsed) if view is not None else parsed), "body", out)
    return out


def _standard(body: bytes) -> bool:
    try:
        json.loads(body)
        return True
    except ValueError:
        return False


# Rates a broker computes over its last minute of traffic (consume stats, topic stats): they depend on
# what else the broker did just before, so only their presence is compared.
RATE_FIELDS = frozenset({"consumeTps", "topicPutTps"})


def _rate(path: str, value: Any) -> Any:
    return "{rate}" if value != "<absent>" and path.rsplit(".", 1)[-1] in RATE_FIELDS else value


def differences(real: Fields, embedded: Fields) -> list[tuple[str, Any, Any]]:
    """(path, real value, embedded value) for every field that differs (``<absent>`` when missing)."""
    out = []
    for path in sorted(set(real) | set(embedded)):
        a, b = _rate(path, real.get(path, "<absent>")), _rate(path, embedded.get(path, "<absent>"))
        if a != b:
            out.append((path, a, b))
    return out
