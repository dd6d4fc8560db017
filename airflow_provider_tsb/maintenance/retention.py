"""Retention policies of snapshot expiry: which barriers of a table stay readable (AS OF).

The FLIP-276 dev@ thread asks for "hourly snapshots for N hours, daily for N days"; Apache
Paimon's automatic tags do it with ``tag.creation-period`` and ``tag.num-retained-max``. A
:class:`RetentionPolicy` keeps, per table:

* the newest ``keep_last`` WRITTEN barriers;
* for the last ``hourly_hours`` hours, the newest barrier of each clock hour;
* for the last ``daily_days`` days, the newest barrier of each UTC day.

Hours and days are those of the barrier timestamp (system time, or the event-time watermark
of event-time barriers: ``BarrierInfo.ts_ms``), counted back from the newest barrier's
timestamp, so an event-time topology replaying old data keeps its own hours and days.
Whatever the policy, expiry also keeps every version a live lease pins and every version a
registered job has still to read (:mod:`airflow_provider_tsb.maintenance.expiry`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

HOUR_MS = 3_600_000
DAY_MS = 86_400_000


@dataclass(frozen=True)
class RetentionPolicy:
    """Which barriers snapshot expiry keeps (see module doc).

    Attributes:
        keep_last: newest WRITTEN barriers kept (>= 1).
        hourly_hours: keep the newest barrier of each hour of the last this many hours (>= 0).
        daily_days: keep the newest barrier of each UTC day of the last this many days (>= 0).

    Raises:
        ValueError: a field out of range (names it).
    """

    keep_last: int = 10
    hourly_hours: int = 0
    daily_days: int = 0

    def __post_init__(self) -> None:
        for name, low in (("keep_last", 1), ("hourly_hours", 0), ("daily_days", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low or value > 10**6:
                raise ValueError(f"retention {name} must be an integer from {low} to 1000000, got {value!r}")

    @classmethod
    def of(cls, value: RetentionPolicy | int | Mapping[str, Any]) -> RetentionPolicy:
        """A policy from a policy, a ``keep_last`` count, or a dict of the fields."""
        if isinstance(value, RetentionPolicy):
            return value
        if isinstance(value, Mapping):
            return cls(**dict(value))
        return cls(keep_last=value)

    def kept(self, barriers: Iterable[tuple[int, int]]) -> set[int]:
        """The barrier ids to keep among ``(barrier, ts_ms)`` pairs (a table's WRITTEN barriers)."""
        ordered = sorted((int(b), int(ts)) for b, ts in barriers)
        keep = {b for b, _ in ordered[-self.keep_last:]}
        if not ordered:
            return keep
        newest_ts = max(ts for _, ts in ordered)
        for period, count in ((HOUR_MS, self.hourly_hours), (DAY_MS, self.daily_days)):
            if not count:
                continue
            first_bucket = newest_ts // period - count + 1
            newest_in: dict[int, int] = {}
            for b, ts in ordered:  # ascending ids: the last one per bucket wins
                if ts // period >= first_bucket:
                    newest_in[ts // period] = b
            keep |= set(newest_in.values())
        return keep

    @property
    def window_ms(self) -> int:
        """How far back from the newest barrier's timestamp the tiers reach, ms (0: no tiers)."""
        return max(self.hourly_hours * HOUR_MS, self.daily_days * DAY_MS)

    def describe(self) -> str:
        """E.g. ``"the newest 10 WRITTEN barriers, one per hour for 24 h, one per day for 7 d"``."""
        parts = [f"the newest {self.keep_last} WRITTEN barriers"]
        if self.hourly_hours:
            parts.append(f"one per hour for {self.hourly_hours} h")
        if self.daily_days:
            parts.append(f"one per day for {self.daily_days} d")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, int]:
        """JSON-ready form (stored with the expiry marks, shown by ``tsb expire``)."""
        return {"keep_last": self.keep_last, "hourly_hours": self.hourly_hours, "daily_days": self.daily_days}
