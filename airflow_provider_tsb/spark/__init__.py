"""Spark side of the data plane: the library the ``spark_apps/`` jobs import.

* :mod:`.session` - a SparkSession configured for tsb;
* :mod:`.inputs` - snapshots and epochs of changes of Delta tables at exact versions;
* :mod:`.outputs` - exactly-once commit of one barrier's output to one sink;
* :mod:`.catalog` - the ``BarrierCatalog`` Protocol and the plan-file catalog;
* :mod:`.app` - the app framework's front door, re-exporting :mod:`.model` (``TsbApp``,
  ``Sink``, ``BarrierContext``), :mod:`.runner` (per-barrier protocol, batch mode) and
  :mod:`.cli` (``run_app``); :mod:`.streaming` - streaming mode; :mod:`.micro_batch` -
  ``MicroBatchContext``, several barriers in one ``process_micro_batch`` call;
* :mod:`.metastore_catalog` - the production catalog on the tsb metastore;
* :mod:`.killpoints` - a test facility: named crash points for exactly-once tests, inert
  unless ``TSB_KILL_AT`` is set;
* :mod:`.barrier_source` - the ``tsb`` streaming source (its ``read()`` runs on executors);
  :mod:`.packaging` - the ``--py-files`` zip that ships the package to executors.

The names below are imported on first use: importing this package imports nothing else.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> module that defines it; imported on first use (PEP 562), so that importing a
#: submodule (an executor unpickling the streaming source imports ``.barrier_source``) does not
#: import delta-rs, SQLAlchemy or the rest of the data plane
_EXPORTS: dict[str, str] = {
    "BarrierCatalog": "catalog",
    "BarrierPlan": "catalog",
    "PlanFile": "catalog",
    "PlanFileCatalog": "catalog",
    "open_catalog": "catalog",
    "read_report": "catalog",
    "register_catalog_kind": "catalog",
    "run_app": "cli",
    "change_sign": "inputs",
    "read_changes": "inputs",
    "read_snapshot": "inputs",
    "BarrierContext": "model",
    "BARRIER_COLUMN": "frames",
    "MicroBatchContext": "micro_batch",
    "Compaction": "outputs_compaction",
    "Sink": "model",
    "TsbApp": "model",
    "WriteOptions": "write_options",
    "WriteResult": "barrier_commit",
    "WriteTarget": "write_options",
    "write_barrier": "barrier_commit",
    "run_barrier": "runner",
    "run_batch": "runner",
    "run_streaming": "streaming",
    "AppRun": "app_run",
    "StreamOptions": "app_run",
    "get_spark": "session",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [
    "AppRun",
    "BARRIER_COLUMN",
    "BarrierCatalog",
    "BarrierContext",
    "BarrierPlan",
    "Compaction",
    "MicroBatchContext",
    "PlanFile",
    "PlanFileCatalog",
    "Sink",
    "StreamOptions",
    "TsbApp",
    "WriteOptions",
    "WriteResult",
    "WriteTarget",
    "change_sign",
    "get_spark",
    "open_catalog",
    "read_changes",
    "read_report",
    "read_snapshot",
    "register_catalog_kind",
    "run_app",
    "run_barrier",
    "run_batch",
    "run_streaming",
    "write_barrier",
]
