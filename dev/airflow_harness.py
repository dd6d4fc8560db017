"""Shared real-Airflow deployment for the test session (see :mod:`dev.local_airflow`)."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dev.local_airflow import *  # noqa: F403
from dev.local_airflow import (
    ADMIN_PASSWORD,
    ADMIN_USER,
    VIEWER_PASSWORD,
    VIEWER_USER,
    AirflowHandle,
    AirflowHarnessError,
    running_airflow,
    start_airflow,
)

PROBE_PLUGIN = Path(__file__).resolve().parent / "airflow_probe_plugin.py"

__all__ = [
    "ADMIN_PASSWORD", "ADMIN_USER", "VIEWER_PASSWORD", "VIEWER_USER", "AirflowHarnessError", "PROBE_PLUGIN",
    "AirflowHandle", "running_airflow", "shared_airflow", "start_airflow", "stop_shared_airflow"]

# ---------------------------------------------------------------------- shared instance
_SHARED: AirflowHandle | None = None
_SHARED_PG: Any = None


def _shared_db_url() -> str | None:
    """Metadata DB of the shared instance: ``TSB_AIRFLOW_DB_URL``, or ``TSB_AIRFLOW_DB=postgres``
    for a throwaway PostgreSQL (``dev/pg.py``); default SQLite."""
    global _SHARED_PG
    if url := os.environ.get("TSB_AIRFLOW_DB_URL"):
        return url
    if os.environ.get("TSB_AIRFLOW_DB", "sqlite") != "postgres":
        return None
    if _SHARED_PG is None:
        from dev.pg import start_postgres

        _SHARED_PG = start_postgres()
    return str(_SHARED_PG.create_database("airflow"))


def shared_airflow(env_extra: Mapping[str, str] | None = None) -> AirflowHandle:
    """One Airflow per Python process (test session), started on first use.

    Tests add their DAG files with :meth:`AirflowHandle.add_dag_file` and then
    :meth:`AirflowHandle.wait_for_dag`. Stop it with :func:`stop_shared_airflow` (the pytest
    fixture in ``tests/support/airflow_fixtures.py`` does). ``env_extra`` only applies on first start.
    """
    global _SHARED
    if _SHARED is None or any(p.poll() is not None for p in _SHARED.processes.values()):
        if _SHARED is not None:
            _SHARED.stop()
        _SHARED = start_airflow(env_extra=env_extra, sql_alchemy_conn=_shared_db_url(), extra_plugins=[PROBE_PLUGIN])
    return _SHARED


def stop_shared_airflow() -> None:
    global _SHARED, _SHARED_PG
    if _SHARED is not None:
        _SHARED.stop()
        _SHARED = None
    if _SHARED_PG is not None:
        _SHARED_PG.stop()
        _SHARED_PG = None


if __name__ == "__main__":  # manual use: python -m dev.airflow_harness [dags_folder]

    def _interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _interrupt)
    folder = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else None
    af = start_airflow(folder)
    print(
        f"Airflow up in {af.startup_seconds:.1f}s at {af.base_url} (home {af.home}); "
        f"user {af.username}/{af.password}. Ctrl-C to stop."
    )
    try:
        while True:
            time.sleep(1)
            af.check_alive()
    except KeyboardInterrupt:
        pass
    finally:
        af.stop()
