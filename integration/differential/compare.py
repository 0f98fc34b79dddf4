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
