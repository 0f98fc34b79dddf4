"""Seeds kept on purpose: the quick mode's seeds, and every seed that once found a failure.

A regression seed replays its schedule (``python -m integration.chaos --seed S --cycles C
--outputs ... --faults ...``); the failure it found is named with the fix. Timing is the
machine's, so a seed reproduces the conditions (the same faults at the same points of the flow),
not necessarily the same interleaving: the fault it found is also pinned down by a regression test
under tests/.
"""

from __future__ import annotations

from dataclasses import dataclass

from .schedule import FAULT_KINDS, OUTPUT_KINDS


@dataclass(frozen=True)
class Seed:
    seed: int
    cycles: int = 1
    outputs: tuple[str, ...] = OUTPUT_KINDS
    faults: tuple[str, ...] = FAULT_KINDS
    found: str = ""  # the failure this seed found, and its fix


# quick mode (integration/test_chaos.py): together they cover the output kinds and the fault kinds
QUICK: tuple[Seed, ...] = (
    Seed(4, cycles=1),
)

# seeds that found a failure (full or quick mode), replayed by `python -m integration.chaos regressions`
REGRESSIONS: tuple[Seed, ...] = ()
