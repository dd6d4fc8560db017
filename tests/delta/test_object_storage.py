"""Tables on S3 through delta-rs: storage options from an Airflow ``aws`` connection, against a
local S3-compatible server (moto's server mode): a root table appended, a barrier generated, a
sink commit made by the commit protocol, reads AS OF a barrier, concurrent commits kept."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_tsb.delta import storage
from airflow_provider_tsb.delta.storage import storage_options_from_connection
from airflow_provider_tsb.read.resolutions import to_arrow

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A moto S3 server with a bucket, and the delta-rs options of an ``aws`` connection to it."""
    from tests.support.s3_server import start_s3_server

    server = start_s3_server(tmp_path_factory.mktemp("s3"))
    conn = SimpleNamespace(conn_type="aws", login="testing", password="testing", host=None, extra_dejson={
        "region_name": "us-east-1", "endpoint_url": server.endpoint})
    options = storage_options_from_connection(conn)
    storage.configure(options)
    try:
        import pyarrow.fs as pafs

        pafs.S3FileSystem(access_key="testing", secret_key="testing", region="us-east-1",
                          endpoint_override=server.endpoint.split("://")[1], scheme="http",
                          allow_bucket_creation=True).create_dir("tsb-test")  # the bucket
        yield options
    finally:
        storage.configure(None)
        server.stop()


def stage_file(location: str, relative: str, table: pa.Table) -> object:
    """Write a Parquet file under the table root as an executor would; its StagedFile."""
    from airflow_provider_tsb.delta.commit import StagedFile
    from airflow_provider_tsb.delta.log import filesystem
    from airflow_provider_tsb.delta.stats import footer_stats

    fs, root = filesystem(location)
    path = f"{root}/{relative}"
    pq.write_table(table, path, filesystem=fs)
    rows, stats = footer_stats(fs, path)
    return StagedFile(relative, fs.get_file_info(path).size, int(time.time() * 1000), rows, stats)


def test_a_barrier_round_trip_on_s3(s3: dict[str, str], tmp_path: Path) -> None:
    from deltalake import Schema as DeltaSchema

    from airflow_provider_tsb.consistency import ReadOptions
    from airflow_provider_tsb.delta import version_of_barrier
    from airflow_provider_tsb.delta.commit import commit_barrier_files
    from airflow_provider_tsb.delta.conventions import BarrierTag
    from airflow_provider_tsb.hooks.barrier import read_root_versions
    from airflow_provider_tsb.metastore.store import MetaStore
    from airflow_provider_tsb.root_tables import append_to_root
    from airflow_provider_tsb.topology import Topology

    warehouse = f"s3://tsb-test/{uuid.uuid4().hex[:8]}"
    topo = Topology("wc", warehouse=warehouse)
    topo.root_table("raw.words")
    topo.job("counts", "/apps/counts.py", sources=["raw.words"], sinks=["wc.counts"])
    root, sink = topo.location("raw.words"), topo.location("wc.counts")
    assert root.startswith("s3://tsb-test/")
    store = MetaStore(f"sqlite:///{tmp_path / 'tsb.db'}")
    store.migrate()
    store.registry.register_topology(topo)
    job = topo.jobs["counts"]
    store.registry.register_job(topo.name, job, {n: topo.tables[n] for n in (*job.sources, *job.sinks)},
                                warehouse=warehouse)

    schema = DeltaSchema.from_arrow(pa.schema([("word", pa.string()), ("cnt", pa.int64())]))
    expected = {}
    for barrier, words in ((1, ["to", "be", "or"]), (2, ["not", "to", "be"])):
        assert append_to_root(root, pa.table({"word": words}), run_key=f"d{barrier}").appended
        info = store.barriers.create(topo.name, read_root_versions(topo))
        assert info.barrier == barrier and info.root_versions == {"tsb.raw.words": barrier - 1}
        seen = [w for b in range(1, barrier + 1) for w in ((["to", "be", "or"], ["not", "to", "be"])[b - 1])]
        counts = pa.table({"word": sorted(set(seen)), "cnt": [seen.count(w) for w in sorted(set(seen))]})
        staged = stage_file(sink, f"tsb_staging/counts/0/{barrier}/a/part-0.parquet", counts)
        outcome = commit_barrier_files(sink, [staged], tag=BarrierTag(barrier, "counts", {"tsb.raw.words": 0}),
                                       mode="overwrite", schema=schema)
        assert outcome.committed and outcome.version == barrier - 1
        store.table_states.record_written("tsb.wc.counts", barrier, outcome.version, "counts")
        expected[barrier] = dict(zip(counts.column("word").to_pylist(), counts.column("cnt").to_pylist(),
                                     strict=True))
    # the replay of a committed barrier is discarded (txn in the S3 log)
    again = commit_barrier_files(sink, [], tag=BarrierTag(2, "counts"), mode="overwrite", schema=schema)
    assert not again.committed and again.version == 1
    assert version_of_barrier(sink, 1) == 0 and version_of_barrier(sink, 2) == 1

    for barrier in (1, 2):
        tables = to_arrow(store.resolution.resolve(["tsb.wc.counts", "tsb.raw.words"], ReadOptions(as_of=barrier)))
        counts = tables["tsb.wc.counts"]
        assert dict(zip(counts.column("word").to_pylist(), counts.column("cnt").to_pylist(), strict=True)) \
            == expected[barrier]
        assert tables["tsb.raw.words"].num_rows == 3 * barrier == sum(expected[barrier].values())


def test_two_writers_racing_for_one_version_keep_both_commits(s3: dict[str, str]) -> None:
    """delta-rs writes S3 commit files with a conditional put: the loser retries on the next
    version instead of overwriting the winner's commit (the atomicity Delta needs)."""
    from deltalake import CommitProperties, DeltaTable, write_deltalake

    location = f"s3://tsb-test/race-{uuid.uuid4().hex[:8]}"
    write_deltalake(location, pa.table({"a": [1]}), storage_options=s3)
    first, second = DeltaTable(location, storage_options=s3), DeltaTable(location, storage_options=s3)
    for table, who in ((first, "first"), (second, "second")):  # both from version 0
        table.create_write_transaction([], "append", table.schema(),
                                       commit_properties=CommitProperties(custom_metadata={"who": who}))
    history = DeltaTable(location, storage_options=s3).history()
    assert sorted(h.get("who") for h in history if h.get("who")) == ["first", "second"]
    assert DeltaTable(location, storage_options=s3).version() == 2


def test_expiry_cleans_up_a_log_on_s3(s3: dict[str, str], tmp_path: Path) -> None:
    """Snapshot expiry's metadata cleanup lists and deletes through the table's object store: the
    commits below the checkpoint before the oldest kept version go, the kept barriers read right."""
    from deltalake import DeltaTable
    from deltalake import Schema as DeltaSchema

    from airflow_provider_tsb.delta import version_of_barrier
    from airflow_provider_tsb.delta.commit import commit_barrier_files
    from airflow_provider_tsb.delta.conventions import BarrierTag
    from airflow_provider_tsb.delta.log_cleanup import list_log, log_start
    from airflow_provider_tsb.maintenance.expiry import expire_snapshots
    from airflow_provider_tsb.metastore.store import MetaStore
    from airflow_provider_tsb.root_tables import append_to_root
    from airflow_provider_tsb.topology import Topology

    warehouse = f"s3://tsb-test/{uuid.uuid4().hex[:8]}"
    topo = Topology("wc", warehouse=warehouse)
    topo.root_table("raw.words")
    topo.job("counts", "/apps/counts.py", sources=["raw.words"], sinks=["wc.counts"])
    root, sink = topo.location("raw.words"), topo.location("wc.counts")
    store = MetaStore(f"sqlite:///{tmp_path / 'tsb.db'}")
    store.migrate()
    store.registry.register_topology(topo)
    schema = DeltaSchema.from_arrow(pa.schema([("word", pa.string()), ("cnt", pa.int64())]))
    for barrier in range(1, 7):
        append_to_root(root, pa.table({"word": [f"w{barrier}"]}), run_key=f"d{barrier}")
        assert store.barriers.create(topo.name, {"tsb.raw.words": barrier - 1}).barrier == barrier
        rows = pa.table({"word": [f"w{barrier}"], "cnt": pa.array([barrier], pa.int64())})
        staged = stage_file(sink, f"tsb_staging/counts/0/{barrier}/a/part-0.parquet", rows)
        tag = BarrierTag(barrier, "counts", {"tsb.raw.words": barrier - 1})
        outcome = commit_barrier_files(sink, [staged], tag=tag, mode="overwrite", schema=schema)
        store.table_states.record_written("tsb.wc.counts", barrier, outcome.version, "counts")
        if barrier == 4:
            DeltaTable(sink, storage_options=s3).create_checkpoint()  # at version 3
    result = expire_snapshots(store, "tsb.wc.counts", 2)  # keeps versions 4 and 5
    assert result["log_start"] == 3 and result["removed_log_files"] == 3, result
    assert sorted(list_log(sink).commits) == [3, 4, 5] and log_start(sink) == 3
    assert version_of_barrier(sink, 6) == 5 and version_of_barrier(sink, 2) is None
    for barrier in (5, 6):
        counts = to_arrow(store.resolution.resolve(["tsb.wc.counts"], as_of=barrier))["tsb.wc.counts"]
        assert counts.column("cnt").to_pylist() == [barrier]
    assert DeltaTable(sink, storage_options=s3).version() == 5


def test_connection_types_map_to_delta_rs_options() -> None:
    def conn(kind: str, login: str | None = None, password: str | None = None, host: str | None = None,
             **extra: object) -> SimpleNamespace:
        return SimpleNamespace(conn_type=kind, login=login, password=password, host=host, extra_dejson=extra)

    assert storage_options_from_connection(conn("wasb", "acct", "key==")) == {
        "AZURE_STORAGE_ACCOUNT_NAME": "acct", "AZURE_STORAGE_ACCOUNT_KEY": "key=="}
    assert storage_options_from_connection(conn("adls", "client", "secret", host="acct.dfs.core.windows.net",
                                                tenant_id="t1")) == {
        "AZURE_TENANT_ID": "t1", "AZURE_CLIENT_ID": "client", "AZURE_CLIENT_SECRET": "secret",
        "AZURE_STORAGE_ACCOUNT_NAME": "acct"}
    assert storage_options_from_connection(conn("google_cloud_platform", key_path="/keys/sa.json")) == {
        "GOOGLE_SERVICE_ACCOUNT": "/keys/sa.json"}
    keyfile = {"type": "service_account", "project_id": "p"}
    assert json.loads(storage_options_from_connection(conn("gcp", keyfile_dict=keyfile))[
        "GOOGLE_SERVICE_ACCOUNT_KEY"]) == keyfile
    assert storage_options_from_connection(conn("aws", extra__aws__region_name="eu-west-1",
                                                storage_options={"AWS_S3_LOCKING_PROVIDER": "dynamodb"})) == {
        "AWS_REGION": "eu-west-1", "AWS_S3_LOCKING_PROVIDER": "dynamodb"}
    with pytest.raises(ValueError, match="connection type 'postgres' gives no Delta storage options"):
        storage_options_from_connection(conn("postgres", "u", "p"))
    assert storage.storage_options("/local/table") is None
