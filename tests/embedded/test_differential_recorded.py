"""The embedded broker against the answers a real broker gave to the differential cases
(integration/differential; recorded in tests/data/differential/ with ROCKETMQ_DIFFERENTIAL_RECORD=1).

Every divergence must be one of the listed known differences (docs/embedded.md), and every listed
difference must still occur (a fixed one is taken off the list). The recordings of 4.9.7 and
5.3.3 must differ exactly where docs/integration.md says they do.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from integration.differential.compare import KNOWN, VERSIONS, compare, rules_for
from integration.differential.runner import RECORDINGS, embedded_target, load, recording_path, run, select

ACL_FILE = RECORDINGS / "plain_acl.yml"
MODELLED = "4.9.7"  # the release the embedded broker answers like
ACL2_MODELLED = "5.3.3"  # ... and, in its ACL 2.0 mode, the release whose authentication and authorization it models
ACL2_SUPER_USER = ("rocketmq", "12345678")  # the recorded broker's super user (its names are normalised away)


def _recorded(path: Path) -> dict[str, dict[str, dict[str, object]]]:
    assert path.exists(), f"{path} is missing: record it with ROCKETMQ_DIFFERENTIAL_RECORD=1 (docs/integration.md)"
    cases: dict[str, dict[str, dict[str, object]]] = load(path)["cases"]
    return cases


@pytest.fixture(scope="module")
def embedded_answers() -> dict[str, dict[str, dict[str, object]]]:
    async def both() -> dict[str, dict[str, dict[str, object]]]:
        async with embedded_target() as target:
            plain, _ = await run(target, select())
        async with embedded_target(str(ACL_FILE)) as target:
            acl, _ = await run(target, select(acl="plain"))
        return {**plain, **acl}
    return asyncio.run(both())


def test_embedded_broker_answers_like_the_recorded_real_broker(embedded_answers: dict[str, object]) -> None:
    recorded = {**_recorded(recording_path(MODELLED)), **_recorded(recording_path(MODELLED, acl="plain"))}
    report = compare(recorded, embedded_answers)  # type: ignore[arg-type]  # same shape
    assert report.cases == len(select()) + len(select(acl="plain"))
    assert not report.unexplained, "\n".join(str(d) for d in report.unexplained)
    stale = [k for i, k in enumerate(KNOWN) if i not in report.rules_used and not k.optional]
    assert not stale, f"listed differences that no longer occur (take them off the list): {stale}"


def test_every_recorded_case_is_still_scripted() -> None:
    recorded = _recorded(recording_path(MODELLED))
    assert set(recorded) == {c.name for c in select()}


def test_5_3_3_differs_from_4_9_7_where_documented() -> None:
    old, new = _recorded(recording_path("4.9.7")), _recorded(recording_path("5.3.3"))
    rules = VERSIONS["5.3.3"]
    report = compare(old, new, rules)
    assert not report.unexplained, "\n".join(str(d) for d in report.unexplained)
    stale = [k for i, k in enumerate(rules) if i not in report.rules_used and not k.optional]
    assert not stale, f"5.3.3 differences that no longer occur: {stale}"


def test_embedded_acl2_mode_answers_like_the_recorded_5_3_3() -> None:
    """Authentication, the request x permission matrix and the AUTH_* requests of ACL 2.0, as a real 5.3.3
    with ``authenticationEnabled`` / ``authorizationEnabled`` answered them."""
    async def embedded() -> dict[str, dict[str, dict[str, object]]]:
        async with embedded_target(super_user=ACL2_SUPER_USER) as target:
            answers, _ = await run(target, select(acl="acl2"))
        return answers

    recorded = _recorded(recording_path(ACL2_MODELLED, acl="acl2"))
    assert set(recorded) == {c.name for c in select(acl="acl2")}
    report = compare(recorded, asyncio.run(embedded()), rules_for(ACL2_MODELLED))  # type: ignore[arg-type]
    assert report.cases == len(select(acl="acl2")) and report.steps > 200
    assert not report.unexplained, "\n".join(str(d) for d in report.unexplained)
