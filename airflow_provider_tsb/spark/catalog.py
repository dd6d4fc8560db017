"""How an app learns its barriers and reports barrier states: the ``BarrierCatalog`` Protocol.

Two implementations: :class:`PlanFileCatalog` here (a JSON plan file written by the Airflow
operator, states recorded into a JSON report file the operator reads back) and the lead's
metastore catalog (registered with :func:`register_catalog_kind` under ``"metastore"``).
A catalog must be re-openable in another process from :meth:`BarrierCatalog.spec` (the
streaming source runs in a Spark Python worker): :func:`open_catalog` does that.

Plan file (``tsb-plan/1``)::

    {"format": "tsb-plan/1",
     "tables": {"<table name>": "<location>", ...},
     "barriers": [{"barrier": 1, "ts": 1700000000000, "ts_kind": "system",
                   "watermark": null, "roots": {"<root table>": <delta version>, ...}}, ...]}

``roots`` is the atomically recorded (barrier, offset) map of the root tables. Versions of
intermediate tables are not in the plan: they are resolved from the Delta log (the version
tagged with the barrier), and a barrier is pending for a job only once it is WRITTEN in all
the job's inputs.

Report file (``tsb-report/2``): JSON Lines, one record appended per report, so a report costs
the same at barrier 365 as at barrier 1 (``tsb-report/1`` rewrote one growing JSON document on
every report)::

    {"kind": "processed", "table", "barrier", "job_id", "manifest": [...], "at"}
    {"kind": "written", "table", "barrier", "version", "job_id", "at"}
    {"kind": "heartbeat", "job_id", "at"}
    {"kind": "job", "job_id", "barrier", "status", "started_at", "finished_at"}

:func:`read_report` folds it into ``{"format", "processed": [...], "written": [...],
"heartbeats": {job_id: epoch ms}, "jobs": [...]}`` (a repeated WRITTEN report once), and still
reads a ``tsb-report/1`` document.
"""

from __future__ import annotations

import importlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from airflow_provider_tsb.delta.barriers import root_version, versions_of_barriers
from airflow_provider_tsb.exceptions import UnknownBarrierError
from airflow_provider_tsb.metastore.records import TsKind
from airflow_provider_tsb.spark.plans import (
    BarrierPlan,
    GeneratedBarrier,
    plan_pending_barriers,
)

if TYPE_CHECKING:
    from airflow_provider_tsb.spark.input_leases import LeaseRequest

PLAN_FORMAT = "tsb-plan/1"
REPORT_FORMAT = "tsb-report/2"
LEGACY_REPORT_FORMAT = "tsb-report/1"


@runtime_checkable
class BarrierCatalog(Protocol):
    """Barrier source and state sink of a running app (driver side)."""

    def pending_barriers(
        self, job_id: str, sources: Mapping[str, str], after: int | None, limit: int | None = None
    ) -> list[BarrierPlan]:
        """Barriers > ``after`` (all if ``None``) that ``job_id`` can process now, in order.

        Args:
            job_id: the job.
            sources: ``{input table name: location}`` of the job.
            after: the barrier the job's sinks are at, or ``None`` if they are empty.
            limit: at most this many plans.

        A barrier is returned only when it is WRITTEN in every input; the list stops at the
        first barrier that is not (barriers are processed strictly in order).
        """
        ...

    def record_processed(self, table: str, barrier: int, job_id: str, manifest: Sequence[Mapping[str, Any]]) -> None:
        """Report PROCESSED: all files of ``barrier`` for ``table`` are written, not committed.

        ``manifest``: one entry per staged file (``path`` relative to the table root,
        ``size`` bytes, ``num_records``, ``stats`` JSON, ``modification_time`` ms).
        """
        ...

    def record_written(self, table: str, barrier: int, version: int, job_id: str) -> None:
        """Report WRITTEN: Delta ``version`` of ``table`` holds ``barrier`` (idempotent)."""
        ...

    def heartbeat(self, job_id: str) -> None:
        """Tell the control plane the job is alive (called at least once per barrier)."""
        ...

    def record_job_barrier(
        self, job_id: str, barrier: int, status: str, started_at_ms: int | None = None,
        finished_at_ms: int | None = None, release_lease: str | None = None,
        take_lease: LeaseRequest | None = None,
    ) -> str | None:
        """Record the job's timing for ``barrier`` (``running`` / ``succeeded`` / ``failed``, epoch ms).

        ``take_lease`` (at the barrier's start) and ``release_lease`` (at its end, or at the next
        barrier's start in a batch run: :mod:`airflow_provider_tsb.spark.report_queue`): an input
        lease taken or ended with the report (given only to a catalog that leases, i.e. offers
        ``create_lease``; see :mod:`airflow_provider_tsb.spark.input_leases`).

        Returns:
            The id of the lease taken for ``take_lease``, else ``None``.

        Raises:
            ExpiredVersionError: ``take_lease`` pins a version snapshot expiry removed (nothing
                is recorded).
        """
        ...

    def final_barrier(self, job_id: str, since_ms: int | None = None) -> int | None:
        """The newest final barrier (FLIP-147 end of input) of the job's topology generated at or
        after ``since_ms`` (epoch ms), or ``None``: a streaming job whose sinks are at it is done."""
        ...

    def spec(self) -> dict[str, str]:
        """Options from which :func:`open_catalog` re-creates this catalog in another process."""
        ...


CatalogFactory = Callable[[Mapping[str, str]], BarrierCatalog]
_FACTORIES: dict[str, CatalogFactory] = {}
#: modules that register the built-in kinds, imported on first use in whatever process opens a
#: spec (a Spark Python worker computing streaming offsets imports nothing of the app's own)
BUILTIN_KINDS: dict[str, str] = {
    "plan": "airflow_provider_tsb.spark.catalog",
    "metastore": "airflow_provider_tsb.spark.metastore_catalog",
}


def register_catalog_kind(kind: str, factory: CatalogFactory) -> None:
    """Register a catalog implementation for :func:`open_catalog` (``spec["kind"] == kind``)."""
    _FACTORIES[kind] = factory


def open_catalog(spec: Mapping[str, str]) -> BarrierCatalog:
    """Re-create a catalog from its :meth:`BarrierCatalog.spec`, in this or any other process.

    The built-in kinds (:data:`BUILTIN_KINDS`: ``plan``, ``metastore``) are imported on first
    use, so the streaming source's Python worker can open the production catalog.

    Raises:
        ValueError: unknown ``kind`` (the message lists the known kinds).
    """
    kind = spec.get("kind", "")
    if kind not in _FACTORIES and kind in BUILTIN_KINDS:
        importlib.import_module(BUILTIN_KINDS[kind])
    if kind not in _FACTORIES:
        known = sorted(set(_FACTORIES) | set(BUILTIN_KINDS))
        raise ValueError(f"unknown barrier catalog kind {kind!r}; known kinds: {known}")
    return _FACTORIES[kind](spec)


def _atomic_write_json(path: str, payload: Mapping[str, Any]) -> None:
    directory = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tsb-", suffix=".json", dir=directory)
    with os.fdopen(fd, "w") as handle:
        json.dump(payload, handle, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class PlanFile:
    """Reader/writer of a plan file (see module docstring). Writes are atomic (rename)."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)

    def load(self) -> dict[str, Any]:
        """Return the plan; an empty plan if the file does not exist."""
        if not os.path.exists(self.path):
            return {"format": PLAN_FORMAT, "tables": {}, "barriers": []}
        with open(self.path) as handle:
            plan = json.load(handle)
        if plan.get("format") != PLAN_FORMAT:
            raise ValueError(f"{self.path}: not a {PLAN_FORMAT} plan file (format={plan.get('format')!r})")
        return plan

    def set_tables(self, tables: Mapping[str, str]) -> None:
        """Add or update ``{table name: location}`` entries."""
        plan = self.load()
        plan["tables"].update(tables)
        _atomic_write_json(self.path, plan)

    def append_barrier(
        self,
        roots: Sequence[str],
        *,
        ts_ms: int | None = None,
        ts_kind: TsKind = TsKind.SYSTEM,
        watermark_ms: int | None = None,
        final: bool = False,
    ) -> int:
        """Generate the next barrier: record the current version of each root table.

        Args:
            roots: root table names (their locations must be in ``tables``).
            ts_ms: barrier timestamp (default: now).
            ts_kind: ``system`` or ``event``.
            watermark_ms: event-time watermark.
            final: the last barrier of a bounded input (FLIP-147).

        Returns:
            The new barrier id (last + 1, starting at 1).

        Raises:
            TableNotFoundError: a root table does not exist.
            KeyError: a root has no location in the plan.
        """
        plan = self.load()
        versions = {name: root_version(plan["tables"][name]) for name in roots}
        barrier = max((b["barrier"] for b in plan["barriers"]), default=0) + 1
        plan["barriers"].append(
            {
                "barrier": barrier,
                "ts": int(time.time() * 1000) if ts_ms is None else ts_ms,
                "ts_kind": ts_kind,
                "watermark": watermark_ms,
                "roots": versions,
                "final": final,
                "created_at": int(time.time() * 1000),
            }
        )
        _atomic_write_json(self.path, plan)
        return barrier


class PlanFileCatalog:
    """:class:`BarrierCatalog` over a plan file and a report file (production path).

    Args:
        plan_path: the plan file (re-read on every call: barriers appended while a streaming
            app runs are picked up).
        report_path: where states are recorded (``None``: not recorded).
    """

    def __init__(self, plan_path: str, report_path: str | None = None) -> None:
        self.plan = PlanFile(plan_path)
        self.report_path = os.path.abspath(report_path) if report_path else None
        self._lock = threading.Lock()

    def spec(self) -> dict[str, str]:
        """See :meth:`BarrierCatalog.spec`."""
        spec = {"kind": "plan", "plan": self.plan.path}
        if self.report_path:
            spec["report"] = self.report_path
        return spec

    def tables(self) -> dict[str, str]:
        """``{table name: location}`` declared in the plan."""
        return dict(self.plan.load().get("tables", {}))

    def pending_barriers(
        self, job_id: str, sources: Mapping[str, str], after: int | None, limit: int | None = None
    ) -> list[BarrierPlan]:
        """See :meth:`BarrierCatalog.pending_barriers`.

        Cost: one plan-file read plus, per non-root input, one Delta log walk back to the
        barrier before ``after``.

        Raises:
            UnknownBarrierError: ``after`` is not a barrier of the plan.
        """
        entries = sorted(self.plan.load()["barriers"], key=lambda b: b["barrier"])
        by_id = {int(b["barrier"]): b for b in entries}
        ids = [b["barrier"] for b in entries]
        if after is not None and after not in ids:
            raise UnknownBarrierError(
                f"job {job_id}: its sinks are at barrier {after}, which is not in plan {self.plan.path}"
            )
        start = 0 if after is None else ids.index(after)
        walk_after = ids[start - 1] if after is not None and start > 0 else None
        first = start + 1 if after is not None else 0  # the entries after ``after``
        intermediate: dict[str, dict[int, int]] = {}

        def version(name: str, entry: Mapping[str, Any]) -> int | None:
            roots = entry.get("roots", {})
            if name in roots:
                return int(roots[name])
            if name not in intermediate:
                intermediate[name] = versions_of_barriers(sources[name], walk_after)
            return intermediate[name].get(entry["barrier"])

        def input_versions(barrier: int) -> dict[str, int] | None:
            out: dict[str, int] = {}
            for name in sorted(sources):
                v = version(name, by_id[barrier])
                if v is None:
                    return None
                out[name] = v
            return out

        generated = (
            GeneratedBarrier(
                barrier=int(entry["barrier"]),
                ts_ms=int(entry["ts"]),
                ts_kind=TsKind(entry.get("ts_kind", TsKind.SYSTEM)),
                watermark_ms=entry.get("watermark"),
                final=bool(entry.get("final", False)),
                created_at_ms=entry.get("created_at"),
            )
            for entry in entries[first:]
        )
        return plan_pending_barriers(job_id, list(sources), after, generated, input_versions, limit=limit)

    def _append_report(self, record: Mapping[str, Any]) -> None:
        """Append one record line (``O_APPEND``: whole lines from concurrent processes)."""
        if not self.report_path:
            return
        line = (json.dumps(record, sort_keys=True) + "\n").encode()
        with self._lock:
            os.makedirs(os.path.dirname(self.report_path) or ".", exist_ok=True)
            fd = os.open(self.report_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)

    def record_processed(self, table: str, barrier: int, job_id: str, manifest: Sequence[Mapping[str, Any]]) -> None:
        """See :meth:`BarrierCatalog.record_processed`."""
        self._append_report({
            "kind": "processed",
            "table": table,
            "barrier": barrier,
            "job_id": job_id,
            "manifest": [dict(m) for m in manifest],
            "at": int(time.time() * 1000),
        })

    def record_written(self, table: str, barrier: int, version: int, job_id: str) -> None:
        """See :meth:`BarrierCatalog.record_written`; a repeated report is read once
        (:func:`read_report`)."""
        self._append_report({"kind": "written", "table": table, "barrier": barrier, "version": version,
                             "job_id": job_id, "at": int(time.time() * 1000)})

    def heartbeat(self, job_id: str) -> None:
        """See :meth:`BarrierCatalog.heartbeat`."""
        self._append_report({"kind": "heartbeat", "job_id": job_id, "at": int(time.time() * 1000)})

    def final_barrier(self, job_id: str, since_ms: int | None = None) -> int | None:
        """See :meth:`BarrierCatalog.final_barrier`."""
        finals = [
            int(b["barrier"]) for b in self.plan.load()["barriers"]
            if b.get("final") and (since_ms is None or int(b.get("created_at") or b["ts"]) >= since_ms)
        ]
        return max(finals, default=None)

    def record_job_barrier(
        self, job_id: str, barrier: int, status: str, started_at_ms: int | None = None,
        finished_at_ms: int | None = None, release_lease: str | None = None,
        take_lease: LeaseRequest | None = None,
    ) -> str | None:
        """See :meth:`BarrierCatalog.record_job_barrier`; kept in the report's ``jobs`` list (a
        plan file holds no leases: ``take_lease`` and ``release_lease`` are always ``None`` here)."""
        self._append_report({"kind": "job", "job_id": job_id, "barrier": barrier, "status": status,
                             "started_at": started_at_ms, "finished_at": finished_at_ms})
        return None


def read_report(path: str) -> dict[str, Any]:
    """Read a report file (see module doc); an empty report if it does not exist.

    Returns ``{"format", "processed": [...], "written": [...], "heartbeats": {job_id: ms},
    "jobs": [...]}``; a WRITTEN report repeated by a retry appears once.

    Raises:
        ValueError: a line is not JSON (names the file and the line number).
    """
    report: dict[str, Any] = {"format": REPORT_FORMAT, "processed": [], "written": [], "heartbeats": {}, "jobs": []}
    if not os.path.exists(path):
        return report
    with open(path) as handle:
        text = handle.read()
    try:
        legacy = json.loads(text) if text.lstrip().startswith("{\"format\"") else None
    except json.JSONDecodeError:
        legacy = None
    if isinstance(legacy, dict) and legacy.get("format") == LEGACY_REPORT_FORMAT:
        return {**report, **legacy}
    seen: set[tuple[Any, ...]] = set()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"report file {path}: line {number} is not JSON ({exc})") from None
        kind = record.pop("kind", None)
        if kind == "written":
            key = (record["table"], record["barrier"], record["version"])
            if key not in seen:
                seen.add(key)
                report["written"].append(record)
        elif kind == "heartbeat":
            report["heartbeats"][record["job_id"]] = record["at"]
        elif kind == "processed":
            report["processed"].append(record)
        elif kind == "job":
            report["jobs"].append(record)
    return report


register_catalog_kind("plan", lambda spec: PlanFileCatalog(spec["plan"], spec.get("report")))
