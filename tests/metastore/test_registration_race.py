"""Two (or more) processes race to register different jobs writing the same table.

Real concurrent processes against real SQLite and PostgreSQL: exactly one wins, every other
one gets the double-writer error naming the table and both jobs.
"""

from __future__ import annotations

import multiprocessing as mp

import pytest

from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.topology import Job, Table, Topology

pytestmark = pytest.mark.slow  # spawns Python processes

RACERS = 4
ROUNDS = 2


def _register(url: str, job_id: str, sink: str, start: mp.synchronize.Barrier, out: mp.Queue) -> None:
    store = MetaStore(url)
    start.wait(timeout=60)
    try:
        job = Job(job_id, "app.py", ("tsb.raw.src",), (sink,))
        store.registry.register_job("race", job, {sink: Table(sink, "intermediate")})
        out.put((job_id, "won", ""))
    except Exception as exc:  # report any failure kind to the parent
        out.put((job_id, type(exc).__name__, str(exc)))


def test_exactly_one_writer_wins(store: MetaStore, tmp_path) -> None:
    topo = Topology("race", warehouse=str(tmp_path))
    topo.root_table("tsb.raw.src")
    store.registry.register_topology(topo)
    ctx = mp.get_context("spawn")
    for round_no in range(ROUNDS):
        sink = f"tsb.mart.contested_{round_no}"
        start = ctx.Barrier(RACERS)
        out: mp.Queue = ctx.Queue()
        procs = [
            ctx.Process(target=_register, args=(store.url, f"job_{round_no}_{i}", sink, start, out))
            for i in range(RACERS)
        ]
        for p in procs:
            p.start()
        results = [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        winners = [r for r in results if r[1] == "won"]
        losers = [r for r in results if r[1] != "won"]
        assert len(winners) == 1, results
        winner = winners[0][0]
        assert store.registry.writer_of(sink) == winner
        for job_id, kind, message in losers:
            assert kind == "DoubleWriterError", (job_id, kind, message)
            assert f"table {sink!r} has two writer jobs" in message
            assert repr(winner) in message and repr(job_id) in message
        registered = {j.id for j in store.registry.jobs("race")}
        assert winner in registered
        assert not registered & {r[0] for r in losers}
