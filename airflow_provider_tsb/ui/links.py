"""Links into the TSB UI (a table's barrier history), and timestamps as Airflow shows them.

Shared by the asset definitions (:mod:`airflow_provider_tsb.assets`) and the metastore hook
(the ``AssetWatcher`` trigger's events); no Airflow import.
"""

from __future__ import annotations

import datetime as dt
from urllib.parse import urlencode

from airflow_provider_tsb.names import normalize_table_name

#: path of the TSB UI's lineage page (the plugin mounts the TSB app at ``/tsb``)
HISTORY_PAGE = "/tsb/ui/lineage"


def history_path(topology: str, table: str) -> str:
    """Path (no host: relative to the api-server's root) of ``table``'s barrier history page:
    the lineage page of ``topology`` with the table selected (``?table=``)."""
    return f"{HISTORY_PAGE}?{urlencode({'topology': topology, 'table': normalize_table_name(table)})}"


def iso_utc(ms: int | None) -> str | None:
    """Epoch milliseconds as an ISO 8601 UTC timestamp (``None`` stays ``None``)."""
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")
