"""Freshness targets as Airflow Deadline Alerts, rendered without a scheduler (the alert firing
under the real scheduler and triggerer: tests/e2e/test_airflow_mechanisms.py)."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from airflow_provider_tsb.deadlines import CALLBACK_PATH, freshness_deadlines, freshness_misses
from airflow_provider_tsb.topology import Topology


def _topology(freshness: float | None = 60) -> Topology:
    topo = Topology("fresh", warehouse="/tmp/wh", freshness=freshness)
    topo.root_table("raw.events")
    topo.job("clean", "clean.py", sources=["raw.events"], sinks=["fresh.clean"])
    topo.job("daily", "daily.py", sources=["fresh.clean"], sinks=["fresh.daily"])
    topo.job("hourly", "hourly.py", sources=["fresh.clean"], sinks=["fresh.hourly"])
    return topo


def test_one_alert_per_distinct_target_referenced_to_the_queued_run() -> None:
    topo = _topology()
    topo.table("fresh.daily", freshness=dt.timedelta(hours=1))
    alerts = freshness_deadlines(topo, tsb_conn_id="tsb_pg")
    assert [a.interval for a in alerts] == [dt.timedelta(seconds=60), dt.timedelta(hours=1)]
    assert [a.name for a in alerts] == ["tsb freshness 60 s: tsb.fresh.clean, tsb.fresh.hourly",
                                        "tsb freshness 3600 s: tsb.fresh.daily"]
    assert all(type(a.reference).__name__ == "DagRunQueuedAtDeadline" for a in alerts)
    assert alerts[1].callback.path == CALLBACK_PATH
    assert alerts[1].callback.kwargs == {"topology": "fresh", "tables": ["tsb.fresh.daily"], "target_s": 3600.0,
                                         "tsb_conn_id": "tsb_pg"}


def test_a_topology_without_target_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="topology 'fresh' has no freshness target; set Topology"):
        freshness_deadlines(_topology(freshness=None))


def test_callback_reads_the_metastore_and_names_only_real_misses(tmp_path, monkeypatch) -> None:
    from airflow_provider_tsb.metastore.store import MetaStore

    url = f"sqlite:///{tmp_path / 'tsb.db'}"
    monkeypatch.setenv("TSB_METASTORE_URL", url)
    store = MetaStore(url)
    store.migrate()
    store.registry.register_topology(_topology(freshness=1))
    created = store.barriers.create("fresh", {"tsb.raw.events": 0}).created_at_ms
    store.table_states.record_written("fresh.clean", 1, 0, "clean")
    time.sleep(1.5)  # the 1 s target passes for the tables that have not committed barrier 1
    assert store.freshness.report("fresh", now=created + 5_000).missed == ["tsb.fresh.daily", "tsb.fresh.hourly"]
    found = freshness_misses("fresh", ["fresh.clean", "fresh.daily"])
    assert found["missed"] == ["tsb.fresh.daily"]
    assert found["message"].startswith("freshness target missed in topology 'fresh': tsb.fresh.daily: lag ")
    assert "tsb.fresh.clean" not in found["message"]
    none = freshness_misses("fresh", ["fresh.clean"])
    assert none["missed"] == [] and "no table of ['tsb.fresh.clean'] misses" in none["message"]
