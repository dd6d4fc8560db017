"""Retention tiers of snapshot expiry (issue 13 item 2): the newest N barriers, one per hour for
H hours, one per day for D days, by barrier timestamp; ``tsb expire --dry-run``.

Real Delta tables and vacuum, the metastore on SQLite and PostgreSQL. The races of
apache/paimon#6978 and #5819 are in tests/maintenance/test_lease_expiry.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from airflow_provider_tsb.exceptions import ExpiredVersionError
from airflow_provider_tsb.maintenance.expiry import expire_snapshots
from airflow_provider_tsb.maintenance.retention import DAY_MS, HOUR_MS, RetentionPolicy
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.read.resolutions import to_arrow
from dev import lease_world as lw

T0 = 1_700_006_400_000  # 2023-11-15 00:00 UTC


def test_policy_keeps_newest_hourly_and_daily() -> None:
    # barriers 1..8 every 6 h over two days, then 9..14 every 20 min
    barriers = [(i + 1, T0 + i * 6 * HOUR_MS) for i in range(8)]
    barriers += [(9 + i, T0 + 2 * DAY_MS + i * 20 * 60_000) for i in range(6)]
    assert RetentionPolicy(keep_last=2).kept(barriers) == {13, 14}
    # hours of the last 2 hours by timestamp: 9-11 (00:00-00:40) and 12-14 (01:00-01:40)
    assert RetentionPolicy(keep_last=1, hourly_hours=2).kept(barriers) == {11, 14}
    # days of the last 2 days: day 1 (barriers 5-8) and day 2 (9-14)
    assert RetentionPolicy(keep_last=1, daily_days=2).kept(barriers) == {8, 14}
    assert RetentionPolicy(keep_last=1, daily_days=3).kept(barriers) == {4, 8, 14}
    assert RetentionPolicy().kept([]) == set()
    with pytest.raises(ValueError, match="keep_last must be an integer from 1"):
        RetentionPolicy(keep_last=0)
    with pytest.raises(ValueError, match="hourly_hours"):
        RetentionPolicy(hourly_hours=-1)
    assert RetentionPolicy.of({"keep_last": 3, "daily_days": 7}).describe() == (
        "the newest 3 WRITTEN barriers, one per day for 7 d")


@pytest.mark.slow
def test_tiers_on_real_tables_as_of_every_kept_barrier(store: MetaStore, tmp_path) -> None:
    locations = lw.build(store, str(tmp_path / "wh"))
    for i in range(8):
        lw.write_barrier(store, locations, ts_ms=T0 + i * 6 * HOUR_MS)
    for i in range(6):
        lw.write_barrier(store, locations, ts_ms=T0 + 2 * DAY_MS + i * 20 * 60_000)
    policy = RetentionPolicy(keep_last=1, hourly_hours=2, daily_days=2)
    result = expire_snapshots(store, lw.SNAP, policy)
    kept = {11, 14, 8}
    assert result["expired_barriers"] == sorted(set(range(1, 15)) - kept) and result["retention"] == policy.to_dict()
    for barrier in sorted(kept):  # AS OF works on every kept barrier, with the right rows
        assert lw.check_snap(to_arrow(store.resolution.resolve([lw.SNAP], as_of=barrier))[lw.SNAP], barrier)
    with pytest.raises(ExpiredVersionError, match=r"one per hour for 2 h, one per day for 2 d"):
        store.resolution.resolve([lw.SNAP], as_of=10)
    # a new barrier the next day: day 1 and the old hours age out, day 2's newest stays
    lw.write_barrier(store, locations, ts_ms=T0 + 3 * DAY_MS + HOUR_MS)
    result = expire_snapshots(store, lw.SNAP, policy)
    assert result["expired_barriers"] == [8, 11] and store.expiry.expired_barriers(lw.SNAP) == list(range(1, 14))
    assert lw.check_snap(to_arrow(store.resolution.resolve([lw.SNAP], as_of=14))[lw.SNAP], 14)


@pytest.mark.slow
def test_tsb_expire_dry_run_shows_what_would_go(store: MetaStore, metastore_url: str, tmp_path) -> None:
    locations = lw.build(store, str(tmp_path / "wh"))
    for _ in range(5):
        lw.write_barrier(store, locations)
    leased = store.resolution.resolve([lw.SNAP], as_of=2, lease_seconds=120)
    cmd = [sys.executable, "-m", "airflow_provider_tsb", "expire", "--topology", lw.TOPOLOGY, "--keep-last", "2",
           "--url", metastore_url]
    env = dict(os.environ, PYTHONPATH=lw.REPO)
    dry = subprocess.run([*cmd, "--dry-run"], capture_output=True, text=True, env=env, cwd=lw.REPO, timeout=120)
    assert dry.returncode == 0, dry.stderr
    by_table = {r["table"]: r for r in json.loads(dry.stdout)}
    assert by_table[lw.SNAP]["dry_run"] and by_table[lw.SNAP]["expired_barriers"] == [1, 3]  # 2 is leased
    assert by_table[lw.SNAP]["removed_files"] > 0
    assert store.expiry.expired_barriers(lw.SNAP) == []  # nothing marked
    assert lw.check_snap(to_arrow(store.resolution.resolve([lw.SNAP], as_of=1))[lw.SNAP], 1)  # nothing deleted
    real = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=lw.REPO, timeout=120)
    assert real.returncode == 0, real.stderr
    assert store.expiry.expired_barriers(lw.SNAP) == [1, 3]
    assert lw.check_snap(to_arrow(leased)[lw.SNAP], 2)
    bad = subprocess.run([*cmd[:-2], "--keep-last", "0"], capture_output=True, text=True, env=env, cwd=lw.REPO)
    assert bad.returncode == 2 and "--keep-last" in bad.stderr
