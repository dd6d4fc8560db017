"""Airflow options read without importing Airflow.

Importing Airflow's configuration sets up its logging (on stdout: in front of a CLI's JSON) and
costs seconds; a CLI command, a Spark driver or a metastore call that needs one option reads it
the way Airflow resolves it first: ``AIRFLOW__{SECTION}__{KEY}``, then ``$AIRFLOW_HOME/airflow.cfg``
(Airflow docs, "Setting Configuration Options"). Secrets backends and ``_CMD`` forms are
Airflow's own: code that runs inside Airflow reads those through ``airflow.configuration``.
"""

from __future__ import annotations

import configparser
import os
from pathlib import Path


def airflow_option(section: str, key: str) -> str | None:
    """``[section] key`` from the environment or ``airflow.cfg``; ``None`` when unset or empty."""
    raw = os.environ.get(f"AIRFLOW__{section.upper()}__{key.upper()}")
    if raw is None:
        cfg = Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow") / "airflow.cfg"
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(cfg)
            raw = parser.get(section, key, fallback=None)
        except (OSError, configparser.Error):
            raw = None
    return raw if raw not in (None, "") else None
