"""The package's shape (docs/design.md "Layers"): no import cycle, imports go downwards only,
modules small enough to read in one sitting, every FLIP-276 state name defined once."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "airflow_provider_tsb"
MAX_LINES = 500
STATE_NAMES = {"PROCESSED", "WRITTEN", "PRECOMMIT", "COMMIT", "LATEST"}


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("airflow_provider_tsb", "airflow", include_external_packages=True, cache_dir=None)


def _imports(graph: grimp.ImportGraph) -> nx.DiGraph:
    g = nx.DiGraph()
    for module in graph.modules:
        if module.startswith("airflow_provider_tsb"):
            g.add_edges_from((module, i) for i in graph.find_modules_directly_imported_by(module)
                             if i.startswith("airflow_provider_tsb"))
    return g


def test_no_import_cycle(graph: grimp.ImportGraph) -> None:
    cycles = [c for c in nx.simple_cycles(_imports(graph)) if len(c) > 1]
    assert cycles == []


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        # the persistence layer knows neither the DAG authoring model nor Airflow
        ("airflow_provider_tsb.metastore",
         ("airflow_provider_tsb.topology", "airflow.", "airflow_provider_tsb.operators")),
        # the data plane runs in spark-submit processes and Spark workers: no Airflow there
        ("airflow_provider_tsb.spark", ("airflow.", "airflow_provider_tsb.operators", "airflow_provider_tsb.hooks")),
        ("airflow_provider_tsb.delta", ("airflow.", "airflow_provider_tsb.metastore", "airflow_provider_tsb.spark")),
    ],
)
def test_imports_go_downwards(graph: grimp.ImportGraph, layer: str, forbidden: tuple[str, ...]) -> None:
    wrong = sorted(
        f"{m} -> {i}"
        for m in graph.find_descendants(layer) | {layer}
        for i in graph.find_modules_directly_imported_by(m)
        if any(i == f.rstrip(".") or i.startswith(f) for f in forbidden)
    )
    assert wrong == []


def test_modules_fit_one_sitting() -> None:
    """No module over MAX_LINES lines unless its docstring says why (a line starting 'Size:')."""
    big = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        lines = text.count("\n")
        doc = ast.get_docstring(ast.parse(text)) or ""
        if lines > MAX_LINES and not any(line.startswith("Size:") for line in doc.splitlines()):
            big.append(f"{path.relative_to(PACKAGE.parent)}: {lines} lines")
    assert big == []


def test_state_names_are_defined_once() -> None:
    """"WRITTEN", "PROCESSED", ... appear as string constants only in metastore/records.py."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "records.py" or "migrations" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        exported = {id(c) for node in ast.walk(tree) if isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
                    for c in ast.walk(node.value)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in STATE_NAMES and id(node) not in exported:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.value!r}")
    assert found == []


def test_a_barrier_id_is_called_barrier() -> None:
    """One word per concept (docs/design.md "Vocabulary"): ``barrier_id`` is only the metastore's
    column name, used by its SQLAlchemy rows inside ``metastore/``."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "metastore" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            name = (node.id if isinstance(node, ast.Name) else node.arg if isinstance(node, ast.arg | ast.keyword)
                    else node.attr if isinstance(node, ast.Attribute) else None)
            if name in ("barrier_id", "barrier_ids"):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert found == []
