"""The tsb app framework's front door: one Spark ETL job processing timestamp barriers in order.

An app script declares a :class:`TsbApp` (job id, sources, :class:`Sink` tables and a
``process(ctx: BarrierContext) -> {sink: DataFrame}`` function) and ends with
``raise SystemExit(run_app(app))``. The framework lives in three modules, re-exported here:

* :mod:`airflow_provider_tsb.spark.model`: the app model (:class:`TsbApp`, :class:`Sink`,
  :class:`BarrierContext`);
* :mod:`airflow_provider_tsb.spark.runner`: per barrier, the alignment check (FLIP-276: every
  input at the version of the same barrier), skip-if-committed, ``process`` and the
  exactly-once commit of each sink; batch mode (:func:`run_batch` of an :class:`AppRun`);
* :mod:`airflow_provider_tsb.spark.cli`: the command line (:func:`run_app`), batch or
  streaming mode (:mod:`airflow_provider_tsb.spark.streaming`).

Modules of the package import from the three modules themselves, never from this one.
"""

from __future__ import annotations

from airflow_provider_tsb.spark.app_run import AppRun, StreamOptions
from airflow_provider_tsb.spark.catalog import BarrierCatalog, BarrierPlan
from airflow_provider_tsb.spark.cli import build_arg_parser, run_app
from airflow_provider_tsb.spark.model import BarrierContext, ProcessFn, Sink, TsbApp
from airflow_provider_tsb.spark.runner import (
    check_alignment,
    report_written_heads,
    run_barrier,
    run_batch,
)

__all__ = [
    "AppRun",
    "BarrierCatalog",
    "BarrierContext",
    "BarrierPlan",
    "ProcessFn",
    "Sink",
    "StreamOptions",
    "TsbApp",
    "build_arg_parser",
    "check_alignment",
    "report_written_heads",
    "run_app",
    "run_barrier",
    "run_batch",
]
