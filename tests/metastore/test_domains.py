"""DomainManager on its own core: topologies sharing a root table share barrier ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_tsb.exceptions import TopologyError
from airflow_provider_tsb.lineage import Job, Table
from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.domains import DomainManager
from airflow_provider_tsb.metastore.registry import RegistryManager
from tests.metastore.conftest import TOPOLOGY, WORDS


def test_a_shared_root_table_joins_one_domain(core: MetastoreCore, registry: RegistryManager, tmp_path: Path) -> None:
    domains = DomainManager(core)
    alone = domains.get(TOPOLOGY)
    assert (alone.name, alone.topologies, list(alone.root_tables)) == (TOPOLOGY, (TOPOLOGY,), [WORDS])
    location = registry.table(WORDS).location
    registry.create_topology("other")
    registry.register_table("other", Table(WORDS, "root", location))
    registry.register_job("other", Job("lengths", "apps/lengths.py", (WORDS,), ("tsb.other.lengths",)),
                          warehouse=str(tmp_path / "warehouse"))
    shared = domains.get("other")
    assert shared.topologies == ("other", TOPOLOGY) and shared.root_tables == {WORDS: location}
    assert domains.get(TOPOLOGY) == shared
    with pytest.raises(TopologyError, match="not registered"):
        domains.get("nobody")
