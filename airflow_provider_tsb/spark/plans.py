"""What a job processes per barrier (:class:`BarrierPlan`) and the one rule that decides which
barriers are pending for a job (:func:`plan_pending_barriers`).

Both catalogs, :class:`~airflow_provider_tsb.spark.catalog.PlanFileCatalog` and
:class:`~airflow_provider_tsb.spark.metastore_catalog.MetastoreCatalog`, list the generated
barriers (:class:`GeneratedBarrier`) and look up the input versions of a barrier their own way;
the rule is here. FLIP-276 "Timestamp Barrier": a barrier is processable by a job once it is
WRITTEN in every input of the job, and a job processes barriers strictly in order, each on top
of the previous one's state.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from airflow_provider_tsb.exceptions import UnknownBarrierError
from airflow_provider_tsb.metastore.records import TsKind

#: ready barriers one streaming micro-batch takes at most, on either engine (the operator's
#: ``max_barriers_per_trigger``; :mod:`airflow_provider_tsb.spark.barrier_group`)
DEFAULT_MAX_BARRIERS_PER_TRIGGER = 16


@dataclass(frozen=True)
class BarrierPlan:
    """What a job needs to process one barrier.

    Attributes:
        barrier: barrier id.
        ts_ms: barrier timestamp, epoch milliseconds.
        ts_kind: ``system`` (processing time) or ``event`` (event-time watermark).
        watermark_ms: event-time watermark in epoch ms, or ``None``.
        inputs: ``{input table: Delta version}`` of this barrier, one per job input.
        previous_barrier: the barrier this one follows for the job (the state its sinks are
            in before it), or ``None`` for the job's first barrier.
        previous_inputs: ``{input table: Delta version}`` of ``previous_barrier`` (empty when
            it is ``None``): the epoch of changes is ``(previous_inputs[t], inputs[t]]``.
        final: the last barrier of a bounded input (FLIP-147 "end of input"): a streaming job
            stops after committing it.
        ready_at_ms: when the barrier became processable for this job (epoch ms: its
            generation, or the last input's WRITTEN time), if the catalog knows it.
        created_at_ms: when the barrier was generated (epoch ms), if the catalog knows it.
    """

    barrier: int
    ts_ms: int
    inputs: dict[str, int]
    ts_kind: TsKind = TsKind.SYSTEM
    watermark_ms: int | None = None
    previous_barrier: int | None = None
    previous_inputs: dict[str, int] = field(default_factory=dict)
    final: bool = False
    ready_at_ms: int | None = None
    created_at_ms: int | None = None

    def ends_input_since(self, since_ms: int | None) -> bool:
        """True when this is a final barrier (FLIP-147) generated at or after ``since_ms`` (epoch ms)."""
        if not self.final:
            return False
        return since_ms is None or (self.created_at_ms or self.ts_ms) >= since_ms

    def to_json(self) -> str:
        """Serialize (used to pass a plan through the streaming source)."""
        return json.dumps(
            {
                "barrier": self.barrier,
                "ts": self.ts_ms,
                "ts_kind": self.ts_kind,
                "watermark": self.watermark_ms,
                "inputs": self.inputs,
                "previous_barrier": self.previous_barrier,
                "previous_inputs": self.previous_inputs,
                "final": self.final,
                "ready_at": self.ready_at_ms,
                "created_at": self.created_at_ms,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> BarrierPlan:
        """Inverse of :meth:`to_json`."""
        d = json.loads(text)
        return cls(
            barrier=int(d["barrier"]),
            ts_ms=int(d["ts"]),
            ts_kind=TsKind(d.get("ts_kind", TsKind.SYSTEM)),
            watermark_ms=d.get("watermark"),
            inputs={k: int(v) for k, v in d["inputs"].items()},
            previous_barrier=d.get("previous_barrier"),
            previous_inputs={k: int(v) for k, v in (d.get("previous_inputs") or {}).items()},
            final=bool(d.get("final", False)),
            ready_at_ms=d.get("ready_at"),
            created_at_ms=d.get("created_at"),
        )


@dataclass(frozen=True)
class GeneratedBarrier:
    """A generated barrier as a catalog lists it, before a job's input versions are known.

    Attributes: as the same-named ones of :class:`BarrierPlan` (``ts_ms``, ``watermark_ms`` and
    ``created_at_ms`` in epoch milliseconds).
    """

    barrier: int
    ts_ms: int
    ts_kind: TsKind = TsKind.SYSTEM
    watermark_ms: int | None = None
    final: bool = False
    created_at_ms: int | None = None


def plan_pending_barriers(
    job_id: str,
    inputs: Sequence[str],
    after: int | None,
    generated: Iterable[GeneratedBarrier],
    input_versions: Callable[[int], dict[str, int] | None],
    *,
    limit: int | None = None,
    ready_at: Callable[[GeneratedBarrier], int | None] | None = None,
) -> list[BarrierPlan]:
    """The barriers of ``generated`` that ``job_id`` can process now, in order, as plans.

    Args:
        job_id: the job.
        inputs: the job's input table names (for the error message).
        after: the barrier the job's sinks are at, or ``None`` if they are empty.
        generated: the barriers generated after ``after``, ascending.
        input_versions: ``barrier -> {input table: Delta version}`` when the barrier is WRITTEN
            in every input, else ``None``.
        limit: at most this many plans.
        ready_at: when a barrier became processable (epoch ms), if the catalog knows it.

    The list stops at the first barrier not WRITTEN in every input. Each plan's previous
    barrier and input versions are those of the plan before it (of ``after`` for the first).

    Raises:
        UnknownBarrierError: ``after`` is not WRITTEN in every input (inputs were restored
            without their downstream sinks).
    """
    previous_barrier, previous_inputs = _starting_point(job_id, inputs, after, input_versions)
    plans: list[BarrierPlan] = []
    for barrier in generated:
        if limit is not None and len(plans) >= limit:
            break
        versions = input_versions(barrier.barrier)
        if versions is None:
            break
        plans.append(
            BarrierPlan(
                barrier=barrier.barrier,
                ts_ms=barrier.ts_ms,
                ts_kind=barrier.ts_kind,
                watermark_ms=barrier.watermark_ms,
                inputs=versions,
                previous_barrier=previous_barrier,
                previous_inputs=previous_inputs,
                final=barrier.final,
                ready_at_ms=ready_at(barrier) if ready_at is not None else None,
                created_at_ms=barrier.created_at_ms,
            )
        )
        previous_barrier, previous_inputs = barrier.barrier, versions
    return plans


def _starting_point(job_id: str, inputs: Sequence[str], after: int | None,
                    input_versions: Callable[[int], dict[str, int] | None]) -> tuple[int | None, dict[str, int]]:
    """``(after, its input versions)``: where a job's next barrier starts, ``(None, {})`` for
    empty sinks. Raises :class:`UnknownBarrierError` as :func:`plan_pending_barriers` says."""
    if after is None:
        return None, {}
    versions = input_versions(after)
    if versions is None:
        raise UnknownBarrierError(
            f"job {job_id}: its sinks are at barrier {after}, which is not WRITTEN in all its inputs "
            f"{sorted(inputs)}; were the inputs restored without their downstream sinks?"
        )
    return after, versions
