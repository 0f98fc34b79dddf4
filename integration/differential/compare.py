"""Comparing two runs of the cases, and the embedded broker's known differences.

Every divergence the check found is either fixed in the embedded broker or listed in ``KNOWN``
with why it is harmless (docs/embedded.md "Known differences" says the same in prose).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

from .observe import differences
from .runner import Results


@dataclass(frozen=True)
class Known:
    """A listed difference: the field paths it covers and why it does not matter to a client."""

    case: str  # fnmatch patterns
    step: str
    path: str
    reason: str
    optional: bool = False  # may or may not occur in a run (a JVM drops an exception's text when it recurs)

    def covers(self, case: str, step: str, path: str) -> bool:
        return (fnmatch.fnmatchcase(case, self.case) and fnmatch.fnmatchcase(step, self.step)
                and fnmatch.fnmatchcase(path, self.path))


# Steps that send a malformed request (a header field missing or not a number, a body that is not
# JSON or not a batch): a 4.9.7 broker checks no @CFNotNull field and answers SYSTEM_ERROR with the
# text of the Java exception it then hits (NullPointerException, fastjson's JSONException,
# BufferUnderflowException); the embedded broker answers the same code naming the field.
_MALFORMED = [("admin.create-topic", "missing-read-queues"), ("members.heartbeat", "no-body"),
              ("members.heartbeat", "not-json"), ("members.locks", "no-body"), ("members.locks", "not-json"),
              ("members.locks", "unlock-not-json"), ("offsets.consumer", "update-missing-queue"),
              ("offsets.queries", "max-no-queue-header"), ("offsets.queries", "view-missing-offset"),
              ("pull.statuses", "missing-max-nums"), ("retry.send-back", "missing-group"),
              ("send.batch", "empty-body"), ("send.batch", "malformed-body"), ("send.v1", "v1-missing-born"),
              ("send.v1", "v1-queue-id-not-a-number"), ("acl.permissions", "update-offset-no-queue-id")]

KNOWN: list[Known] = [
    *(Known(case, step, "remark", "a malformed request: same code (SYSTEM_ERROR); the real remark is the text of "
            "the Java exception the broker hit, the embedded one names the field; clients only show it")
      for case, step in _MALFORMED),
    Known("admin.unknown-codes", "query-message-by-key-12", "*", "QUERY_MESSAGE (by key, mqadmin queryMsgByKey) "
          "is not modelled: the embedded broker answers 3 REQUEST_CODE_NOT_SUPPORTED; this client never sends it"),
    Known("namesrv.topics", "system-topics", "body", "the embedded broker registers TBW102 but not the real "
          "broker's other system topics (BenchmarkTest, OFFSET_MOVED_EVENT, SELF_TEST_TOPIC, SCHEDULE_TOPIC_XXXX, "
          "RMQ_SYS_TRANS_HALF_TOPIC, <cluster>, <cluster>_REPLY_TOPIC, <broker>); clients never route to them"),
]


def _each(pairs: list[tuple[str, str]], path: str, reason: str) -> list[Known]:
    return [Known(case, step, path, reason) for case, step in pairs]


_ADDED = "a field 5.x adds; the client reads none of them (unknown extFields, JSON keys and properties are ignored)"
_INVALID = [("admin.create-topic", "cluster-name"), ("admin.create-topic", "illegal-name"), ("send.names", "blank"),
            ("send.names", "illegal-chars"), ("send.names", "too-long-127"), ("send.v2", "queue-id-4-of-4"),
            ("send.v2", "queue-id-huge"), ("send.auto-create", "send-queue-7"), ("send.batch", "bad-queue"),
            ("pull.statuses", "queue-2-of-2"), ("pull.statuses", "queue-minus-1"),
            ("offsets.consumer", "update-missing-queue")]

# How a 5.3.3 broker answers differently from 4.9.7 (what the embedded broker models). Each is
# something the client handles either way; docs/integration.md lists them with the same reasons.
VERSIONS: dict[str, list[Known]] = {"5.3.3": [
    *(Known("*", "*", f"body.msg[[]*[]].props.{p}", "5.x stores MSG_REGION and TRACE_ON as properties, keeps WAIT "
            "and gives a message sent without UNIQ_KEY one; the client ignores the first three and, like Java, "
            "reports UNIQ_KEY as the message id when present") for p in ("MSG_REGION", "TRACE_ON", "WAIT", "UNIQ_KEY")),
    *(Known("*", "*", path, _ADDED) for path in (
        "ext.transactionId", "ext.groupSysFlag", "ext.topicSysFlag", "ext.forbiddenType", "ext.IS_SUB_CHANGE",
        "ext.IS_SUPPORT_HEART_BEAT_V2", "body.brokerDatas[[]*[]].enableActingMaster",
        "body.brokerAddrTable.*.enableActingMaster", "body.offsetTable.*.pullOffset", "body.topicPutTps")),
    Known("admin.unknown-codes", "query-message-by-key-12", "body.bytes", "the stored record carries 5.x's extra "
          "properties"),
    Known("members.relay", "consume-directly-as-relayed", "body.bytes", "the stored record carries 5.x's extra "
          "properties"),
    *_each(_INVALID, "code", "5.x answers a bad queue id, topic name or missing queueId with 29 INVALID_PARAMETER "
           "where 4.9.7 says 1 SYSTEM_ERROR; the client raises a BrokerError either way (the producer retries "
           "another queue only on 1, as Java does)"),
    *_each([("send.v2", "queue-id-4-of-4"), ("send.v2", "queue-id-huge"), ("send.auto-create", "send-queue-7"),
            ("send.batch", "bad-queue")], "remark", "the TopicConfig quoted in the remark has 5.x's "
           "', attributes={}' field"),
    *(Known(case, step, "remark", "the Java exception text of a malformed request differs between versions "
            "(and a JVM leaves it out once the exception recurs); clients only show it", optional=True)
      for case, step in _MALFORMED),
    Known("members.reset-offset", "*", "*", "5.x's INVOKE_BROKER_TO_RESET_OFFSET commits the offsets itself "
          "(also with nobody online), does not send RESET_CONSUMER_CLIENT_OFFSET to the members, answers 26 "
          "for a group without offsets and 17 for an unknown topic; a member then learns it from its next pull "
          "(21 PULL_OFFSET_MOVED, remark OFFSET_RESET, nextBeginOffset = the reset offset), which the push "
          "consumer follows like any moved offset"),
    *(Known("offsets.consumer", step, "*", "5.x answers 22 QUERY_NOT_FOUND for a queue the group never committed "
            "unless its first message is in memory (4.9.7: 0 while the queue's min offset is 0); the client "
            "treats 22 as 'no stored offset' and applies its consume-from rule")
      for step in ("query-none-empty-q1", "query-q1-negative", "query-unknown-topic")),
    Known("offsets.consumer", "update-group-never-seen", "*", "5.x answers 26 SUBSCRIPTION_GROUP_NOT_EXIST to an "
          "offset commit of a group it never saw (4.9.7 creates the group); the client then makes the group known "
          "with one pull at the queue's end and commits again (the Spark source and the window commit never "
          "heartbeat or pull with their commit group)"),
    Known("offsets.consumer", "update-unknown-topic", "*", "5.x refuses to commit an offset of an unknown topic "
          "(17); the client raises TopicNotExistError"),
    Known("offsets.queries", "search-future", "ext.offset", "5.x answers the max offset for a time after every "
          "message, 4.9.7 the last message's offset (max - 1): a consumer starting from that time gets at most "
          "one old message more on 4.9.7"),
    Known("send.v2", "empty-body", "*", "5.x refuses a send without body (1); the client refuses empty bodies "
          "itself (ConfigError)"),
    Known("send.v2", "no-body", "*", "5.x refuses a send without body (1); the client refuses empty bodies itself"),
    Known("send.batch", "to-retry-topic", "*", "5.x refuses a batch to %RETRY% (13); the client never batches to "
          "retry topics (ConfigError)"),
    *(Known("send.retry-topic", step, "*", "5.x moves a plain send to %RETRY% into %DLQ% only when reconsumeTimes > "
            "maxReconsumeTimes (4.9.7: >=) and gives it DELAY=-1: the consumer's fallback send (used only when "
            "CONSUMER_SEND_MSG_BACK fails) then allows one delivery more on 5.3.3 - exactly as the Java client")
      for step in ("at-max*", "above-max*", "default-max-16*", "dlq-stored")),
    Known("namesrv.unknown-code", "code-9999", "*", "a 5.x name server answers 3 REQUEST_CODE_NOT_SUPPORTED to a "
          "code it does not serve; a 4.9.7 one answers nothing (the client sends none)"),
    Known("namesrv.topics", "system-topics", "body", "5.x has one more system topic (RMQ_SYS_TRANS_OP_HALF_TOPIC)"),
]}


@dataclass(frozen=True)
class Divergence:
    case: str
    step: str
    path: str
    real: Any
    embedded: Any
    known: Known | None

    def __str__(self) -> str:
        tag = "listed" if self.known else "UNEXPLAINED"
        return f"[{tag}] {self.case} / {self.step} / {self.path}: real={self.real!r} embedded={self.embedded!r}"


@dataclass
class Report:
    cases: int = 0
    steps: int = 0
    fields: int = 0
    divergences: list[Divergence] = field(default_factory=list)
    rules_used: set[int] = field(default_factory=set)

    @property
    def unexplained(self) -> list[Divergence]:
        return [d for d in self.divergences if d.known is None]

    @property
    def listed(self) -> list[Divergence]:
        return [d for d in self.divergences if d.known is not None]

    def summary(self, left: str = "real", right: str = "embedded") -> str:
        return (f"differential {left} vs {right}: cases={self.cases} steps={self.steps} fields={self.fields} "
                f"divergences={len(self.divergences)} listed={len(self.listed)} "
                f"unexplained={len(self.unexplained)}")


def rules_for(version: str) -> list[Known]:
    """What may differ between the embedded broker and a real broker of ``version``."""
    return KNOWN + VERSIONS.get(version, [])


def compare(real: Results, embedded: Results, known: list[Known] | None = None) -> Report:
    rules = KNOWN if known is None else known
    report = Report()
    for case in sorted(set(real) | set(embedded)):
        report.cases += 1
        r_steps, e_steps = real.get(case, {}), embedded.get(case, {})
        for step in sorted(set(r_steps) | set(e_steps), key=lambda s: (s == "error", s)):
            report.steps += 1
            a, b = r_steps.get(step, {"step": "<absent>"}), e_steps.get(step, {"step": "<absent>"})
            report.fields += len(set(a) | set(b))
            for path, x, y in differences(a, b):
                rule = next((i for i, k in enumerate(rules) if k.covers(case, step, path)), None)
                if rule is not None:
                    report.rules_used.add(rule)
                report.divergences.append(Divergence(case, step, path, x, y,
                                                     rules[rule] if rule is not None else None))
    return report
