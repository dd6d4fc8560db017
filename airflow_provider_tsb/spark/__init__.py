"""Spark side of the data plane: the library the ``spark_apps/`` jobs import.

* :mod:`.session` - a SparkSession configured for tsb;
* :mod:`.inputs` - snapshots and epochs of changes of Delta tables at exact versions;
* :mod:`.outputs` - exactly-once commit of one barrier's output to one sink;
* :mod:`.catalog` - the ``BarrierCatalog`` Protocol and the plan-file catalog;
* :mod:`.app` - the app framework's front door, re-exporting :mod:`.model` (``TsbApp``,
  ``Sink``, ``BarrierContext``), :mod:`.runner` (per-barrier protocol, batch mode) and
  :mod:`.cli` (``run_app``); :mod:`.streaming` - streaming mode;
* :mod:`.metastore_catalog` - the production catalog on the tsb metastore;
* :mod:`.killpoints` - a test facility: named crash points for exactly-once tests, inert
  unless ``TSB_KILL_AT`` is set.
"""

from airflow_provider_tsb.spark.catalog import (
    BarrierCatalog,
    BarrierPlan,
    PlanFile,
    PlanFileCatalog,
    open_catalog,
    read_report,
    register_catalog_kind,
)
from airflow_provider_tsb.spark.cli import run_app
from airflow_provider_tsb.spark.inputs import change_sign, read_changes, read_snapshot
from airflow_provider_tsb.spark.model import BarrierContext, Sink, TsbApp
from airflow_provider_tsb.spark.outputs import WriteResult, write_barrier
from airflow_provider_tsb.spark.runner import run_barrier, run_batch
from airflow_provider_tsb.spark.session import get_spark

__all__ = [
    "BarrierCatalog",
    "BarrierContext",
    "BarrierPlan",
    "PlanFile",
    "PlanFileCatalog",
    "Sink",
    "TsbApp",
    "WriteResult",
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
    "write_barrier",
]
