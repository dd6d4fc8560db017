"""``load_dag_files`` in a long-lived process: a DAG folder's helper modules run afresh for every
load, as in the DAG processor's fresh process, and ``.airflowignore`` keeps them from being loaded
as DAG files of their own."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from airflow_provider_tsb.dag_loading import load_dag_files

HELPER = """
    from airflow_provider_tsb.topology import Topology

    topology = Topology("shop")
    topology.root_table("tsb.raw.orders")
    topology.job("daily_orders", "a.py", sources=["tsb.raw.orders"], sinks=["tsb.mart.daily_orders"])
"""


def test_a_topology_declared_in_a_helper_is_found_on_every_load(tmp_path: Path) -> None:
    (tmp_path / "shop_helpers").mkdir()
    (tmp_path / "shop_helpers" / "__init__.py").write_text("")
    (tmp_path / "shop_helpers" / "topology.py").write_text(textwrap.dedent(HELPER))
    (tmp_path / "shop_dag.py").write_text("from shop_helpers.topology import topology  # noqa: F401\n")
    (tmp_path / ".airflowignore").write_text("shop_helpers/\n")
    for attempt in (1, 2, 3):
        loaded = load_dag_files([str(tmp_path)])
        assert [(Path(f.path).name, f.error, [t.name for t in f.topologies]) for f in loaded] == [
            ("shop_dag.py", None, ["shop"])], f"load {attempt}"
    # the host process's modules are as they were: the helper is not left imported
    assert "shop_helpers" not in sys.modules and "shop_helpers.topology" not in sys.modules


def test_a_helper_the_process_imported_itself_is_put_back(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "shop_helpers2").mkdir()
    (tmp_path / "shop_helpers2" / "__init__.py").write_text("")
    (tmp_path / "shop_helpers2" / "topology.py").write_text(textwrap.dedent(HELPER))
    (tmp_path / "shop_dag2.py").write_text("from shop_helpers2.topology import topology  # noqa: F401\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import shop_helpers2.topology as mine  # the host's own import, before any load

    try:
        loaded = load_dag_files([str(tmp_path / "shop_dag2.py")])
        assert [t.name for t in loaded[0].topologies] == ["shop"]
        assert sys.modules["shop_helpers2.topology"] is mine
    finally:
        for name in ("shop_helpers2", "shop_helpers2.topology"):
            sys.modules.pop(name, None)
