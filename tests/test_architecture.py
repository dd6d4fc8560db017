"""The package's shape (docs/design.md "Layers"): no import cycle, imports go downwards only,
modules and functions small enough to read in one sitting, every FLIP-276 state name defined once,
no private name imported across modules, dev/ and benchmarks/ independent of the tests, every
error in exceptions.py under the package's base error, every module with its docstring."""

from __future__ import annotations

import ast
import re
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


# ---------------------------------------------------------------- the metastore's managers (issue 22)
REPO = PACKAGE.parent


def _metastore_classes() -> list[type]:
    import importlib
    import inspect
    import pkgutil

    import airflow_provider_tsb.metastore as metastore

    classes = []
    for info in pkgutil.iter_modules(metastore.__path__, "airflow_provider_tsb.metastore."):
        if info.name.endswith(".migrations"):
            continue
        module = importlib.import_module(info.name)
        classes += [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == module.__name__]
    return classes


def test_metastore_is_a_plain_composition() -> None:
    from airflow_provider_tsb.metastore.store import MetaStore

    assert MetaStore.__mro__ == (MetaStore, object)


def test_no_manager_inherits_another() -> None:
    """A manager takes its collaborators in its constructor (Apache Paimon's pattern), never as a base."""
    classes = _metastore_classes()
    managers = {c for c in classes if c.__name__.endswith(("Manager", "Resolver")) or c.__name__ in
                ("MetaStore", "MetastoreCore")}
    assert len(managers) >= 13, sorted(c.__name__ for c in managers)
    wrong = sorted(f"{c.__name__}({b.__name__})" for c in classes for b in c.__mro__[1:] if b in managers)
    assert wrong == []


def test_metastore_records_do_not_reach_into_reading(graph: grimp.ImportGraph) -> None:
    """Reading lives in ``read/``: the metastore's records are plain data and import nothing of it."""
    edges = sorted(
        f"{m} -> {i}"
        for m in graph.find_descendants("airflow_provider_tsb.metastore")
        for i in graph.find_modules_directly_imported_by(m)
        if i.startswith("airflow_provider_tsb.read")
    )
    assert edges == []


def test_no_deprecation_layer() -> None:
    """A package never released keeps no shims: no ``compat`` module, no ``__getattr__`` that
    forwards old names on the metastore, no manager called like a method."""
    from airflow_provider_tsb.metastore.store import MetaStore

    assert not (PACKAGE / "metastore" / "compat.py").exists()
    assert "__getattr__" not in vars(MetaStore)
    managers = [c for c in _metastore_classes() if c.__name__.endswith(("Manager", "Resolver"))]
    assert [c.__name__ for c in managers if "__call__" in vars(c)] == []
    texts = [p.read_text() for p in PACKAGE.rglob("*.py")]
    assert not [t for t in texts if "DeprecationWarning" in t]


# ---------------------------------------------------------------- functions and private names (issue 22 item 6)
#: the longest function worth reading in one go, docstring included (migrations aside)
MAX_FUNCTION_LINES = 60
#: functions allowed over MAX_FUNCTION_LINES (none: the last three, ``read_changes``,
#: ``plan_pending_barriers`` and ``run_streaming``, were split); an entry must still be over the cap.
PENDING_SPLIT: set[str] = set()
#: ``from airflow_provider_tsb.X import _name`` still done across modules (none left: the Spark outputs' helpers
#: they share are public names); a new one needs a public home, not an entry here.
PENDING_PRIVATE: set[str] = set()


def long_functions(source: str, filename: str = "<source>") -> list[str]:
    """``"filename::name"`` of every function or method in ``source`` over MAX_FUNCTION_LINES lines
    (from its ``def`` line to its last, docstring and nested functions included; decorators aside)."""
    return sorted(
        f"{filename}::{node.name}"
        for node in ast.walk(ast.parse(source, filename))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (node.end_lineno or node.lineno) - node.lineno + 1 > MAX_FUNCTION_LINES
    )


def private_imports(source: str, module: str, filename: str = "<source>") -> list[str]:
    """``"filename: other.module._name"`` of every ``from airflow_provider_tsb.<other> import _name``
    in ``source`` (module ``module``); dunders such as ``__version__`` are public."""
    return sorted(
        f"{filename}: {node.module}.{alias.name}"
        for node in ast.walk(ast.parse(source, filename))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("airflow_provider_tsb")
        and node.module != module
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.endswith("__")
    )


def _package_sources() -> list[tuple[Path, str]]:
    return [(path, str(path.relative_to(REPO))) for path in sorted(PACKAGE.rglob("*.py"))
            if "migrations" not in path.parts]


def test_the_scanners_find_planted_cases() -> None:
    long = "def short():\n    return 1\n\n\ndef long():\n" + "    x = 1\n" * MAX_FUNCTION_LINES + "    return x\n"
    assert long_functions(long) == ["<source>::long"]
    nested = "class C:\n    def m(self):\n" + "        pass\n" * MAX_FUNCTION_LINES
    assert long_functions(nested) == ["<source>::m"]
    imports = ("from airflow_provider_tsb.a import _hidden, shown\n"
               "from airflow_provider_tsb import __version__\n"
               "from airflow_provider_tsb.b import _own\n")
    assert private_imports(imports, "airflow_provider_tsb.b") == ["<source>: airflow_provider_tsb.a._hidden"]


def test_no_function_over_sixty_lines() -> None:
    """A function is a step one reads at once: over MAX_FUNCTION_LINES it is split into named steps."""
    found = {f for path, name in _package_sources() for f in long_functions(path.read_text(), name)}
    assert sorted(found - PENDING_SPLIT) == []
    assert sorted(PENDING_SPLIT - found) == [], "split: strike it from PENDING_SPLIT"


def test_no_private_name_imported_across_modules() -> None:
    """A leading underscore means "this module's own": another module that needs it needs a public name."""
    found = {
        f for path, name in _package_sources()
        for f in private_imports(path.read_text(), ".".join(path.relative_to(REPO).with_suffix("").parts), name)
    }
    assert sorted(found - PENDING_PRIVATE) == []
    assert sorted(PENDING_PRIVATE - found) == [], "made public: strike it from PENDING_PRIVATE"


def test_dev_and_benchmarks_do_not_need_the_tests() -> None:
    """``dev/`` and ``benchmarks/`` share their helpers with the tests through :mod:`dev`,
    never through the test package."""
    found = []
    for folder in ("dev", "benchmarks"):
        for path in sorted((REPO / folder).rglob("*.py")):
            found += [f"{path.relative_to(REPO)}:{line}" for line, module in imported_modules(path.read_text())
                      if module == "tests" or module.startswith("tests.")]
    assert found == []


#: the code folders at the top of the checkout: the provider, the example DAG files (with their
#: support package ``dags/tsb_examples/`` and ``dags/common/``), the examples' Spark applications,
#: development tooling, the benchmarks and the tests
TOP_LEVEL_CODE_FOLDERS = {"airflow_provider_tsb", "dags", "spark_apps", "dev", "benchmarks", "tests"}


def test_the_top_level_code_folders_are_the_rooms() -> None:
    """Example support lives beside the examples (``dags/``), and no other code folder joins
    the top level (issue 59 item 6); the examples' support is still importable as ``tsb_examples``
    from the distribution (pyproject's ``packages.find.where``)."""
    ignored = {".venv", "site", "dist", "build", "test-output", "node_modules"}
    code = {p.name for p in REPO.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name not in ignored
            and any(p.rglob("*.py"))}
    assert sorted(code - TOP_LEVEL_CODE_FOLDERS) == [] and sorted(TOP_LEVEL_CODE_FOLDERS - code) == []
    assert (REPO / "dags" / "tsb_examples" / "__init__.py").is_file()
    assert "tsb_examples/" in (REPO / "dags" / ".airflowignore").read_text().split()


#: test folders that mirror no package folder: whole-topology runs under the real scheduler, helpers
CROSS_CUTTING_TEST_FOLDERS = {"e2e", "support"}


def test_the_tests_mirror_the_package() -> None:
    """One test folder per package folder, and none besides the cross-cutting ones (issue 22
    item 6): tests of ``airflow_provider_tsb/spark/`` live in ``tests/spark/``, tests of a module
    at the package root at the root of ``tests/``. Tiers are markers (tests/conftest.py), not folders."""
    def folders(root: Path) -> set[str]:
        return {p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}

    package = folders(PACKAGE)
    tests = folders(REPO / "tests")
    assert sorted(package - tests) == [], "a package folder without its test folder"
    assert sorted(tests - package - CROSS_CUTTING_TEST_FOLDERS) == [], "a test folder that mirrors no package folder"
    for folder in sorted(package & tests):
        assert any((REPO / "tests" / folder).rglob("test_*.py")), f"tests/{folder}/ holds no test module"


def imported_modules(source: str) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in ``source``, nested ones included."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
    return found


def test_the_import_scanner_finds_nested_test_imports() -> None:
    source = "import os\n\ndef main():\n    from tests.support.pg import start_postgres\n    import tests\n"
    assert [m for _, m in imported_modules(source)] == ["os", "tests.support.pg", "tests"]


def test_a_dag_file_imports_no_data_plane_library(tmp_path: Path) -> None:
    """A DAG file is imported by the dag-processor in a fresh child for every parse; deltalake,
    pyarrow and networkx cost seconds each on a loaded machine, and a parse over
    ``dagbag_import_timeout`` deactivates the file's DAGs (docs/airflow.md, "DAG parsing under load")."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "import pendulum\n"
        "from airflow.sdk import DAG\n"
        "from airflow_provider_tsb.assets import committed_barrier_asset, table_asset\n"
        "from airflow_provider_tsb.deadlines import freshness_deadlines\n"
        "from airflow_provider_tsb.sensors.barrier_committed import TsbBarrierCommittedSensor\n"
        "from airflow_provider_tsb.sensors.freshness import TsbFreshnessSensor\n"
        "from airflow_provider_tsb.task_group import TsbTopologyTaskGroup\n"
        "from airflow_provider_tsb.topology import Topology\n"
        "t = Topology('t', warehouse='/tmp/wh', freshness=60)\n"
        "t.root_table('raw.a')\n"
        "t.job('j', 'j.py', sources=['raw.a'], sinks=['t.b'])\n"
        "t.job('k', 'k.py', sources=['t.b'], sinks=['t.c'])\n"
        "asset = committed_barrier_asset(t, ['t.c'])\n"
        "outlet = table_asset(t, 't.c')\n"
        "with DAG('d', schedule=[asset], start_date=pendulum.datetime(2026, 1, 1, tz='UTC'),\n"
        "         deadline=freshness_deadlines(t)):\n"
        "    TsbTopologyTaskGroup(t)\n"
        "    TsbTopologyTaskGroup(t, group_id='s', mode='streaming')\n"
        "    TsbBarrierCommittedSensor(task_id='w', tables=['t.c'])\n"
        "print(sorted(m for m in ('deltalake', 'pyarrow', 'networkx', 'pandas', 'pyspark') if m in sys.modules))\n"
    )
    env = {**__import__("os").environ, "AIRFLOW_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def _package_modules() -> set[str]:
    return {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
            if "__pycache__" not in p.parts and "versions" not in p.relative_to(PACKAGE).parts}


def test_every_module_says_what_it_is() -> None:
    """The module map is the generated API reference (docs/reference/): every module of the
    package opens with the docstring it renders."""
    bare = [m for m in sorted(_package_modules())
            if ast.get_docstring(ast.parse((PACKAGE / m).read_text())) is None and (PACKAGE / m).stat().st_size]
    assert len(_package_modules()) > 100
    assert bare == [], "modules without a module docstring"


def test_every_error_lives_in_exceptions_and_is_a_tsb_error() -> None:
    """One error hierarchy: every exception class of the package is defined in
    ``exceptions.py`` and subclasses :class:`~airflow_provider_tsb.exceptions.TsbError` (a
    standard-library base such as ``ValueError`` may stand beside it)."""
    import inspect

    import airflow_provider_tsb.exceptions as exceptions

    elsewhere = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "exceptions.py" or "versions" in path.parts:
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and re.search(r"(Error|Exception)$", node.name):
                elsewhere.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    assert elsewhere == [], "errors defined outside airflow_provider_tsb/exceptions.py"
    errors = [c for _, c in inspect.getmembers(exceptions, inspect.isclass)
              if issubclass(c, BaseException) and c.__module__ == exceptions.__name__]
    assert len(errors) > 50
    assert [c.__name__ for c in errors if not issubclass(c, exceptions.TsbError)] == []


CACHE_TYPES = ("TTLCache", "LRUCache", "CommitFold", "OrderedDict")


def test_every_cache_has_the_one_owner() -> None:
    """Module-level caches (``TTLCache``, ``CommitFold``, ``OrderedDict``, ``@cache``d functions)
    register with :data:`airflow_provider_tsb.caches.CACHES`, whose ``clear()`` empties them all."""
    import importlib
    import pkgutil

    import airflow_provider_tsb
    from airflow_provider_tsb.caches import CACHES

    loose = []
    for path in PACKAGE.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        text = path.read_text()
        for node in ast.parse(text).body:
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if isinstance(value, ast.Call) and ast.unparse(value.func) in CACHE_TYPES and "CACHES.on_clear" not in text:
                loose.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
            if isinstance(node, ast.FunctionDef) and any(ast.unparse(d).split("(")[0] in ("cache", "lru_cache")
                                                         for d in node.decorator_list):
                if f"{node.name}.cache_clear" not in text:
                    loose.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    assert loose == [], "caches that do not register with CACHES"
    for info in pkgutil.walk_packages(airflow_provider_tsb.__path__, "airflow_provider_tsb."):
        if "migrations" not in info.name and not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    assert len(CACHES.names()) >= 16 and CACHES.clear() == CACHES.names()


def test_the_ui_takes_the_api_as_collaborators() -> None:
    """``ui/`` renders the pages; the API passes it the user, the metastore and the access policy
    (ui/pages.py), so at run time ``ui/`` imports nothing of ``api/`` (types aside)."""
    found = []
    for path in sorted((PACKAGE / "ui").rglob("*.py")):
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and ast.unparse(node.test) == "TYPE_CHECKING" for n in ast.walk(node)}
        found += [f"{path.name}:{node.lineno}" for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom) and id(node) not in typing_only
                  and (node.module or "").startswith(("airflow_provider_tsb.api", "airflow_provider_tsb.hooks"))]
    assert found == []
