"""The embedded broker against a real one: the scripted cases of ``integration/differential`` sent
to both, answers compared field by field (see docs/integration.md, "Differential check").

Needs a real broker: ``ROCKETMQ_NAMESRV``, or the suite's broker container when testcontainers is
the backend (the embedded side runs in this process); the ACL 1.0 cases
also ``ROCKETMQ_ACL_NAMESRV`` (a broker with aclEnable=true) and ``ROCKETMQ_ACL_FILE`` (its
plain_acl.yml); the ACL 2.0 cases ``ROCKETMQ_ACL2_NAMESRV`` (a 5.3+ broker with authentication and
authorization on) and ``ROCKETMQ_ACL2_ACCESS_KEY`` / ``ROCKETMQ_ACL2_SECRET_KEY`` (a super user of it). ``ROCKETMQ_DIFFERENTIAL_RECORD=1`` writes the real answers to tests/data/differential/
for the CI check (tests/embedded/test_differential_recorded.py).
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from .backends import BackendConfigError, session_backend
from .differential.compare import Report, compare, rules_for
from .differential.runner import (
    acl2_super_user,
    embedded_target,
    load_accounts,
    real_target,
    recording_path,
    run,
    save,
    select,
)

SUMMARY: list[str] = []  # printed by conftest's terminal summary


async def _check(namesrv: str, accounts_file: str | None,
                 super_user: tuple[str, str] | None = None) -> tuple[str, Report]:
    acl = "plain" if accounts_file is not None else "acl2" if super_user is not None else ""
    cases = select(acl=acl)
    target = await real_target(namesrv, load_accounts(accounts_file) if accounts_file else (), super_user)
    real, version = await run(target, cases)
    async with embedded_target(accounts_file, super_user) as emb:
        embedded, _ = await run(emb, cases)
    if os.environ.get("ROCKETMQ_DIFFERENTIAL_RECORD") == "1":
        save(recording_path(version, acl), real, version, time.strftime("%Y-%m-%d"))
    return version, compare(real, embedded, rules_for(version))


def _assert_explained(label: str, report: Report) -> None:
    SUMMARY.append(f"{report.summary(label, 'embedded')} known_rules_matched={len(report.rules_used)}")
    assert not report.unexplained, "\n".join(str(d) for d in report.unexplained)


def _real_namesrv(request: pytest.FixtureRequest) -> str:
    """ROCKETMQ_NAMESRV, or the name server of the suite's broker containers ("" when neither)."""
    namesrv = os.environ.get("ROCKETMQ_NAMESRV", "").strip()
    if namesrv:
        return namesrv
    try:
        containers = session_backend().kind == "testcontainers"
    except BackendConfigError:
        containers = False
    return str(request.getfixturevalue("cluster").namesrv_addr) if containers else ""


def test_embedded_answers_like_the_real_broker(request: pytest.FixtureRequest) -> None:
    namesrv = _real_namesrv(request)
    if not namesrv:
        pytest.skip("the differential check needs a real broker: set ROCKETMQ_NAMESRV or use testcontainers (CI "
                    "checks the embedded broker against the recorded answers instead: "
                    "tests/embedded/test_differential_recorded.py)")
    version, report = asyncio.run(_check(namesrv.split(";")[0], None))
    _assert_explained(f"real {version} ({namesrv})", report)


def test_embedded_acl_answers_like_the_real_broker() -> None:
    namesrv = os.environ.get("ROCKETMQ_ACL_NAMESRV", "").strip()
    accounts = os.environ.get("ROCKETMQ_ACL_FILE", "").strip()
    if not namesrv or not accounts:
        pytest.skip("the ACL differential cases need a real broker with aclEnable=true: set ROCKETMQ_ACL_NAMESRV "
                    "and ROCKETMQ_ACL_FILE (its plain_acl.yml, e.g. tests/data/differential/plain_acl.yml)")
    version, report = asyncio.run(_check(namesrv.split(";")[0], accounts))
    _assert_explained(f"real {version} with ACL ({namesrv})", report)


def test_embedded_acl2_answers_like_the_real_broker() -> None:
    namesrv = os.environ.get("ROCKETMQ_ACL2_NAMESRV", "").strip()
    super_user = acl2_super_user(os.environ)
    if not namesrv or super_user is None:
        pytest.skip("the ACL 2.0 differential cases need a real 5.3+ broker with authentication and authorization "
                    "on: set ROCKETMQ_ACL2_NAMESRV and ROCKETMQ_ACL2_ACCESS_KEY / ROCKETMQ_ACL2_SECRET_KEY (a super "
                    "user of it)")
    version, report = asyncio.run(_check(namesrv.split(";")[0], None, super_user))
    _assert_explained(f"real {version} with ACL 2.0 ({namesrv})", report)
