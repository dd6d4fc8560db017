"""What the Delta Sharing server keeps per process (``api/sharing/cache.py``), on SQLite and
PostgreSQL with real Delta tables.

Each test fails without the mechanism it names: a kept share that missed a registration or a
first WRITTEN barrier, a lease reused past its window or outliving the URLs it covers, a
READ_COMMITTED answer kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest
from sqlalchemy import event

from airflow_provider_tsb.api.sharing import model as sm
from airflow_provider_tsb.api.sharing.cache import REUSE_FRACTION, SharingCache
from airflow_provider_tsb.exceptions import UnknownBarrierError
from airflow_provider_tsb.metastore.records import now_ms
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.topology import Topology
from tests.support.metaservice import write
from tests.support.sharing import CC, TOPOLOGY, WC, WORDS, build_wordcount


@contextmanager
def statements(store: MetaStore) -> Iterator[list[str]]:
    """The SQL statements the store's engine runs inside the block."""
    seen: list[str] = []

    def record(_conn, _cursor, statement, *_args) -> None:  # type: ignore[no-untyped-def]
        seen.append(statement)

    event.listen(store.core.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(store.core.engine, "before_cursor_execute", record)


def selects(sql: list[str]) -> list[str]:
    return [q for q in sql if q.lstrip().upper().startswith("SELECT")]


def _names(tables: list[sm.SharedTable]) -> list[str]:
    return [t.full_name for t in tables]


def test_a_kept_share_costs_one_read_and_follows_registrations_and_first_writes(
    store: MetaStore, tmp_path: Path
) -> None:
    build_wordcount(store, tmp_path / "wh", barriers=1, committed=0)  # count_of_counts: nothing WRITTEN
    cache = SharingCache(store)
    share, tables = cache.share_and_tables(TOPOLOGY)
    assert share.topologies == (TOPOLOGY,) and _names(tables) == [WC, WORDS]  # sorted by schema, name
    with statements(store) as sql:
        assert _names(cache.share_and_tables(TOPOLOGY)[1]) == [WC, WORDS]
    # the registry's version, and one probe for the topology whose tables were not seen WRITTEN yet
    assert len(selects(sql)) == 2, sql

    store.table_states.record_written(CC, 1, 0, "cc_job")  # count_of_counts' first barrier
    assert _names(cache.share_and_tables(TOPOLOGY)[1]) == [CC, WC, WORDS]
    with statements(store) as sql:
        cache.share_and_tables(TOPOLOGY)
    assert len(selects(sql)) == 1, sql  # every table seen WRITTEN: the registry's version only

    # a registration: a second topology reading the same root joins the share's barrier domain
    other = Topology("wordlen", warehouse=str(tmp_path / "wh"))
    other.root_table("wc.words")
    other.job("wl_job", "wl.py", sources=["wc.words"], sinks=["wl.lengths"])
    store.registry.register_topology(other)
    lengths = store.registry.table("tsb.wl.lengths").location
    barrier = store.barriers.create("wordlen", {WORDS: 0}, run_key="wl1").barrier
    write(lengths, pa.schema([("n", pa.int64())]), [(3,)], "overwrite", barrier, "wl_job")
    store.table_states.record_written("tsb.wl.lengths", barrier, 0, "wl_job")
    share, tables = cache.share_and_tables(TOPOLOGY)
    assert set(share.topologies) == {TOPOLOGY, "wordlen"}
    assert _names(tables) == [CC, WC, WORDS, "tsb.wl.lengths"]
    assert [s.name for s in cache.shares()] == [TOPOLOGY, "wordlen"]
    with pytest.raises(sm.UnknownShareError, match="'nope'"):
        cache.share_and_tables("nope")


class Seconds:
    def __init__(self) -> None:
        self.s = 1000.0

    def __call__(self) -> float:
        return self.s


def test_listings_are_checked_once_per_check_seconds(store: MetaStore, tmp_path: Path) -> None:
    build_wordcount(store, tmp_path / "wh", barriers=1, committed=0)  # count_of_counts: nothing WRITTEN
    monotonic = Seconds()
    cache = SharingCache(store, check_seconds=1.0, monotonic=monotonic)
    assert _names(cache.share_and_tables(TOPOLOGY)[1]) == [WC, WORDS]
    assert [s.name for s in cache.shares()] == [TOPOLOGY]
    store.table_states.record_written(CC, 1, 0, "cc_job")  # count_of_counts' first barrier
    monotonic.s += 0.9
    with statements(store) as sql:  # within check_seconds: the kept listings, no read at all
        assert _names(cache.share_and_tables(TOPOLOGY)[1]) == [WC, WORDS]
        assert [s.name for s in cache.shares()] == [TOPOLOGY]
    assert sql == []
    with pytest.raises(sm.UnknownShareError, match="'nope'"):  # an unknown name is never kept
        cache.share_and_tables("nope")

    monotonic.s += 0.2  # past it: checked again, the first WRITTEN barrier seen
    with statements(store) as sql:
        assert _names(cache.share_and_tables(TOPOLOGY)[1]) == [CC, WC, WORDS]
    assert len(selects(sql)) == 2, sql  # the registry's version, one probe


class Clock:
    def __init__(self) -> None:
        self.ms = now_ms()

    def __call__(self) -> int:
        return self.ms


def test_a_lease_is_reused_only_while_it_outlives_the_urls_it_covers(store: MetaStore, tmp_path: Path) -> None:
    build_wordcount(store, tmp_path / "wh")
    clock = Clock()
    cache = SharingCache(store, clock=clock)
    share, tables = cache.share_and_tables(TOPOLOGY)
    wc = sm.find_table(tables, "wc", "word_count")
    first = cache.leased(share, wc, 2, 100)
    assert first.lease_id is not None and first.tables[WC].version == 1
    assert store.leases.leased_versions(WC) == {1}

    clock.ms += int(100_000 * REUSE_FRACTION) - 1_000  # within the window: the same lease, no write
    with statements(store) as sql:
        again = cache.leased(share, wc, 2, 100)
    assert again.lease_id == first.lease_id and again.lease_expires_at_ms == first.lease_expires_at_ms
    assert sql == []

    clock.ms += 2_000  # past it: URLs signed now would outlive that lease by more than the window
    renewed = cache.leased(share, wc, 2, 100)
    assert renewed.lease_id != first.lease_id

    shorter = cache.leased(share, wc, 2, 10)  # a shorter URL life: never the longer lease
    assert shorter.lease_id != renewed.lease_id
    assert shorter.lease_expires_at_ms is not None and shorter.lease_expires_at_ms - now_ms() <= 10_000

    for _ in range(2):  # a refusal is never kept
        with pytest.raises(UnknownBarrierError, match="barrier 99"):
            cache.leased(share, wc, 99, 100)


def test_read_committed_answers_are_not_kept(store: MetaStore, tmp_path: Path) -> None:
    build_wordcount(store, tmp_path / "wh")
    cache = SharingCache(store)
    share, tables = cache.share_and_tables(f"{TOPOLOGY}{sm.RC_SUFFIX}")
    words = sm.find_table(tables, "wc", "words")
    first = cache.leased(share, words, 4, 100)  # barrier 4: PRECOMMIT, the share's newest
    second = cache.leased(share, words, 4, 100)
    assert first.lease_id != second.lease_id
    assert WORDS in first.tables
