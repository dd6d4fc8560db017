"""Shared fixtures: a real PostgreSQL server and fresh metastores on SQLite and PostgreSQL; test tiers.

Tiers (markers declared in ``pyproject.toml``): a test that needs Spark, PostgreSQL, Airflow
processes or a browser carries the marker of each (``spark``, ``postgres``, ``airflow``,
``browser``, ``e2e``), set explicitly or, below, from the fixtures it uses; a test that needs no
service but takes seconds (Python subprocesses, generated requests) is ``slow``; every other
test is ``unit`` (``make test-unit``: no JVM, no PostgreSQL, no Airflow process, seconds).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_tsb.metastore.store import MetaStore
from dev.pg import PostgresServer, start_postgres

pytest_plugins = ["tests.support.airflow_fixtures", "tests.support.fixtures"]

# Spark's Python workers and drivers: this venv's interpreter ("Python worker failed to connect
# back" otherwise; see README, "Facts about this machine")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# The suite's short-lived JVMs (spark-submit drivers and launchers, the Connect servers and the
# standalone cluster a test starts for itself) compile with C1 only: they live seconds to a few
# minutes, where C2's compilations cost more CPU than they return (tests/spark/test_crash.py and
# tests/maintenance/test_checker.py: 160 -> 109 CPU-s). The session's shared Connect server, which
# runs every test's queries for the whole run, keeps both compilers (:data:`BOTH_COMPILERS`; with
# C1 only, the Delta-heavy tests on it took twice as long). Behaviour is the JVM's either way; the
# benchmarks run with the JVM's defaults. An empty JAVA_TOOL_OPTIONS keeps both compilers everywhere.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")
#: Spark conf of the shared Connect server: a command-line option wins over JAVA_TOOL_OPTIONS
BOTH_COMPILERS = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=4"}

#: markers of the tiers heavier than ``unit``
HEAVY_MARKERS = ("spark", "postgres", "airflow", "browser", "e2e", "slow", "cluster", "delta_spark")
#: fixture -> markers of the tests that use it (directly or through another fixture)
FIXTURE_MARKERS: dict[str, tuple[str, ...]] = {
    "spark": ("spark",),
    "spark_remote": ("spark",),
    "class_data": ("spark",),
    "postgres": ("postgres",),
    "airflow_server": ("airflow",),
    "browser": ("browser",),
    "spark_cluster": ("cluster", "spark"),
    "bare_python": ("cluster", "slow"),
    "followed_guide": ("spark",),
}


#: test files that share an expensive session or package fixture run in one xdist worker:
#: ``{path prefix: group}`` (every other file is a group of its own)
SHARED_GROUPS: dict[str, str] = {
    "tests/spark/cluster/": "cluster",  # the standalone cluster and its Connect server
    "tests/ui/": "ui",  # the UI package's own Airflow
    "tests/test_guide.py": "guide",  # followed_guide: the guide followed once
    "tests/e2e/test_guide_airflow.py": "guide",
    "tests/test_airflow_harness.py": "shared-airflow",  # airflow_server: the session's shared Airflow
    "tests/plugins/test_plugin_auth.py": "shared-airflow",
}


#: the groups that start an Airflow deployment, a standalone Spark cluster or streaming jobs
#: (path prefixes and :data:`SHARED_GROUPS` names): at most :data:`HEAVY_AT_ONCE` of them run at
#: once, since three at once overloaded the 2-core CI machine until Airflow's API timed out
HEAVY_GROUPS = ("tests/e2e/", "tests/ui/", "cluster", "ui", "guide", "shared-airflow", "tests/api/test_api_roles.py")
#: ``$TSB_TEST_HEAVY_AT_ONCE``: how many :data:`HEAVY_GROUPS` groups run at once (default 1)
HEAVY_AT_ONCE = int(os.environ.get("TSB_TEST_HEAVY_AT_ONCE", "1"))


def is_heavy(group: str) -> bool:
    """Whether :func:`xdist_group` ``group`` is one of :data:`HEAVY_GROUPS`."""
    return any(group == h or (h.startswith("tests/") and group.startswith(h)) for h in HEAVY_GROUPS)


def xdist_group(nodeid: str) -> str:
    """The xdist group of a test (``make test`` runs ``-n <cores + 1>``, scheduled by
    :func:`pytest_xdist_make_scheduler`): its file's :data:`SHARED_GROUPS` group, else its file,
    so a module's tests keep their order in one worker (some go on from what an earlier one
    left) and its module fixtures are built once."""
    path = nodeid.split("::", 1)[0]
    return next((group for prefix, group in SHARED_GROUPS.items() if path.startswith(prefix)), path)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with the tiers of its fixtures, and ``unit`` when it has no heavier marker;
    in an xdist worker, put the long groups first (:func:`long_groups_first`)."""
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            for marker in FIXTURE_MARKERS.get(fixture, ()):
                item.add_marker(marker)
        if not any(item.get_closest_marker(m) for m in HEAVY_MARKERS):
            item.add_marker("unit")
    if hasattr(config, "workerinput"):
        long_groups_first(items)


#: markers of the tests whose groups go to the xdist workers first: the longest groups, so
#: that no worker is left with one of them while the other has nothing to do
LONG_MARKERS = ("e2e", "cluster", "airflow", "browser")


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``make test``'s ``-n <cores + 1>``: whole :func:`xdist_group` groups go to a worker, in collection
    order (xdist's ``loadscope`` scheduler with the groups as scopes; its ``loadgroup`` reads
    the node id suffix that xdist 3.8 can no longer set under pytest 9.2)."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        """Groups as scopes; a heavy group (:func:`is_heavy`) goes to a worker only while fewer
        than :data:`HEAVY_AT_ONCE` run on the others (the worker takes a light group meanwhile,
        or waits for the next test report of any worker)."""

        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

        def _heavy_elsewhere(self, node: Any) -> int:
            return sum(1 for other, work in self.assigned_work.items() if other is not node
                       for scope, unit in work.items() if is_heavy(scope) and not all(unit.values()))

        def _assign_work_unit(self, node: Any) -> None:
            self.assigned_work.setdefault(node, {})
            allowed = self._heavy_elsewhere(node) < HEAVY_AT_ONCE
            scope = next((s for s in self.workqueue if allowed or not is_heavy(s)), None)
            if scope is None:
                return
            work_unit = self.workqueue.pop(scope)
            self.assigned_work[node][scope] = work_unit
            collection = self.registered_collections[node]
            node.send_runtest_some([collection.index(i) for i, done in work_unit.items() if not done])

        def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
            super().mark_test_complete(node, item_index, duration)
            for other in self.nodes:  # a waiting worker may take a heavy group now (or end)
                if other is not node:
                    self._reschedule(other)

    config.option.loadscopereorder = False
    return GroupScheduling(config, log)


def long_groups_first(items: list[pytest.Item]) -> None:
    """Sort ``items`` in place: the groups that hold a test marked with one of
    :data:`LONG_MARKERS` first (an xdist worker's collection is the order the controller
    schedules by); tests keep their order within a group."""
    long_groups = {xdist_group(i.nodeid) for i in items if any(i.get_closest_marker(m) for m in LONG_MARKERS)}
    items.sort(key=lambda i: xdist_group(i.nodeid) not in long_groups)


@pytest.fixture(scope="session")
def class_data() -> str:
    """The Java options of the class-data archive every local ``spark-submit`` driver maps, as a
    job's gets them (:mod:`airflow_provider_tsb.spark.class_data`): written once per machine
    (about 15 s), before the session's first driver, instead of in the background by it."""
    from airflow_provider_tsb.spark.class_data import ClassDataArchive

    archive = ClassDataArchive()
    archive.create()
    return archive.java_options()


#: ``workerinput`` key of the folder the xdist workers share (:func:`pytest_configure_node`)
SHARED_DIR_KEY = "tsb_shared_dir"
#: the shared Connect server's heap: the sessions of every worker's tests at once
SHARED_SERVER_MEMORY = "3g"
#: the controller's copy of that folder
SHARED_DIR = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """The xdist controller makes the folder its workers share (the session's one Connect
    server lives there; see :func:`spark_remote`)."""
    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None):
        import tempfile

        config.stash[SHARED_DIR] = Path(tempfile.mkdtemp(prefix="tsb-tests-shared-"))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist: tell each worker the folder the workers share."""
    shared = node.config.stash.get(SHARED_DIR, None)
    if shared is not None:
        node.workerinput[SHARED_DIR_KEY] = str(shared)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller stops the workers' shared Connect server, once every worker is done."""
    shared = config.stash.get(SHARED_DIR, None)
    if shared is not None:
        import shutil

        from airflow_provider_tsb.spark.connect_server import ConnectServer

        ConnectServer(shared / "spark-connect").stop()
        shutil.rmtree(shared, ignore_errors=True)


@pytest.fixture(scope="session")
def spark_remote(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, class_data: str
) -> Iterator[str]:
    """The URL of the test session's one Spark Connect server (``sc://127.0.0.1:PORT``).

    ``$TSB_TEST_SPARK_REMOTE`` names a running server to use instead. Under xdist, the first
    worker that needs it starts it (``tsb spark start``'s :class:`ConnectServer`, on a free port)
    in the folder the workers share, the others find it there, and the controller stops it at
    the end: every worker's jobs are clients of one server, as a deployment's jobs are, and
    Spark's classes are loaded and compiled by one JVM instead of one per worker. Without
    xdist, the session starts and stops its own. Every in-process Spark session of the tests
    (:func:`spark`) and every job the tests run on the ``connect`` engine is a client of it.
    """
    if os.environ.get("TSB_TEST_SPARK_REMOTE"):
        yield os.environ["TSB_TEST_SPARK_REMOTE"]
        return
    from airflow_provider_tsb.spark.connect_server import ConnectServer, ConnectServerOptions
    from dev.local_airflow import free_port

    shared = getattr(request.config, "workerinput", {}).get(SHARED_DIR_KEY)
    if shared is not None:
        import fcntl

        options = ConnectServerOptions(port=free_port(), driver_memory=SHARED_SERVER_MEMORY, conf=BOTH_COMPILERS)
        with (Path(shared) / "spark-connect.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one worker starts it; the others wait and find it
            status = ConnectServer(Path(shared) / "spark-connect", options).start()
        yield str(status.url)
        return
    server = ConnectServer(tmp_path_factory.mktemp("spark-connect"),
                           ConnectServerOptions(port=free_port(), conf=BOTH_COMPILERS))
    status = server.start()
    try:
        yield str(status.url)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark(spark_remote: str) -> Iterator[object]:
    """The tests' SparkSession: a Spark Connect client session of :func:`spark_remote` (2 shuffle
    partitions), as a job on the ``connect`` engine has."""
    from airflow_provider_tsb.spark.session import get_spark

    session = get_spark("tsb-tests", remote=spark_remote, conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


@dataclass(frozen=True)
class Engine:
    """An engine a test runs jobs on: ``connect`` (a Spark Connect client of :func:`spark_remote`;
    ``remote`` is its URL) or ``submit`` (a driver per job; ``remote`` is ``None``)."""

    kind: str
    remote: str | None


@pytest.fixture(params=["connect", "submit"])
def engine(request: pytest.FixtureRequest) -> Engine:
    """Each engine in turn (issue 21: the data-plane tier runs on both)."""
    if request.param == "connect":
        return Engine("connect", request.getfixturevalue("spark_remote"))
    request.getfixturevalue("class_data")
    return Engine("submit", None)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer | str]:
    """A PostgreSQL server for the session: ``TSB_TEST_PG_URL`` or a throwaway cluster."""
    if os.environ.get("TSB_TEST_PG_URL"):
        yield os.environ["TSB_TEST_PG_URL"]
        return
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()


def _pg_database(postgres: PostgresServer | str) -> str:
    name = f"tsb_{uuid.uuid4().hex[:12]}"
    if isinstance(postgres, str):
        import sqlalchemy as sa

        engine = sa.create_engine(postgres, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        engine.dispose()
        return postgres.rsplit("/", 1)[0] + "/" + name
    return postgres.create_database(name)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def metastore_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """URL of an empty metastore database, once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tsb.db'}"
    return _pg_database(request.getfixturevalue("postgres"))


@pytest.fixture
def store(metastore_url: str) -> Iterator[MetaStore]:
    """A migrated :class:`MetaStore` on SQLite and on PostgreSQL."""
    ms = MetaStore(metastore_url)
    ms.migrate()
    yield ms
    ms.dispose()


@pytest.fixture(scope="session")
def followed_guide(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """The user guide (docs/guide.md) followed once, as written, in an empty folder: ``(folder,
    finished process)``. ``tests/test_guide.py`` checks its output; the e2e test goes on from the
    folder's state under a real Airflow (the guide's commands run once per session, not twice)."""
    from tests.support.guide import follow_guide, stop_guide_spark

    folder = tmp_path_factory.mktemp("guide")
    try:
        proc = follow_guide(folder)
    finally:
        stop_guide_spark(folder)  # the guide ends with `tsb spark stop`; this covers a failure midway
    return folder, proc
