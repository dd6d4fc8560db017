"""The ``tsb`` streaming source: a Python Data Source whose offsets are barrier ids.

Where it runs (Spark docs, "Python Data Source API"): ``latestOffset`` and ``partitions`` run
in a Python worker that the *driver* starts (with ``spark.pyspark.python``), and open the
barrier catalog (the metastore) there; ``read`` runs in an *executor's* Python worker (with
``spark.sql.execution.pyspark.python``, falling back to ``spark.pyspark.python``), which
unpickles the reader and imports this module. So this module imports only the standard library
and pyspark at import time: executors need nothing of the provider but the ``--py-files`` zip
(:mod:`airflow_provider_tsb.spark.packaging`), not delta-rs, SQLAlchemy or Airflow. The catalog
is imported lazily, on the driver's side only. Streaming mode itself (the query, the
``foreachBatch`` commit) is :mod:`airflow_provider_tsb.spark.streaming`.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

if TYPE_CHECKING:
    from airflow_provider_tsb.spark.catalog import BarrierCatalog, BarrierPlan

SOURCE_SCHEMA = "barrier long, plan string"


class BarrierPartition(InputPartition):
    """One micro-batch's only partition: its barriers' serialized :class:`BarrierPlan` s, in order."""

    def __init__(self, plan_jsons: list[str]) -> None:
        super().__init__(plan_jsons)
        self.plan_jsons = plan_jsons


class BarrierFeed:
    """The next barrier a streaming job may process, long-polled from its barrier catalog.

    The offsets of both streaming modes: the ``tsb`` source's ``latestOffset`` (Structured
    Streaming, a driver of its own) and the client-driven loop of a Spark Connect job
    (:func:`airflow_provider_tsb.spark.streaming.run_streaming`). A barrier is offered once it
    is WRITTEN in every input (FLIP-276 alignment), never past ``until_barrier`` or after
    ``max_barriers`` barriers, and nothing after a final barrier generated since
    ``final_since_ms`` (FLIP-147 end of input).

    Args:
        catalog_spec: the catalog's :meth:`~airflow_provider_tsb.spark.catalog.BarrierCatalog.spec`,
            opened lazily in the process that polls (the catalog itself is not picklable).
        job_id: the job.
        sources: ``{input table: location}``.
        until_barrier, max_barriers, final_since_ms: the stop rules above (``None``: none).
        wait_s: longest wait, seconds, for a barrier in one :meth:`next_after` call.
        poll_s: seconds between catalog look-ups while waiting (at least 0.01).
        catalog: an already open catalog (the client-driven loop passes its own).
    """

    def __init__(
        self, catalog_spec: Mapping[str, str], job_id: str, sources: Mapping[str, str], *,
        until_barrier: int | None = None, max_barriers: int | None = None, final_since_ms: int | None = None,
        wait_s: float = 0.0, poll_s: float = 0.05, catalog: BarrierCatalog | None = None,
    ) -> None:
        self.catalog_spec = dict(catalog_spec)
        self._catalog = catalog
        self.job_id = job_id
        self.sources = dict(sources)
        self.until_barrier = until_barrier
        self.max_barriers = max_barriers
        self.final_since_ms = final_since_ms
        self.wait_s = wait_s
        self.poll_s = max(0.01, poll_s)
        self.offered: set[int] = set()
        #: the final barrier once offered (nothing is offered after it)
        self.final: int | None = None

    def __getstate__(self) -> dict:
        """Pickled without the (unpicklable, driver-side) catalog."""
        state = dict(self.__dict__)
        state["_catalog"] = None
        return state

    @property
    def catalog(self) -> BarrierCatalog:
        """The catalog, opened lazily from its spec in this process (on the driver's host only:
        the offset and partition planning; see module doc)."""
        if self._catalog is None:
            try:
                from airflow_provider_tsb.spark.catalog import open_catalog
            except ImportError as exc:
                raise ImportError(
                    f"the tsb streaming source of job {self.job_id!r} plans its micro-batches in a Python worker "
                    f"that the Spark driver starts with spark.pyspark.python ({sys.executable}), which cannot "
                    f"import the barrier catalog ({exc}). Set spark.pyspark.python to a Python with "
                    "airflow-provider-tsb installed on the driver's host (the default: the Airflow worker's), "
                    "and name the executors' Python with spark.sql.execution.pyspark.python"
                ) from exc
            self._catalog = open_catalog(self.catalog_spec)
        return self._catalog

    def plan_after(self, after: int) -> BarrierPlan | None:
        """The plan of the first barrier after ``after`` ready in every input, or ``None`` (one look-up)."""
        plans = self.plans_after(after, 1)
        return plans[0] if plans else None

    def plans_after(self, after: int, limit: int) -> list[BarrierPlan]:
        """The plans of the first ``limit`` barriers after ``after`` ready in every input, in
        order (one look-up; ``[]``: none)."""
        return self.catalog.pending_barriers(self.job_id, self.sources, None if after < 0 else after, limit=limit)

    def ended(self, after: int) -> bool:
        """True once the final barrier is offered and ``after`` has reached it."""
        return self.final is not None and after >= self.final

    def next_after(self, after: int) -> BarrierPlan | None:
        """The next barrier after ``after`` that the rules allow, waiting up to ``wait_s``; ``None``
        when there is none yet (or none will come: :meth:`ended`, or a bound reached)."""
        plans = self.next_plans_after(after, 1)
        return plans[0] if plans else None

    def next_plans_after(self, after: int, limit: int) -> list[BarrierPlan]:
        """The next barriers after ``after`` that the rules allow, at most ``limit`` of them in
        order (none after a final barrier), waiting up to ``wait_s`` for the first; ``[]`` when
        there is none yet (or none will come: :meth:`ended`, or a bound reached)."""
        if self.ended(after):
            return []
        deadline = time.monotonic() + self.wait_s
        plans = self.plans_after(after, limit)
        while not plans and time.monotonic() + self.poll_s < deadline:
            time.sleep(self.poll_s)
            plans = self.plans_after(after, limit)
        offered: list[BarrierPlan] = []
        for plan in plans:
            if self.until_barrier is not None and plan.barrier > self.until_barrier:
                break
            if self.max_barriers is not None and plan.barrier not in self.offered:
                if len(self.offered) >= self.max_barriers:
                    break
            self.offered.add(plan.barrier)
            offered.append(plan)
            if plan.ends_input_since(self.final_since_ms):
                self.final = plan.barrier
                break
        return offered


class TsbStreamReader(DataSourceStreamReader):
    """Offsets are ``{"barrier": n}`` (``-1`` before the first barrier); a micro-batch ``(start,
    end]`` holds the ready barriers after ``start`` up to ``end``: at most
    ``max_barriers_per_trigger`` of them (Structured Streaming's ``maxFilesPerTrigger`` for
    barriers; :mod:`~airflow_provider_tsb.spark.barrier_group`), one when it is ``1``.

    Options: ``catalog`` (JSON catalog spec), ``job_id``, ``sources`` (JSON
    ``{table: location}``), ``start_after`` (barrier the sinks are at, ``-1`` for none),
    ``max_barriers_per_trigger`` (default 1), optional ``until_barrier`` and ``max_barriers``
    (the reader never offers a barrier past them, so a stopping query never starts a barrier it
    will not finish), and ``final_since_ms`` (nothing is offered after a final barrier generated
    since then; empty: after any final barrier). The rules are :class:`BarrierFeed`'s.
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        self.job_id = options["job_id"]
        self.start_after = int(options.get("start_after", "-1"))
        self.per_trigger = max(1, int(options.get("max_barriers_per_trigger") or 1))
        self._current = self.start_after
        self.feed = BarrierFeed(
            json.loads(options["catalog"]), self.job_id, json.loads(options["sources"]),
            until_barrier=int(options["until_barrier"]) if options.get("until_barrier") else None,
            max_barriers=int(options["max_barriers"]) if options.get("max_barriers") else None,
            final_since_ms=int(options["final_since_ms"]) if options.get("final_since_ms") else None,
            wait_s=float(options.get("wait_s") or 0.0), poll_s=float(options.get("poll_s") or 0.05),
        )

    def initialOffset(self) -> dict:  # noqa: N802 - Spark API
        """The barrier the sinks were at when the query was first started."""
        return {"barrier": self.start_after}

    def latestOffset(self, start: dict | None = None, limit: object = None) -> dict:  # noqa: N802
        """The last of the next ready barriers after ``start`` (at most ``max_barriers_per_trigger``
        of them, WRITTEN in all inputs), or ``start`` when none is ready."""
        after = int(start["barrier"]) if start is not None else self._current
        plans = self.feed.next_plans_after(after, self.per_trigger)
        self._current = plans[-1].barrier if plans else after
        return {"barrier": self._current}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """One partition holding the plans of the barriers in ``(start, end]`` (none for an empty
        range). A micro-batch replayed from the checkpoint after a failure gets the same
        barriers again: they are the ready barriers of that range, whatever the sinks hold.

        Raises:
            RuntimeError: the catalog has no ready barrier ``end`` after ``start`` (sinks restored
                without their query's checkpoint reset).
        """
        first, last = int(start["barrier"]), int(end["barrier"])
        if first == last:
            return []
        plans = [p for p in self.feed.plans_after(first, last - first) if p.barrier <= last]
        if not plans or plans[-1].barrier != last:
            raise RuntimeError(
                f"tsb source for job {self.job_id}: micro-batch ({first}, {last}] expected barrier "
                f"{last} after {first}, catalog returned {[p.barrier for p in plans]} "
                "(sinks restored without resetting the checkpoint?)"
            )
        return [BarrierPartition([plan.to_json() for plan in plans])]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, str]]:
        """Yield a control row ``(barrier, plan JSON)`` per barrier of the micro-batch, in order."""
        for plan_json in partition.plan_jsons:  # type: ignore[attr-defined]
            yield (int(json.loads(plan_json)["barrier"]), plan_json)

    def commit(self, end: dict) -> None:
        """Nothing to do: the Delta commits are the durable state."""


class TsbDataSource(DataSource):
    """``spark.readStream.format("tsb")``: barrier-aligned micro-batches (see module doc)."""

    @classmethod
    def name(cls) -> str:
        """Format name."""
        return "tsb"

    def schema(self) -> str:
        """Control rows: ``barrier long, plan string``."""
        return SOURCE_SCHEMA

    def streamReader(self, schema: object) -> DataSourceStreamReader:  # noqa: N802 - Spark API
        """The barrier stream reader."""
        return TsbStreamReader(self.options)
