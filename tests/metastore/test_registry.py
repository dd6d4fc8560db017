"""RegistryManager on its own core (FLIP-276 "MetaService" ``/register/*``, ``/unregister``)."""

from __future__ import annotations

import re

import pytest

from airflow_provider_tsb.caches import CACHES
from airflow_provider_tsb.exceptions import CycleError, DoubleWriterError, UnknownJobError, UnknownTableError
from airflow_provider_tsb.lineage import Job
from airflow_provider_tsb.metastore.registry import RegistryManager
from tests.metastore.conftest import CC, COUNTS, TOPOLOGY, WORDS


def test_reads_return_what_was_registered(registry: RegistryManager) -> None:
    assert registry.topologies() == [TOPOLOGY]
    job = registry.job("count_words")
    assert (job.topology, job.sources, job.sinks) == (TOPOLOGY, (WORDS,), (COUNTS,))
    assert [j.id for j in registry.jobs(TOPOLOGY)] == ["count_counts", "count_words"]
    assert [(t.name, t.kind, t.writer, t.readers) for t in registry.tables(TOPOLOGY)] == [
        (WORDS, "root", None, ("count_words",)),
        (CC, "intermediate", "count_counts", ()),
        (COUNTS, "intermediate", "count_words", ("count_counts",)),
    ]
    assert registry.writer_of(COUNTS) == "count_words" and registry.writer_of(WORDS) is None
    assert registry.job_io(TOPOLOGY) == {"count_words": ((WORDS,), (COUNTS,)), "count_counts": ((COUNTS,), (CC,))}
    assert set(registry.graph(TOPOLOGY).edges) == {
        (f"table:{WORDS}", "job:count_words"), ("job:count_words", f"table:{COUNTS}"),
        (f"table:{COUNTS}", "job:count_counts"), ("job:count_counts", f"table:{CC}"),
    }


def test_registration_refuses_double_writers_and_cycles(registry: RegistryManager) -> None:
    with pytest.raises(DoubleWriterError, match="count_words"):
        registry.register_job(TOPOLOGY, Job("rogue", "apps/rogue.py", (WORDS,), (COUNTS,)))
    registry.register_job(TOPOLOGY, Job("back", "apps/back.py", (CC,), ("tsb.wc.loop",)))
    with pytest.raises(CycleError):
        registry.register_source("count_words", "tsb.wc.loop")
    assert registry.job("count_words").sources == (WORDS,)
    assert registry.table("tsb.wc.nothing", required=False) is None
    with pytest.raises(UnknownTableError):
        registry.table("tsb.wc.nothing")


def test_register_source_and_sink_then_unregister(registry: RegistryManager) -> None:
    registry.create_job(TOPOLOGY, "audit", "apps/audit.py")
    registry.register_source("audit", CC)
    info = registry.register_sink("audit", "tsb.wc.audit")
    assert (info.sources, info.sinks) == ((CC,), ("tsb.wc.audit",))
    assert registry.table("tsb.wc.audit").writer == "audit"
    assert registry.unregister_job("audit") is True and registry.unregister_job("audit") is False
    with pytest.raises(UnknownJobError):
        registry.job("audit")
    assert registry.table("tsb.wc.audit").writer is None  # the table stays, without a writer


def test_registering_a_table_again_elsewhere_is_refused(registry: RegistryManager, tmp_path) -> None:
    """Issue 25 item 5: another location used to be ignored (the old one silently kept)."""
    from airflow_provider_tsb.exceptions import TableLocationConflictError
    from airflow_provider_tsb.lineage import Table

    registered = registry.table(COUNTS).location
    elsewhere = str(tmp_path / "elsewhere" / "counts")
    msg = re.escape(f"table '{COUNTS}' is registered at location '{registered}' and registered again at '{elsewhere}'")
    with pytest.raises(TableLocationConflictError, match=msg):
        registry.register_sink("count_words", COUNTS, location=elsewhere)
    with pytest.raises(TableLocationConflictError, match=msg):
        registry.register_table(TOPOLOGY, Table(COUNTS, "intermediate", elsewhere))
    assert registry.table(COUNTS).location == registered
    # the same location again (trailing slash, file:// URI) is the same registration
    assert registry.register_sink("count_words", COUNTS, location=registered + "/").sinks == (COUNTS,)
    same = registry.register_table(TOPOLOGY, Table(COUNTS, "intermediate", f"file://{registered}"))
    assert same.location == registered


@pytest.mark.parametrize("location", ["../../etc", "warehouse/tsb/wc/x", "/data/wh/../../etc", "s3://bucket/a/../b"])
def test_relative_or_dotdot_locations_are_refused(registry: RegistryManager, location: str) -> None:
    from airflow_provider_tsb.exceptions import InvalidLocationError
    from airflow_provider_tsb.lineage import Table

    msg = rf"table 'tsb\.wc\.x': location '{re.escape(location)}' (is relative|contains a '\.\.' segment)"
    with pytest.raises(InvalidLocationError, match=msg):
        registry.register_table(TOPOLOGY, Table("tsb.wc.x", "root", location))
    registry.create_job(TOPOLOGY, "writer_x")
    with pytest.raises(InvalidLocationError, match="give an absolute path"):
        registry.register_sink("writer_x", "tsb.wc.x", location=location)
    assert registry.table("tsb.wc.x", required=False) is None


def test_job_io_lists_a_job_without_sources_or_sinks(registry: RegistryManager) -> None:
    """One query with outer joins: a registered job that links no table is listed with empty tuples."""
    registry.register_job(TOPOLOGY, Job("idle_job", "apps/idle.py", (), ()))
    io = registry.job_io(TOPOLOGY)
    assert io["idle_job"] == ((), ()) and io["count_words"] == ((WORDS,), (COUNTS,))
    assert "idle_job" not in registry.job_io("another_topology")


def test_register_table_validates_like_the_rest_api(registry: RegistryManager, tmp_path) -> None:
    """Issue 57 item 7: the Python API accepted a location no Delta reader opens, an unknown kind,
    an unknown topology, and a root with no data in a live topology (whose every barrier
    generation then failed). Each is refused before anything is written, naming the field."""
    from airflow_provider_tsb.exceptions import InvalidLocationError, TopologyError
    from airflow_provider_tsb.lineage import Table
    from airflow_provider_tsb.metastore.barriers import BarrierManager

    fresh = str(tmp_path / "new_root")
    cases = [
        (TOPOLOGY, Table("tsb.wc.web", "root", "http://127.0.0.1/x"), InvalidLocationError,
         r"location 'http://127.0.0.1/x' has the scheme 'http', which no Delta reader opens"),
        (TOPOLOGY, Table("tsb.wc.bogus", "bogus", fresh), TopologyError, r"kind 'bogus' is not a table kind"),
        ("nowhere", Table("tsb.wc.lost", "root", fresh), TopologyError,
         r"topology 'nowhere' is not registered \(registered: \['" + TOPOLOGY + r"'\]\)"),
    ]
    for topology, table, error, message in cases:
        with pytest.raises(error, match=message):
            registry.register_table(topology, table)
    BarrierManager(registry._core).create(TOPOLOGY, {WORDS: 0})  # the topology is live now
    with pytest.raises(TopologyError, match=r"root table 'tsb.wc.late' would join topology .* with no Delta table"):
        registry.register_table(TOPOLOGY, Table("tsb.wc.late", "root", fresh))
    assert [registry.table(n, required=False) for n in ("tsb.wc.web", "tsb.wc.bogus", "tsb.wc.lost", "tsb.wc.late")] \
        == [None] * 4
    assert registry.topologies() == [TOPOLOGY]
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(fresh, pa.table({"id": [1]}))  # with its first version it may join
    assert registry.register_table(TOPOLOGY, Table("tsb.wc.late", "root", fresh)).kind == "root"


def test_register_table_keeps_to_the_configured_allowed_roots(tmp_path, monkeypatch) -> None:
    """Issue 57 item 7: ``register_table(location='/etc')`` was accepted from the Python API while
    REST refused it. With ``[tsb] allowed_location_roots`` set, the store of DAG and task code
    (``TsbMetastoreHook().get_conn()``) keeps to it as REST does; unset, trusted code may place
    tables anywhere (users' root tables live where their ingestion writes them)."""
    from airflow_provider_tsb.exceptions import InvalidLocationError, LocationNotAllowedError
    from airflow_provider_tsb.hooks import metastore as hooks
    from airflow_provider_tsb.lineage import Table
    from tests.support.orchestration import wordcount_topology

    warehouse = tmp_path / "warehouse"
    monkeypatch.setenv("TSB_METASTORE_URL", f"sqlite:///{tmp_path / 'tsb.db'}")
    monkeypatch.setenv("AIRFLOW__TSB__ALLOWED_LOCATION_ROOTS", f"{warehouse}, s3://lake/tables")
    CACHES.clear("hooks.metastores")
    store = hooks.TsbMetastoreHook().get_conn()
    store.migrate()
    store.registry.register_topology(wordcount_topology(str(warehouse)))
    for location in ("/etc", str(tmp_path / "elsewhere"), "s3://other/t", "s3://lake/tablesx/t"):
        with pytest.raises(LocationNotAllowedError, match=r"is not allowed: it is outside the allowed roots"):
            store.registry.register_table("wordcount", Table("tsb.wc.x", "root", location))
    with pytest.raises(InvalidLocationError, match="contains a '..' segment"):
        store.registry.register_table("wordcount", Table("tsb.wc.x", "root", f"{warehouse}/../elsewhere"))
    assert store.registry.table("tsb.wc.x", required=False) is None  # nothing written
    assert store.registry.register_table("wordcount", Table("tsb.wc.x", "root", "s3://lake/tables/x")).kind == "root"
    monkeypatch.delenv("AIRFLOW__TSB__ALLOWED_LOCATION_ROOTS")
    CACHES.clear("hooks.metastores")
    anywhere = hooks.TsbMetastoreHook().get_conn().registry
    assert anywhere.register_table("wordcount", Table("tsb.wc.y", "root", str(tmp_path / "lake" / "y"))).kind == "root"
