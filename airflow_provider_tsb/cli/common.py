"""What the ``tsb`` command groups share: the metastore of a command and the argument types.

Every command that opens the metastore takes ``--url`` (``--metastore-url``) and ``--conn-id``
(:func:`add_store_options`) and opens it with :func:`store_of`.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from airflow_provider_tsb.consistency import MAX_LEASE_SECONDS


def store_of(args: argparse.Namespace) -> Any:
    """The metastore of ``--url``, else ``$TSB_METASTORE_URL``, else the Airflow connection.

    The first two need no Airflow (the connection lookup imports it: seconds).
    """
    from airflow_provider_tsb.metastore.engine import METASTORE_URL_ENV
    from airflow_provider_tsb.metastore.store import MetaStore

    url = getattr(args, "url", None) or os.environ.get(METASTORE_URL_ENV)
    if url:
        return MetaStore(url)
    from airflow_provider_tsb.hooks.metastore import TsbMetastoreHook

    return TsbMetastoreHook(tsb_conn_id=getattr(args, "conn_id", None) or "tsb_default").get_conn()


def metastore_url_arg(value: str) -> str:
    """An ``argparse`` type: a metastore URL, not empty (``--url "$UNSET"`` would otherwise fall
    back to ``$TSB_METASTORE_URL`` or the connection: another metastore than the one meant)."""
    if not value.strip():
        raise argparse.ArgumentTypeError(
            "the metastore URL is empty: give a SQLAlchemy URL (sqlite:////abs/path/tsb.db, postgresql://...) or "
            "leave --url out to use $TSB_METASTORE_URL or the tsb_default connection"
        )
    return value


def add_store_options(p: argparse.ArgumentParser) -> None:
    """Add ``--url`` / ``--metastore-url`` and ``--conn-id`` (see :func:`store_of`) to ``p``."""
    p.add_argument("--url", "--metastore-url", dest="url", type=metastore_url_arg,
                   help="metastore SQLAlchemy URL (default: $TSB_METASTORE_URL, "
                   "the tsb_default connection, or SQLite at $AIRFLOW_HOME/tsb.db)")
    p.add_argument("--conn-id", default="tsb_default", help="Airflow connection id of the metastore")


#: barrier ids are BIGINT in the metastore
MAX_BARRIER = 2**63 - 1
#: longest wait or staleness bound: ten years, in seconds
MAX_SECONDS = 10 * 365 * 86400.0


def barrier_id_arg(value: str) -> int:
    """An ``argparse`` type: a barrier id, an integer 1..2**63-1."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a barrier id (an integer >= 1)") from None
    if not 1 <= number <= MAX_BARRIER:
        raise argparse.ArgumentTypeError(
            f"no such barrier: {value} is not a barrier id (barrier ids run from 1 to {MAX_BARRIER})"
        )
    return number


def lease_seconds_arg(value: str) -> float:
    """An ``argparse`` type: a lease duration, seconds, finite, > 0 and at most
    :data:`~airflow_provider_tsb.consistency.MAX_LEASE_SECONDS` (366 days, as the Python API)."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds <= MAX_LEASE_SECONDS:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a lease duration: give seconds > 0 and at most {MAX_LEASE_SECONDS} (366 days)"
        )
    return seconds


def seconds_arg(value: str) -> float:
    """An ``argparse`` type: a duration in seconds, finite and >= 0."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 <= seconds <= MAX_SECONDS:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"{value!r} is not a duration: give seconds >= 0")
    return seconds
