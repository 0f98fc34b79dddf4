"""The chaos checker and schedule on their own (no broker, no Spark): the checker fails where it must.

Every way an output can be wrong is built by hand from a correct one, and each must be reported by
its own counter; a correct output passes. A seed always draws the same schedule.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from .chaos import flow, mutations
from .chaos.checker import Row, check
from .chaos.producer import body_of
from .chaos.schedule import FAULT_KINDS, NET_CUT, OBJSTORE_ERRORS, Capabilities, Schedule, draw

TOPIC = "T"


def _run(orderly: bool = True) -> tuple[list[dict], dict, dict, list[Row]]:
    """Two queues, keys k0/k1, one indeterminate attempt that was stored and one that was not."""
    attempts, rows = [], []
    offsets = {("a", 0): 0, ("b", 0): 0}
    for i in range(12):
        key, q = f"k{i % 2}", ("a", 0) if i % 2 == 0 else ("b", 0)
        aid = f"id{i}"
        ok = i != 5
        attempts.append({"k": key, "s": i // 2, "a": aid, "ok": ok, "b": q[0] if ok else "",
                         "q": q[1] if ok else -1, "o": offsets[q] if ok else -1})
        if i == 7:  # an attempt that failed before reaching the broker: never stored
            attempts[-1].update(ok=False, b="", q=-1, o=-1)
            continue
        rows.append(Row(TOPIC, q[0], q[1], offsets[q], body_of(key, i // 2, aid).decode(), f"w{i // 6:03d}"))
        offsets[q] += 1
    return attempts, dict(offsets), dict(offsets), rows


def test_a_correct_output_passes() -> None:
    attempts, hw, committed, rows = _run()
    v = check(TOPIC, attempts, hw, committed, rows, orderly=True)
    assert v.ok, v.to_json()
    assert (v.produced, v.loaded, v.acknowledged, v.indeterminate, v.indeterminate_stored) == (11, 11, 10, 2, 1)


@pytest.mark.parametrize("fault", ["lost", "duplicates", "outside", "mismatched", "order", "window_order", "lag",
                                   "beyond_mark", "wrong_topic"])
def test_each_defect_is_reported(fault: str) -> None:
    attempts, hw, committed, rows = _run()
    if fault == "lost":
        rows.pop(3)
    elif fault == "duplicates":
        rows.append(replace(rows[2], window_id="w009"))
    elif fault == "outside":  # a body no attempt of the run sent
        rows[4] = replace(rows[4], body=body_of("k0", 2, "stranger").decode())
    elif fault == "mismatched":  # the row at an acknowledged offset is another (stored) attempt's
        a, b = rows[0], rows[2]
        rows[0], rows[2] = replace(a, body=b.body), replace(b, body=a.body)
    elif fault == "order":  # k0's messages 0 and 1 stored the other way round
        a, b = rows[0], rows[2]
        rows[0], rows[2] = replace(a, body=b.body), replace(b, body=a.body)
        attempts[0]["o"], attempts[2]["o"] = 1, 0
    elif fault == "window_order":
        rows[0] = replace(rows[0], window_id="w005")
    elif fault == "lag":
        committed[("a", 0)] -= 2
    elif fault == "beyond_mark":
        rows.append(Row(TOPIC, "a", 0, hw[("a", 0)], rows[0].body, "w003"))
    elif fault == "wrong_topic":
        rows[1] = replace(rows[1], topic="other")
    v = check(TOPIC, attempts, hw, committed, rows, orderly=True)
    counters = {k: getattr(v, k) for k in ("lost", "duplicates", "outside", "mismatched", "order", "window_order",
                                           "lag")}
    expected = {"beyond_mark": "outside", "wrong_topic": "outside"}.get(fault, fault)
    assert not v.ok and counters[expected] > 0, counters
    assert v.examples[expected], v.examples


def test_order_is_not_checked_without_an_orderly_producer() -> None:
    attempts, hw, committed, rows = _run()
    rows[0] = replace(rows[0], body=body_of("k0", 1, "x").decode())
    attempts.append({"k": "k0", "s": 1, "a": "x", "ok": False, "b": "", "q": -1, "o": -1})
    attempts[0]["ok"] = False  # its acknowledged body is gone from the output
    assert check(TOPIC, attempts, hw, committed, rows, orderly=False).ok


def test_a_seed_draws_the_same_schedule_and_seeds_differ() -> None:
    caps = Capabilities(broker_kill=True, net_cut=True)
    a, b = draw(7, caps), draw(7, caps)
    assert a == b and Schedule.from_json(a.to_json()) == a
    assert len({draw(s, caps).describe() for s in range(20)}) == 20
    assert all(c.faults for c in a.cycles)


def test_the_draw_keeps_to_what_the_backend_and_the_run_allow() -> None:
    caps = Capabilities(broker_kill=False, net_cut=False)
    drawn = {f.kind for s in range(300) for f in draw(s, caps, outputs=("local",)).faults}
    assert NET_CUT not in drawn and "broker-kill" not in drawn
    no_s3 = [draw(s, caps, outputs=("local",)) for s in range(300)]
    assert all(OBJSTORE_ERRORS not in {f.kind for f in d.faults} for d in no_s3 if not d.uses_s3)
    full = {f.kind for s in range(300) for f in draw(s, Capabilities(True, True)).faults}
    assert full == set(FAULT_KINDS)


def test_a_timed_out_send_stored_late_is_no_order_violation() -> None:
    """A send that timed out (indeterminate) may reach the broker after its retry and later messages
    of its key (a cut link delivers it late): counted as late_stored; acknowledged order still holds."""
    attempts, hw, committed, rows = _run()
    stale = {"k": "k0", "s": 0, "a": "stale", "ok": False, "b": "", "q": -1, "o": -1}
    attempts.append(stale)
    rows.append(Row(TOPIC, "a", 0, hw[("a", 0)], body_of("k0", 0, "stale").decode(), "w009"))
    hw[("a", 0)] += 1
    committed[("a", 0)] += 1
    v = check(TOPIC, attempts, hw, committed, rows, orderly=True)
    assert v.ok and v.late_stored == 1 and v.order == 0, v.to_json()
    stale["ok"], stale["b"], stale["q"], stale["o"] = True, "a", 0, hw[("a", 0)] - 1  # acknowledged: a violation
    assert check(TOPIC, attempts, hw, committed, rows, orderly=True).order == 1


def test_a_topic_whose_route_lost_a_broker_is_not_settled(monkeypatch: pytest.MonkeyPatch) -> None:
    # seed 1041: the name server dropped broker-b from the route for a while; the lag and the committed
    # offsets of what the route showed (broker-a) agreed, and the run "converged" with broker-b's messages
    # unseen. A topic is settled only when its route shows every queue it had.
    run = flow.ChaosRun.__new__(flow.ChaosRun)  # only what _caught_up reads
    run.cluster, run.topic, run.group, run.route_queues = object(), TOPIC, "G", 4
    route = {("broker-a", 0): 5, ("broker-a", 1): 5}
    monkeypatch.setattr(flow, "high_water", lambda cluster, topic: dict(route))
    monkeypatch.setattr(flow, "committed_snapshot", lambda cluster, group, topic: dict(route))
    monkeypatch.setattr(flow, "SETTLE_S", 0.0)
    assert run._caught_up() is None
    route.update({("broker-b", 0): 3, ("broker-b", 1): 4})  # registered again: all 4 queues, all committed
    assert run._caught_up() == (route, route)


@pytest.mark.parametrize("name", sorted(mutations.MUTATIONS))
def test_each_mutation_applies_once_and_leaves_code_that_runs(name: str, tmp_path: Path) -> None:
    """A mutation's text must still fit the code: once in the package, and the mutated file free of
    undefined names (the ledger-check mutation once named a module alias the file no longer
    imported: every load crashed, and the runs' failure said nothing about the ledger check)."""
    changed = mutations.apply(mutations.MUTATIONS[name], tmp_path)
    assert "MUTATION" in changed.read_text()
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated", "--select", "E9,F821,F822,F823",
                          str(changed)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_mutation_is_caught_only_by_the_defect_it_makes(capsys: pytest.CaptureFixture[str]) -> None:
    m = mutations.MUTATIONS["ledger-check"]  # expects duplicates
    duplicated = {"seed": 4, "ok": False, "verdict": {"duplicates": 3, "lost": 0}, "problems": []}
    crashed = {"seed": 4, "ok": False, "verdict": {"duplicates": 0, "lost": 513},
               "problems": ["no convergence after 8 cycles without faults"]}
    passed = {"seed": 5, "ok": True, "verdict": {"duplicates": 0, "lost": 0}, "problems": []}
    assert mutations.verdict(m, [passed, duplicated]) == 0
    assert "CAUGHT: duplicates in seed(s) 4" in capsys.readouterr().out
    assert mutations.verdict(m, [crashed, passed]) == 1
    assert "INCONCLUSIVE" in capsys.readouterr().out
    assert mutations.verdict(m, [passed]) == 1
    assert "NOT CAUGHT" in capsys.readouterr().out
