"""``tsb check --integrity``: verify the Delta log of every retained barrier of a topology.

For each table of the topology and each WRITTEN barrier whose version snapshot expiry kept
(:mod:`airflow_provider_tsb.delta.integrity`):

* the version must load (a truncated or unreadable commit file is a finding);
* every live data file of the version must be on storage (snapshot expiry never deletes a file
  a kept version references, so a missing one was deleted outside tsb);
* its live data files and their total size must equal the figures the barrier's commit
  recorded (the metastore's WRITTEN row, else the commit's ``tsb.files`` / ``tsb.bytes``);
* else, the commit at the version must not carry an older barrier's tag than the barrier
  recorded at it (a commit file replaced by a copy of an earlier one whose figures happen to
  match, e.g. after an empty barrier).

One finding per (table, version): the first of these that fails.

Versions recorded without figures (written before tsb recorded them, root tables ingested
without them) are counted as ``unrecorded``, not as findings. Nothing is cached: every version
is loaded.
Cost: one snapshot load and one commit-file read per distinct (table, version), one ``stat`` per
distinct data file.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_tsb.delta.conventions import parse_tag
from airflow_provider_tsb.delta.integrity import (
    TableFigures,
    figures_of,
    live_paths,
    missing_files,
    recorded_figures,
)
from airflow_provider_tsb.delta.log import commit_info, open_table
from airflow_provider_tsb.exceptions import DeltaLogError, TopologyError
from airflow_provider_tsb.metastore.records import BarrierState, TableState

if TYPE_CHECKING:
    from airflow_provider_tsb.metastore.store import MetaStore

#: barrier states read per metastore query while walking a table's history
PAGE = 500


@dataclass(frozen=True)
class IntegrityFinding:
    """One barrier whose Delta version does not hold what its commit recorded.

    Attributes:
        table: the table; ``barrier``: the barrier; ``version``: its Delta version.
        problem: ``figures`` (live files differ), ``missing`` (a live data file is not on
            storage), ``tag`` (the commit carries an older barrier's
            tag) or ``unreadable`` (the version does not load).
        expected / found: ``"N files, B bytes"`` (``figures``), the barrier tags (``tag``), or
            the error (``unreadable``: ``found``).
    """

    table: str
    barrier: int
    version: int
    problem: str
    expected: str
    found: str

    def describe(self) -> str:
        """One line for the terminal."""
        return (f"{self.table} barrier {self.barrier} (Delta version {self.version}): {self.problem}: "
                f"expected {self.expected}, found {self.found}")


@dataclass
class IntegrityReport:
    """What ``tsb check --integrity`` found for a topology.

    Attributes:
        topology: the topology.
        checked: (table, version) pairs verified against recorded figures.
        unrecorded: (table, version) pairs without recorded figures (loaded, not compared).
        findings: the mismatches (empty: the logs are intact).
    """

    topology: str
    checked: int = 0
    unrecorded: int = 0
    findings: list[IntegrityFinding] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"topology": self.topology, "checked": self.checked, "unrecorded": self.unrecorded,
                "findings": [asdict(f) for f in self.findings or []]}


def _written(store: MetaStore, table: str) -> list[TableState]:
    """Every WRITTEN state of ``table`` with a version, newest first."""
    out: list[TableState] = []
    before: int | None = None
    while True:
        page = store.table_states.history(table, limit=PAGE, before=before)
        out += [s for s in page if s.state == BarrierState.WRITTEN and s.version is not None]
        if len(page) < PAGE:
            return out
        before = page[-1].barrier


def _check_version(name: str, location: str, state: TableState, report: IntegrityReport,
                   present: set[str]) -> IntegrityFinding | None:
    """The finding for one barrier's version, or ``None`` (counts it in ``report``); ``present``:
    the table's data files already seen on storage (each is looked for once)."""
    version = int(state.version or 0)
    try:
        info = commit_info(location, version)
        table = open_table(location, version)
        found = figures_of(table)
    except (DeltaLogError, ValueError) as exc:
        return IntegrityFinding(name, state.barrier, version, "unreadable", "a loadable version", str(exc))
    unseen = sorted(live_paths(table) - present)
    gone = missing_files(location, unseen)
    present.update(set(unseen) - set(gone))
    if gone:  # a kept version's file: expiry never removes those
        return IntegrityFinding(name, state.barrier, version, "missing", "every live data file on storage",
                                f"{len(gone)} missing, e.g. {gone[0]}")
    recorded = recorded_figures(info)
    expected = recorded
    if state.file_count is not None and state.size_bytes is not None:  # the metastore's, with the commit's digest
        same = recorded is not None and recorded.as_tuple() == (state.file_count, state.size_bytes)
        expected = TableFigures(state.file_count, state.size_bytes, recorded.digest if same and recorded else None)
    if expected is None:
        report.unrecorded += 1
    else:
        report.checked += 1
        if not expected.matches(found):
            return IntegrityFinding(name, state.barrier, version, "figures", str(expected), str(found))
    tag = parse_tag(info)
    if tag is not None and tag.barrier < state.barrier:
        return IntegrityFinding(name, state.barrier, version, "tag", f"barrier {state.barrier} or later",
                                f"the commit is tagged with barrier {tag.barrier}")
    return None


def check_integrity(store: MetaStore, topology: str) -> IntegrityReport:
    """Verify every retained barrier of every table of ``topology`` (module docstring).

    Raises:
        TopologyError: the topology has no registered table (names it).
    """
    tables = [t for t in store.registry.tables(topology) if t.topology == topology]
    if not tables:
        raise TopologyError(f"topology {topology!r} has no registered tables; register it first from its DAG file "
                            "(`tsb barrier create TOPOLOGY --dags PATH`, or the barrier task)")
    report = IntegrityReport(topology, findings=[])
    for info in tables:
        expiry = store.expiry.get(info.name)
        seen: set[int] = set()
        present: set[str] = set()
        for state in _written(store, info.name):
            version = int(state.version or 0)
            if version in seen or (expiry is not None and expiry.is_expired(version)):
                continue
            seen.add(version)
            finding = _check_version(info.name, info.location, state, report, present)
            if finding is not None:
                assert report.findings is not None
                report.findings.append(finding)
    return report


__all__ = ["IntegrityFinding", "IntegrityReport", "check_integrity"]
