"""Every metastore path has a timeout and a retry (issue 57 item 4), against a real PostgreSQL
that is stopped (every connection cut, new ones refused) or frozen (``SIGSTOP``: the kernel
still ACKs, nothing answers, which no server-side timeout or TCP keepalive sees).

* Barrier generation (:class:`~airflow_provider_tsb.hooks.barrier.TsbBarrierHook`) rides out
  an outage shorter than its budget and generates exactly one barrier. Before, a stop failed
  it at once with ``Connection refused`` and a freeze blocked it for as long as the freeze.
* Past its budget, every path fails with the jobs' ``MetastoreUnavailableError`` text, within
  the budget plus one call deadline: generation, the emitter's lease, the sensor's trigger, the
  REST API of a running Airflow api-server (503, ``[tsb] request_retry_seconds``) and the CLI
  (exit 2, no traceback). Once the database is back, the same api-server answers again.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_tsb.caches import CACHES
from airflow_provider_tsb.exceptions import MetastoreUnavailableError
from airflow_provider_tsb.hooks.barrier import TsbBarrierHook
from airflow_provider_tsb.metastore.store import MetaStore
from dev.airflow_harness import start_airflow
from dev.local_airflow import AirflowHandle
from dev.pg import PostgresServer, start_postgres
from tests.support.orchestration import wordcount_topology
from tsb_examples.ingest import ingest_next_words

pytestmark = [pytest.mark.postgres]

#: a statement's deadline here: 1 s of server statement timeout + the client's 5 s grace
CALL_S = 1
#: the retry budget of every path under an outage longer than it
BUDGET_S = 3
COUNTS = "tsb.wordcount.word_count"


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    """A PostgreSQL of this module's own: it is stopped and frozen under the tests."""
    pg = start_postgres()
    try:
        yield pg
    finally:
        pg.stop()


@pytest.fixture(scope="module")
def api_server(server: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowHandle]:
    """A running Airflow api-server (the TSB plugin loaded) whose tsb metastore is a database of
    this module's PostgreSQL, with a budget of :data:`BUDGET_S` per request."""
    if os.environ.get("TSB_SKIP_AIRFLOW") == "1":
        pytest.skip("TSB_SKIP_AIRFLOW=1")
    url = server.create_database(f"paths_api_{os.getpid()}")
    store = MetaStore(url)
    store.migrate()
    store.registry.register_topology(wordcount_topology(str(tmp_path_factory.mktemp("api") / "warehouse")))
    store.dispose()
    af = start_airflow(components=("api-server",), env_extra={
        "TSB_METASTORE_URL": url, "TSB_METASTORE_CALL_SECONDS": str(CALL_S),
        "AIRFLOW__TSB__REQUEST_RETRY_SECONDS": str(BUDGET_S),
    })
    try:
        af.get_token()  # Airflow's own database is not the one that goes down
        yield af
    finally:
        af.stop()


@pytest.fixture
def deployment(server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The wordcount topology registered in a fresh database, words ingested; the hooks' and
    the CLI's metastore is that database (``$TSB_METASTORE_URL``)."""

    url = server.create_database(f"paths_{os.getpid()}_{time.monotonic_ns()}")
    monkeypatch.setenv("TSB_METASTORE_URL", url)
    monkeypatch.setenv("TSB_METASTORE_CALL_SECONDS", str(CALL_S))
    CACHES.clear("hooks.metastores")  # a store built under this test's budget
    store = MetaStore(url)
    store.migrate()
    topology = wordcount_topology(str(tmp_path / "warehouse"))
    store.registry.register_topology(topology)
    ingest_next_words(topology.location("raw.words"), "t/0", lines=5)
    return store, topology, url


def _outage(server: PostgresServer, kind: str):
    return server.frozen() if kind == "frozen" else server.stopped()


@pytest.mark.parametrize("kind", ["stopped", "frozen"])
def test_barrier_generation_rides_out_an_outage_within_its_budget(deployment, server, kind, monkeypatch) -> None:
    store, topology, _url = deployment
    monkeypatch.setenv("TSB_METASTORE_RETRY_SECONDS", "60")
    hook = TsbBarrierHook(topology)
    hook.get_conn().barriers.latest(topology.name)  # a pooled connection, as a running emitter has
    result: dict[str, object] = {}

    def generate() -> None:
        try:
            result["barrier"] = hook.generate(run_key="outage/1").barrier
        except Exception as exc:  # noqa: BLE001 - the test reports it
            result["error"] = exc

    with _outage(server, kind):
        worker = threading.Thread(target=generate)
        worker.start()
        time.sleep(CALL_S + 5 + 3)  # past one call deadline: a frozen call was cut and is retried
        assert worker.is_alive(), f"generation gave up during a {kind} outage: {result}"
    worker.join(60)
    assert not worker.is_alive() and result == {"barrier": 1}, result
    assert [b.barrier for b in store.barriers.list(topology.name)] == [1]


@pytest.mark.airflow
@pytest.mark.parametrize("kind", ["stopped", "frozen"])
def test_every_path_fails_clearly_within_its_budget(deployment, server, api_server, kind, monkeypatch) -> None:
    from airflow_provider_tsb.triggers.barrier_committed import TsbBarrierCommittedTrigger

    store, topology, url = deployment
    budget = BUDGET_S
    monkeypatch.setenv("TSB_METASTORE_RETRY_SECONDS", str(budget))
    hook = TsbBarrierHook(topology)
    topologies = "/tsb/api/v1/topologies"
    assert api_server.request("GET", topologies).status_code == 200  # a pooled connection
    # the budget, then the try under way when it ran out: a pooled connection's ping cut after
    # one call deadline, then a new connection's connect timeout (5 s), twice at most; slack
    bound = budget + 2 * (CALL_S + 5 + 5) + 5

    def timed(call) -> tuple[object, float]:
        started = time.monotonic()
        try:
            return call(), time.monotonic() - started
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            return exc, time.monotonic() - started

    def trigger_event() -> dict:
        trigger = TsbBarrierCommittedTrigger(tables=[COUNTS], barrier=1, poll_interval_s=0.2)

        async def first() -> dict:
            async for event in trigger.run():
                return event.payload
            return {}

        return asyncio.run(first())

    cli = [sys.executable, "-m", "airflow_provider_tsb", "versions", COUNTS]
    with _outage(server, kind):
        generation, t_generation = timed(lambda: hook.generate(run_key="outage/2"))
        lease, t_lease = timed(lambda: hook.get_conn().emitters.acquire(topology.name, "probe", 30.0))
        event, t_trigger = timed(trigger_event)
        answer, t_api = timed(lambda: api_server.request("GET", topologies))
        proc, t_cli = timed(lambda: subprocess.run(cli, capture_output=True, text=True, timeout=120,
                                                   env={**os.environ, "TSB_METASTORE_URL": url}))
    for name, error in (("generation", generation), ("emitter lease", lease)):
        assert isinstance(error, MetastoreUnavailableError), (name, error)
        assert f"the tsb metastore at {store.core.shown_url()} was unreachable" in str(error), str(error)
    assert event["status"] == "error" and "was unreachable" in event["message"], event
    assert answer.status_code == 503, answer.text
    body = answer.json()
    assert body["error"] == "MetastoreUnavailableError" and "was unreachable" in body["detail"], body
    assert proc.returncode == 2 and "was unreachable" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    timings = {"generation": t_generation, "lease": t_lease, "trigger": t_trigger, "api": t_api, "cli": t_cli}
    assert max(timings.values()) < bound, json.dumps(timings)
    assert all(t >= budget for t in timings.values()), json.dumps(timings)  # each did retry
    # the database is back: the same api-server answers, no restart
    back = api_server.request("GET", topologies)
    assert back.status_code == 200 and "wordcount" in back.text, back.text
