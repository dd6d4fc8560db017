"""The flat MetaStore methods of before the managers: one release of delegates that warn and
forward (metastore/compat.py), and the records' deprecated reading methods."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_tsb.lineage import Table
from airflow_provider_tsb.metastore.compat import (
    FLAT_METHODS,
    FlatMethodDeprecationWarning,
    RecordReadDeprecationWarning,
)
from airflow_provider_tsb.metastore.records import Resolution
from airflow_provider_tsb.metastore.store import MetaStore
from tests.metastore.conftest import WORDS


@pytest.fixture
def store(tmp_path: Path) -> MetaStore:
    store = MetaStore(f"sqlite:///{tmp_path / 'm.db'}")
    store.migrate()
    store.registry.create_topology("wc")
    store.registry.register_table("wc", Table(WORDS, "root"), str(tmp_path))
    return store


def test_every_flat_method_names_a_method_of_its_manager(store: MetaStore) -> None:
    assert len(FLAT_METHODS) == 66  # every public method MetaStore inherited before the managers
    for name, manager in FLAT_METHODS.items():
        assert callable(getattr(getattr(store, manager), name)), name
        assert name in dir(store)


def test_a_flat_method_warns_and_forwards(store: MetaStore) -> None:
    flat = "create_barrier"  # by name: tests/test_architecture.py checks the sources for flat calls
    with pytest.warns(FlatMethodDeprecationWarning, match=r"store\.barriers\.create_barrier\(\.\.\.\)") as seen:
        barrier = getattr(store, flat)("wc", {WORDS: 2})
    assert seen[0].filename == __file__  # the warning points at the caller
    assert store.barriers.latest_barrier("wc") == barrier and barrier.root_versions == {WORDS: 2}
    manager = store.barriers  # called like the flat method it shares its name with
    with pytest.warns(FlatMethodDeprecationWarning, match=r"store\.barriers\.barriers"):
        assert [b.barrier for b in manager("wc")] == [1]
    with pytest.raises(AttributeError):
        getattr(store, "no_such_method")  # noqa: B009


def test_record_reading_methods_warn_and_forward(tmp_path: Path) -> None:
    empty = Resolution.from_dict({"level": "REPEATABLE_READ", "barrier": 1, "tables": {}})
    with pytest.warns(RecordReadDeprecationWarning, match=r"read\.resolutions\.to_arrow"):
        assert empty.to_arrow() == {}
