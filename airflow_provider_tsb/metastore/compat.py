"""The flat :class:`~airflow_provider_tsb.metastore.store.MetaStore` methods of before the
managers (``store.resolve(...)``, ``store.create_barrier(...)``, ...): kept for one release as
delegates that warn (docs/design.md "Metastore"; CHANGELOG "Deprecated").

``store.<name>(...)`` now reads ``store.<manager>.<name>(...)``, the manager given by
:data:`FLAT_METHODS`. Four old methods share their name with their manager
(``store.barriers(...)``, ``store.delays(...)``, ``store.freshness(...)``,
``store.revisions(...)``): calling the manager forwards to its namesake method, with the same
warning (:func:`call_namesake`).

The reading methods of the records (``Resolution.to_arrow()`` ...) are deprecated the same way
(:class:`RecordReadDeprecationWarning`): reading lives in :mod:`airflow_provider_tsb.read`.

The warning is :class:`FlatMethodDeprecationWarning`; this repository's test suite turns it into
an error, so no caller here uses the old form (``tests/test_architecture.py`` also checks the
sources).
"""

from __future__ import annotations

import warnings
from typing import Any

#: manager attribute of :class:`MetaStore` -> the names of its methods that were flat methods
MANAGER_METHODS: dict[str, tuple[str, ...]] = {
    "registry": (
        "register_topology", "set_barrier_domain", "register_table", "register_job", "register_source",
        "register_sink", "create_job", "unregister_job", "job", "jobs", "table", "tables", "writer_of",
        "topologies", "graph", "job_io",
    ),
    "domains": ("barrier_domain",),
    "barriers": ("create_barrier", "barrier", "barriers", "latest_barrier", "latest_final_barrier"),
    "table_states": (
        "record_processed", "record_written", "clear_processed", "rollback_table", "held_staging",
        "due_withdrawn_staging", "forget_withdrawn_staging", "table_state", "version_at", "newest_written",
        "table_history", "written_versions", "written_entries", "states_at", "barriers_at_versions",
        "newest_written_by_table",
    ),
    "resolution": ("resolve",),
    "expiry": ("table_expiry", "expired_barriers", "mark_expired"),
    "leases": ("create_lease", "renew_lease", "release_lease", "expire_leases", "leased_ranges", "leased_versions"),
    "job_runs": (
        "begin_attempt", "start_attempt", "fencing_token", "check_fencing_token", "heartbeat",
        "record_job_barrier", "job_barriers", "job_barrier_statuses",
    ),
    "delays": ("delays",),
    "freshness": ("freshness",),
    "revisions": (
        "plan_revision", "revision", "revisions", "pending_revision", "check_no_pending_revision",
        "mark_revision_table", "fail_revision", "finish_revision",
    ),
}

#: deprecated flat method name -> the manager attribute of :class:`MetaStore` that has it now
FLAT_METHODS: dict[str, str] = {name: manager for manager, names in MANAGER_METHODS.items() for name in names}


class FlatMethodDeprecationWarning(DeprecationWarning):
    """A flat ``MetaStore`` method was used; the message names the manager form to use."""


def warn_flat(name: str, *, stacklevel: int = 3) -> None:
    """Warn that ``store.<name>`` is deprecated, naming ``store.<manager>.<name>``.

    Raises:
        KeyError: ``name`` is not a deprecated flat method.
    """
    manager = FLAT_METHODS[name]
    warnings.warn(
        f"MetaStore.{name} is deprecated and will be removed in the next release: call "
        f"store.{manager}.{name}(...) instead (the metastore's managers, docs/design.md \"Metastore\")",
        FlatMethodDeprecationWarning,
        stacklevel=stacklevel,
    )


def call_namesake(manager: object, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The old ``store.<name>(...)`` on a manager of the same name: warn, then call
    ``manager.<name>(...)``."""
    warn_flat(name, stacklevel=4)
    return getattr(manager, name)(*args, **kwargs)


class RecordReadDeprecationWarning(DeprecationWarning):
    """A record's reading method (``Resolution.to_arrow()`` ...) was used; the message names the
    :mod:`airflow_provider_tsb.read` function to use."""


def warn_record_read(method: str, replacement: str) -> None:
    """Warn that ``method`` of a metastore record is deprecated in favour of ``replacement``."""
    warnings.warn(
        f"{method}() is deprecated and will be removed in the next release: records are plain data, "
        f"reading is airflow_provider_tsb.{replacement}",
        RecordReadDeprecationWarning,
        stacklevel=3,
    )
