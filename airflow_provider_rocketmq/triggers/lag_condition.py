"""The lag condition shared by RocketMQLagSensor (poke) and RocketMQLagTrigger (deferred).

No Airflow imports: it judges a lag snapshot dict (``LagSnapshot.to_dict()``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_rocketmq.client import ConfigError


@dataclass(frozen=True)
class LagCondition:
    """Exactly one of ``min_lag`` (enough messages waiting) or ``max_lag`` (group has caught up).

    ``per_queue=False`` compares the total lag; ``per_queue=True`` is met for
    ``min_lag`` when *some* queue has at least ``min_lag`` waiting, and for
    ``max_lag`` when *every* queue is at or below ``max_lag``.
    """

    min_lag: int | None = None
    max_lag: int | None = None
    per_queue: bool = False

    def __post_init__(self) -> None:
        if (self.min_lag is None) == (self.max_lag is None):
            raise ConfigError("min_lag/max_lag", "give exactly one of min_lag or max_lag")
        for name in ("min_lag", "max_lag"):
            value = getattr(self, name)
            lowest = 1 if name == "min_lag" else 0  # min_lag=0 would always be met
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < lowest):
                raise ConfigError(name, f"must be an integer >= {lowest}, got {value!r}")
        if not isinstance(self.per_queue, bool):
            raise ConfigError("per_queue", f"must be a boolean, got {self.per_queue!r}")

    def describe(self) -> str:
        scope = "some queue" if self.min_lag is not None and self.per_queue else (
            "every queue" if self.per_queue else "total")
        return f"lag >= {self.min_lag} ({scope})" if self.min_lag is not None else \
            f"lag <= {self.max_lag} ({scope})"

    def is_met(self, snapshot: Mapping[str, Any]) -> bool:
        """Judge a ``LagSnapshot.to_dict()``; a topic with no queues is "caught up", never "enough"."""
        queue_lags = [int(q["lag"]) for q in snapshot.get("queues", [])]
        if self.min_lag is not None:
            if self.per_queue:
                return any(lag >= self.min_lag for lag in queue_lags)
            return int(snapshot.get("total_lag", sum(queue_lags))) >= self.min_lag
        assert self.max_lag is not None
        if self.per_queue:
            return all(lag <= self.max_lag for lag in queue_lags)
        return int(snapshot.get("total_lag", sum(queue_lags))) <= self.max_lag
