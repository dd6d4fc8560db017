"""Where a barrier's time goes inside a running job: :class:`BarrierTimer`.

Every barrier a job processes is timed by phase and logged as one line
``tsb-timing {"job": ..., "barrier": n, "total_s": ..., "phases": {...}}`` (logger
``airflow_provider_tsb.spark``), which ``benchmarks/e2e_latency.py`` aggregates. Phases, in
seconds of wall time on the driver (nested phases are subtracted from the enclosing one, so
the phases add up to ``total_s``):

* ``poll``: from the barrier being ready (WRITTEN in every input) to its micro-batch starting
  (streaming mode; the trigger interval and the offset computation);
* ``source``: reading the micro-batch's control row (streaming mode);
* ``metastore``: catalog calls (PROCESSED, WRITTEN, heartbeats, job timings);
* ``delta_log``: Delta log reads on the driver (alignment check, replay check, snapshot loads);
* ``spark``: the Spark job computing the output and writing its Parquet files (executors);
* ``footers``: reading the written files' footers for the commit's statistics;
* ``commit``: the delta-rs commit;
* ``other``: the rest (planning ``process()``, Python overhead).

The timer is found through a context variable, so library code marks its phase with
``with phase("delta_log"):`` without the timer being passed around; with no timer active the
call costs one lookup.
"""

from __future__ import annotations

import contextvars
import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

log = logging.getLogger("airflow_provider_tsb.spark")

PHASES: tuple[str, ...] = ("poll", "source", "metastore", "delta_log", "spark", "footers", "commit", "other")
TIMING_PREFIX = "tsb-timing "

_CURRENT: contextvars.ContextVar[BarrierTimer | None] = contextvars.ContextVar("tsb_barrier_timer", default=None)


@dataclass
class BarrierTimer:
    """Phase durations (seconds) of one barrier in one job.

    Attributes:
        job_id: the job.
        barrier: the barrier id.
        phases: ``{phase: seconds}``, see the module docstring.
    """

    job_id: str
    barrier: int
    phases: dict[str, float] = field(default_factory=dict)
    _stack: list[list] = field(default_factory=list, repr=False)
    _started: float = field(default_factory=time.perf_counter, repr=False)
    _before: float = field(default=0.0, repr=False)

    def add(self, name: str, seconds: float) -> None:
        """Add ``seconds`` to phase ``name``; outside any block (e.g. a poll wait measured before
        the timer started) they also count in ``total_s``."""
        self._accumulate(name, seconds)
        if not self._stack:
            self._before += max(0.0, seconds)

    def _accumulate(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + max(0.0, seconds)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase ``name``; time spent in nested phases is not counted twice."""
        now = time.perf_counter()
        if self._stack:  # pause the enclosing phase
            outer = self._stack[-1]
            self._accumulate(outer[0], now - outer[1])
        self._stack.append([name, now])
        try:
            yield
        finally:
            end = time.perf_counter()
            inner = self._stack.pop()
            self._accumulate(inner[0], end - inner[1])
            if self._stack:
                self._stack[-1][1] = end

    def finish(self) -> dict[str, object]:
        """The record of this barrier: ``{"job", "barrier", "total_s", "phases"}``; ``other`` is the rest."""
        measured = time.perf_counter() - self._started + self._before
        phases = dict(self.phases)
        phases["other"] = phases.get("other", 0.0) + max(0.0, measured - sum(phases.values()))
        return {
            "job": self.job_id,
            "barrier": self.barrier,
            "total_s": round(measured, 4),
            "phases": {k: round(v, 4) for k, v in sorted(phases.items())},
        }


@contextmanager
def barrier_timer(
    job_id: str, barrier: int, *, before: dict[str, float] | None = None
) -> Iterator[BarrierTimer]:
    """Make a :class:`BarrierTimer` current for the block and log its record at the end.

    Args:
        job_id: the job.
        barrier: the barrier processed in the block.
        before: ``{phase: seconds}`` spent on the barrier before the block (``poll``, ``source``).
    """
    timer = BarrierTimer(job_id, barrier)
    for name, seconds in (before or {}).items():
        timer.add(name, seconds)
    token = _CURRENT.set(timer)
    try:
        yield timer
    finally:
        _CURRENT.reset(token)
        log.info("%s%s", TIMING_PREFIX, json.dumps(timer.finish(), sort_keys=True))


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Count the block as phase ``name`` of the current barrier (no-op without a timer)."""
    timer = _CURRENT.get()
    if timer is None:
        yield
        return
    with timer.phase(name):
        yield


def parse_timing_line(line: str) -> dict[str, object] | None:
    """The record of a ``tsb-timing`` log line, or ``None`` for any other line."""
    at = line.find(TIMING_PREFIX)
    if at < 0:
        return None
    try:
        return json.loads(line[at + len(TIMING_PREFIX) :])
    except ValueError:
        return None
