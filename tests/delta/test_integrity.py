"""Delta logs checked before they are served (issue 25 item 4), on SQLite and PostgreSQL.

Found by a probe: a sink's commit with one ``remove`` action dropped (still valid JSON) was served
at REPEATABLE_READ with extra rows and no error. Every barrier commit now records the live files
and bytes of its version (commit metadata and the metastore's WRITTEN row); the readers and
``tsb check --integrity`` compare them with what the Delta log gives. Real Delta tables committed
through the project's commit path (tests/support/integrity.py), real log files edited.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from airflow_provider_tsb.delta.integrity import DIGEST_KEY, FILES_KEY, figures_of, recorded_figures
from airflow_provider_tsb.delta.log import commit_info, open_table
from airflow_provider_tsb.exceptions import DeltaLogError, DeltaLogIntegrityError
from airflow_provider_tsb.maintenance.integrity import check_integrity
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.read.resolutions import to_arrow
from tests.support import integrity as ig

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(store: MetaStore, barrier: int | None = None):  # noqa: ANN202 - a pyarrow.Table
    res = store.resolution.resolve([ig.SINK], "repeatable-read", as_of=barrier)
    return to_arrow(res)[ig.SINK]


def _cli_check(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow_provider_tsb", "check", "--integrity", "--topology", ig.TOPOLOGY, "--url", url],
        capture_output=True, text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO), timeout=120,
    )


def test_every_barrier_commit_records_its_live_files(store: MetaStore, tmp_path) -> None:
    loc = ig.build(store, str(tmp_path / "wh"))
    for barrier, files in ((1, 1), (2, 2), (3, 3)):
        state = store.table_states.get(ig.SINK, barrier)
        assert state is not None and state.file_count == files
        found = figures_of(open_table(loc[ig.SINK], state.version))
        assert found.as_tuple() == (files, state.size_bytes) and state.size_bytes > 0
        info = commit_info(loc[ig.SINK], state.version) or {}
        assert int(info[FILES_KEY]) == files  # the commit's own record (the metastore copies it)
        # the digest the commit computed from its base's and its own files is the log's
        assert found.digest == int(info[DIGEST_KEY], 16) == recorded_figures(info).digest
        res = store.resolution.resolve([ig.SINK], as_of=barrier)
        assert (res.tables[ig.SINK].file_count, res.tables[ig.SINK].size_bytes) == (files, state.size_bytes)
        assert res.to_dict()["tables"][ig.SINK]["file_count"] == files
        table = to_arrow(res)[ig.SINK]
        assert table.num_rows == ig.ROWS[barrier] and len(set(table.column("k").to_pylist())) == ig.ROWS[barrier]


@pytest.mark.slow  # runs `tsb check --integrity` processes
@pytest.mark.parametrize("kind", ["drop_remove", "drop_add", "duplicate"])
def test_an_edited_log_is_refused_at_read_and_reported(kind: str, store: MetaStore, metastore_url: str,
                                                       tmp_path) -> None:
    loc = ig.build(store, str(tmp_path / "wh"))
    ok = _cli_check(metastore_url)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "3 versions verified" in ok.stdout and "0 mismatches" in ok.stdout
    barrier, version = ig.tamper(loc[ig.SINK], kind)
    with pytest.raises(DeltaLogIntegrityError) as err:
        _read(store, barrier)
    message = str(err.value)
    assert f"table '{ig.SINK}', barrier {barrier}, Delta version {version}" in message
    assert "tsb check --integrity" in message and "Restore the table's _delta_log" in message
    expected = store.table_states.get(ig.SINK, barrier)
    assert err.value.expected == (expected.file_count, expected.size_bytes) and err.value.found != err.value.expected
    if kind == "drop_remove":  # what the probe saw served: file A live again, keys 0-9 twice
        assert err.value.found[0] == expected.file_count + 1
    # a lost remove at version 1 stays in every later version: barrier 3's version is wrong too
    broken = [(3, 2), (2, 1)] if kind == "drop_remove" else [(barrier, version)]
    report = check_integrity(store, ig.TOPOLOGY)
    assert [(f.table, f.barrier, f.version, f.problem) for f in report.findings or []] == [
        (ig.SINK, b, v, "figures") for b, v in broken]
    cli = _cli_check(metastore_url)
    assert cli.returncode == 1, cli.stdout + cli.stderr
    line = f"{ig.SINK} barrier {barrier} (Delta version {version}): figures: expected {expected.file_count} files"
    assert line in cli.stdout and f"{len(broken)} mismatches" in cli.stdout


@pytest.mark.slow  # runs `tsb check --integrity` processes
@pytest.mark.parametrize("kind", ["swap_same_size", "same_size_copy"])
def test_an_edit_that_keeps_the_counts_and_bytes_is_refused(kind: str, store: MetaStore, metastore_url: str,
                                                           tmp_path) -> None:
    """Issue 57 item 5: two same-size files swapped in a merge commit, or an ``add`` pointing to
    a same-size copy of another file, kept ``(files, bytes)`` and were served (``0 mismatches``)."""
    loc = ig.build(store, str(tmp_path / "wh"))
    barrier, version = ig.tamper(loc[ig.SINK], kind)
    with pytest.raises(DeltaLogIntegrityError, match=rf"barrier {barrier}, Delta version {version}: .*digest") as err:
        _read(store, barrier)
    assert err.value.found == err.value.expected  # count and bytes agree: only the digest tells
    broken = [(3, 2), (2, 1)] if kind == "swap_same_size" else [(3, 2)]  # a swap carries over to later versions
    report = check_integrity(store, ig.TOPOLOGY)
    assert [(f.table, f.barrier, f.version, f.problem) for f in report.findings or []] == [
        (ig.SINK, b, v, "figures") for b, v in broken]
    cli = _cli_check(metastore_url)
    assert cli.returncode == 1 and f"{len(broken)} mismatches" in cli.stdout, cli.stdout + cli.stderr


@pytest.mark.slow  # runs `tsb check --integrity` processes
def test_a_deleted_data_file_is_corruption_not_expiry(store: MetaStore, metastore_url: str, tmp_path) -> None:
    """Issue 57 item 5: a data file deleted by hand was blamed on snapshot expiry (which never
    ran) and ``tsb check --integrity`` said 0 mismatches. Expiry never deletes a file the newest
    version references, so such a file's absence is corruption."""
    from airflow_provider_tsb.exceptions import ExpiredVersionError

    loc = ig.build(store, str(tmp_path / "wh"))
    b_file = next(p for p in ig.live_paths(loc[ig.SINK]) if p.endswith("/b.parquet"))
    os.remove(os.path.join(loc[ig.SINK], b_file))
    ig.fresh_process()
    said = (rf"barrier 2, Delta version 1: data file '{b_file}' is missing, and it is live at the newest "
            r"version 2, so snapshot expiry \(vacuum\) did not remove it")
    with pytest.raises(DeltaLogIntegrityError, match=said) as err:
        _read(store, 2)
    assert not isinstance(err.value, ExpiredVersionError)
    report = check_integrity(store, ig.TOPOLOGY)
    assert [(f.barrier, f.version, f.problem) for f in report.findings or []] == [(3, 2, "missing"), (2, 1, "missing")]
    cli = _cli_check(metastore_url)
    assert cli.returncode == 1 and "missing" in cli.stdout and "2 mismatches" in cli.stdout, cli.stdout + cli.stderr


def test_a_long_running_reader_verifies_a_reloaded_snapshot_again(store: MetaStore, tmp_path) -> None:
    """Issue 57 item 5: a reader that verified a version once served an edit made afterwards,
    once its snapshot was loaded again (the memo was per process, not per loaded snapshot)."""
    loc = ig.build(store, str(tmp_path / "wh"))
    assert _read(store, 2).num_rows == ig.ROWS[2]  # verified and served
    ig.tamper(loc[ig.SINK], "drop_remove", new_process=False)  # the snapshot cache lets it go
    with pytest.raises(DeltaLogIntegrityError, match=r"barrier 2, Delta version 1: the Delta log gives 3 files"):
        _read(store, 2)


@pytest.mark.slow
def test_a_truncated_commit_keeps_its_clear_error_and_is_reported(store: MetaStore, metastore_url: str,
                                                                 tmp_path) -> None:
    loc = ig.build(store, str(tmp_path / "wh"))
    barrier, version = ig.tamper(loc[ig.SINK], "truncate")
    with pytest.raises(DeltaLogError, match=r"cannot load Delta table .* at version 2"):
        _read(store, barrier)
    assert _read(store, 2).num_rows == ig.ROWS[2]  # the versions before it are intact
    cli = _cli_check(metastore_url)
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert f"{ig.SINK} barrier {barrier} (Delta version {version}): unreadable" in cli.stdout


def test_the_commit_record_is_verified_without_the_metastore(store: MetaStore, tmp_path) -> None:
    """A reader given versions without figures (READ_UNCOMMITTED, an older api-server) checks the
    commit's own ``tsb.files`` / ``tsb.bytes``."""
    from airflow_provider_tsb.delta.integrity import verify_version

    loc = ig.build(store, str(tmp_path / "wh"))
    assert verify_version(loc[ig.SINK], 1, None, name=ig.SINK, barrier=2)
    ig.tamper(loc[ig.SINK], "drop_remove")
    with pytest.raises(DeltaLogIntegrityError, match=r"barrier 2, Delta version 1: the Delta log gives 3 files"):
        verify_version(loc[ig.SINK], 1, None, name=ig.SINK, barrier=2)
    res = store.resolution.resolve([ig.SINK], "read-uncommitted")  # the latest version, no figures attached
    assert res.tables[ig.SINK].file_count is None and res.tables[ig.SINK].version == 2
    # the edit of version 1 carries over to version 2: its commit recorded 3 files, the log gives 4
    with pytest.raises(DeltaLogIntegrityError, match=r"barrier 3, Delta version 2: the Delta log gives 4 files"):
        to_arrow(res)


@pytest.mark.slow
def test_check_integrity_json_and_bad_arguments(store: MetaStore, metastore_url: str, tmp_path) -> None:
    ig.build(store, str(tmp_path / "wh"))
    out = subprocess.run(
        [sys.executable, "-m", "airflow_provider_tsb", "check", "--integrity", "--topology", ig.TOPOLOGY,
         "--url", metastore_url, "--json"],
        capture_output=True, text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO), timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"topology": ig.TOPOLOGY, "checked": 3, "unrecorded": 1, "findings": []}
    with pytest.raises(ValueError, match="topology 'nope' has no registered tables"):
        check_integrity(store, "nope")


def test_root_versions_named_by_barriers_are_recorded_and_verified(store: MetaStore, metastore_url: str, tmp_path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Root tables are appended by ingestion (``write_deltalake``, no figures in its commits): the
    barrier's generation records the figures of the root versions it names."""
    import pyarrow as pa

    from airflow_provider_tsb.delta.roots import append_rows
    from airflow_provider_tsb.hooks.barrier import TsbBarrierHook
    from airflow_provider_tsb.topology import Topology

    conn = {"conn_type": "tsb", "extra": {"sqlalchemy_url": metastore_url}}
    monkeypatch.setenv("AIRFLOW_CONN_TSB_DEFAULT", json.dumps(conn))
    topo = Topology("roots_ig", warehouse=str(tmp_path / "wh"))
    topo.root_table("tsb.rig.events")
    location = topo.location("tsb.rig.events")
    for barrier in (1, 2):
        append_rows(location, pa.table({"e": list(range(barrier * 10))}))
        assert TsbBarrierHook(topo).generate(f"run/{barrier}").barrier == barrier
        state = store.table_states.get("tsb.rig.events", barrier)
        assert state is not None and state.file_count == barrier and state.size_bytes > 0
    assert to_arrow(store.resolution.resolve(["tsb.rig.events"], as_of=2))["tsb.rig.events"].num_rows == 30
    path = ig.commit_file(location, 1)
    lines = open(path).read().splitlines()
    open(path, "w").write("\n".join(line for line in lines if not line.startswith('{"add"')) + "\n")
    ig.fresh_process()
    msg = r"table 'tsb.rig.events', barrier 2, Delta version 1: the Delta log gives 1 files, \d+ bytes but .* 2 files"
    with pytest.raises(DeltaLogIntegrityError, match=msg):
        to_arrow(store.resolution.resolve(["tsb.rig.events"], as_of=2))
    assert to_arrow(store.resolution.resolve(["tsb.rig.events"], as_of=1))["tsb.rig.events"].num_rows == 10
    report = check_integrity(store, "roots_ig")
    assert [(f.barrier, f.version, f.problem) for f in report.findings or []] == [(2, 1, "figures")]


def test_a_commit_on_a_tampered_version_does_not_take_its_files_as_truth(store: MetaStore, tmp_path) -> None:
    """A barrier committed on top of a version that lost a ``remove`` records the figures its
    base's own commit recorded plus its own files, not a count of the tampered log: the extra
    live file of the base stays a mismatch in the new version too, and its read is refused."""
    loc = ig.build(store, str(tmp_path / "wh"))
    ig.tamper(loc[ig.SINK], "drop_remove")  # version 1 (barrier 2): file A live again
    store.barriers.create(ig.TOPOLOGY, {ig.EVENTS: 0})
    version = ig.commit_next(store, loc[ig.SINK], 4, "d", range(20, 25))
    recorded = commit_info(loc[ig.SINK], version) or {}
    counted = figures_of(open_table(loc[ig.SINK], version))
    assert int(recorded[FILES_KEY]) == 4 and counted.files == 5  # A2, B, C, D (+ A, wrongly live)
    with pytest.raises(DeltaLogIntegrityError, match=rf"barrier 4, Delta version {version}"):
        _read(store, 4)
