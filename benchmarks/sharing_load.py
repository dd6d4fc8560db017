"""Delta Sharing query latency under concurrent clients (issue 24 goal: p99 <= 50 ms, 20 clients).

One topology (the FLIP-276 wordcount: words -> word_count -> count_of_counts) with ``--barriers``
barriers committed in real Delta tables, its metastore on a throwaway PostgreSQL (or SQLite with
``--sqlite``), served by the sharing routes (:func:`airflow_provider_tsb.api.sharing.create_sharing_app`)
under uvicorn in a process of its own. ``--clients`` threads each send ``--requests`` queries:
``POST .../tables/word_count/query`` at a random committed barrier (``version=N``: the metadata
and the file list of one table at one barrier, signed URLs and the lease included). The baseline
is ``GET /shares`` by the same clients: the HTTP server and routing without the work measured.
Airflow's authentication is not in the path (the routes' access policy allows all).

Last line::

    clients=<n> p50_ms=<q> p99_ms=<q> errors=<n> baseline_p50_ms=<b> baseline_p99_ms=<b> load=<1-min load average>

    .venv/bin/python benchmarks/sharing_load.py [--clients 20] [--requests 50] [--barriers 50] [--sqlite]
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pyarrow as pa
from deltalake import CommitProperties, write_deltalake

HERE = Path(__file__).resolve().parent
TOPOLOGY = "wordcount"
WORDS, WC, CC = "tsb.wc.words", "tsb.wc.word_count", "tsb.wc.count_of_counts"
QUERY = f"/shares/{TOPOLOGY}/schemas/wc/tables/word_count/query"


def _write(location: str, table: pa.Table, mode: str, barrier: int | None, job: str | None) -> None:
    props = None if barrier is None else CommitProperties(custom_metadata={"tsb.barrier": str(barrier),
                                                                           "tsb.job": job or ""})
    write_deltalake(location, table, mode=mode, commit_properties=props)


def build(url: str, warehouse: Path, barriers: int) -> None:
    """The wordcount topology with ``barriers`` barriers WRITTEN in all three tables."""
    from airflow_provider_tsb.metastore.store import MetaStore
    from airflow_provider_tsb.topology import Topology

    store = MetaStore(url)
    store.migrate()
    topo = Topology(TOPOLOGY, warehouse=str(warehouse))
    topo.root_table("wc.words")
    topo.job("wc_job", "wc.py", sources=["wc.words"], sinks=["wc.word_count"])
    topo.job("cc_job", "cc.py", sources=["wc.word_count"], sinks=["wc.count_of_counts"])
    store.registry.register_topology(topo)
    loc = {t: store.registry.table(t).location for t in (WORDS, WC, CC)}
    rng = random.Random(7)
    seen: Counter[str] = Counter()
    for k in range(1, barriers + 1):
        batch = [f"w{rng.randrange(200)}" for _ in range(50)]
        _write(loc[WORDS], pa.table({"word": batch}), "append", None, None)
        store.barriers.create_barrier(TOPOLOGY, {WORDS: k - 1}, run_key=f"r{k}")
        seen.update(batch)
        _write(loc[WC], pa.table({"word": list(seen), "cnt": list(seen.values())}), "overwrite", k, "wc_job")
        store.table_states.record_written(WC, k, k - 1, "wc_job")
        counts = Counter(seen.values())
        _write(loc[CC], pa.table({"cnt": list(counts), "cnt2": list(counts.values())}), "overwrite", k, "cc_job")
        store.table_states.record_written(CC, k, k - 1, "cc_job")
    store.dispose()


def serve(url: str, port: int) -> None:
    """Serve the sharing routes of the metastore at ``url`` on 127.0.0.1:``port`` (the server process)."""
    import uvicorn

    from airflow_provider_tsb.api.sharing import create_sharing_app
    from airflow_provider_tsb.metastore.store import MetaStore

    app = create_sharing_app(MetaStore(url), seconds=300)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hammer(base: str, clients: int, requests: int, barriers: int, query: bool) -> tuple[list[float], int]:
    """``clients`` threads, ``requests`` each; returns (latencies in ms, errors)."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    start = threading.Barrier(clients)

    def client(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=base, timeout=30.0) as http:
            start.wait()
            for _ in range(requests):
                began = time.perf_counter()
                if query:
                    r = http.post(QUERY, json={"version": rng.randint(1, barriers)})
                    ok = r.status_code == 200 and '"file"' in r.text
                else:
                    r = http.get("/shares")
                    ok = r.status_code == 200
                elapsed = (time.perf_counter() - began) * 1000
                with lock:
                    latencies.append(elapsed)
                    errors[0] += not ok

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, errors[0]


def _quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--requests", type=int, default=50, help="queries per client")
    parser.add_argument("--barriers", type=int, default=50)
    parser.add_argument("--sqlite", action="store_true", help="the metastore on SQLite instead of PostgreSQL")
    parser.add_argument("--serve", nargs=2, metavar=("URL", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return 0
    with tempfile.TemporaryDirectory(prefix="tsb-sharing-load-") as tmp:
        pg = None
        if args.sqlite:
            url = f"sqlite:///{tmp}/tsb.db"
        else:
            sys.path.insert(0, str(HERE.parent))
            from tsb_dev.pg import start_postgres

            pg = start_postgres()
            url = pg.create_database("tsb_sharing_load")
        try:
            build(url, Path(tmp) / "wh", args.barriers)
            port = _free_port()
            server = subprocess.Popen([sys.executable, __file__, "--serve", url, str(port)])
            base = f"http://127.0.0.1:{port}/tsb/sharing"
            try:
                deadline = time.monotonic() + 60
                while True:
                    try:
                        if httpx.get(base + "/shares", timeout=2).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    if time.monotonic() > deadline or server.poll() is not None:
                        print("error: the sharing server did not start", file=sys.stderr)
                        return 1
                    time.sleep(0.2)
                hammer(base, args.clients, 5, args.barriers, query=True)  # warm-up
                base_lat, base_err = hammer(base, args.clients, args.requests, args.barriers, query=False)
                lat, err = hammer(base, args.clients, args.requests, args.barriers, query=True)
            finally:
                server.terminate()
                server.wait(20)
        finally:
            if pg is not None:
                pg.stop()
    load = os.getloadavg()[0]
    print(f"queries: {len(lat)}, {args.barriers} barriers, metastore {'SQLite' if args.sqlite else 'PostgreSQL'}")
    print(f"clients={args.clients} p50_ms={_quantile(lat, 50):.1f} p99_ms={_quantile(lat, 99):.1f} "
          f"errors={err + base_err} baseline_p50_ms={_quantile(base_lat, 50):.1f} "
          f"baseline_p99_ms={_quantile(base_lat, 99):.1f} load={load:.1f}")
    return 0 if err + base_err == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
