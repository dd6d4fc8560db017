"""Delta Sharing query latency under concurrent clients (issue 24 goal: p99 <= 50 ms, 20 clients).

One topology (the FLIP-276 wordcount: words -> word_count -> count_of_counts) with ``--barriers``
barriers committed in real Delta tables, its metastore on a throwaway PostgreSQL (or SQLite with
``--sqlite``), served by the sharing routes (:func:`airflow_provider_tsb.api.sharing.create_sharing_app`)
under uvicorn in a process of its own. ``--clients`` clients each send queries without pause:
``POST .../tables/word_count/query`` at a random committed barrier (``version=N``: the metadata
and the file list of one table at one barrier, signed URLs and the lease included); an answer
without a ``file`` line is an error. The baseline is ``GET /shares`` by the same clients: the
HTTP server and routing without the work measured. Airflow's authentication is not in the path
(the routes' access policy allows all), unless ``--api-server``: then the routes are served by
the real Airflow 3 api-server with the tsb plugin (:func:`dev.local_airflow.start_airflow`,
SimpleAuthManager, the admin's JWT as the bearer token: Airflow's authentication, the tsb
roles check and Airflow's middlewares in the path).

The clients (``--generator``):

* ``wrk`` (the default when ``wrk`` is on the PATH; Debian package ``wrk``): ``--clients``
  connections of one ``wrk`` thread for ``--seconds``: a C client whose own CPU is small, so
  the server has the machine's cores, as it would with clients on other machines;
* ``httpx``: ``--clients`` Python threads of one process, ``--requests`` queries each (the
  clients' CPU, about 3 ms a request, then competes with the server's on the same cores).

Last line::

    clients=<n> p50_ms=<q> p99_ms=<q> errors=<n> baseline_p50_ms=<b> baseline_p99_ms=<b> qps=<answers/s>
    generator=<g> load=<1-min load average>   (one line)

(with ``wrk``, the p50 and p99 wrk's own; with ``httpx``, the harness's percentiles)

    .venv/bin/python -m benchmarks.sharing_load [--clients 20] [--generator wrk|httpx] [--seconds 10]
        [--requests 50] [--barriers 50] [--sqlite] [--api-server [--workers 1]]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from benchmarks.harness import REPO, median, module_command, parser, percentile, report
from benchmarks.wrk_clients import run_wrk
from dev.wordcount_writer import TOPOLOGY, WordcountWriter

QUERY = f"/shares/{TOPOLOGY}/schemas/wc/tables/word_count/query"


def build(url: str, warehouse: Path, barriers: int) -> None:
    """The wordcount topology with ``barriers`` barriers WRITTEN in all three tables."""
    from airflow_provider_tsb.metastore.store import MetaStore

    store = MetaStore(url)
    store.migrate()
    writer = WordcountWriter(store, warehouse)
    for _ in range(barriers):
        writer.commit_next()
    store.dispose()


def serve(url: str, port: int) -> None:
    """Serve the sharing routes of the metastore at ``url`` on 127.0.0.1:``port`` (the server
    process), with the api-server's settings: listings checked once a second, the heap frozen."""
    import uvicorn

    from airflow_provider_tsb.api.heap import FreezeHeapMiddleware
    from airflow_provider_tsb.api.sharing.cache import DEFAULT_CHECK_SECONDS
    from airflow_provider_tsb.api.sharing.routes import create_sharing_app
    from airflow_provider_tsb.metastore.store import MetaStore

    app = create_sharing_app(MetaStore(url), seconds=300, check_seconds=DEFAULT_CHECK_SECONDS)
    app.add_middleware(FreezeHeapMiddleware)  # as the tsb plugin has in the api-server
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hammer(base: str, token: str, clients: int, requests: int, barriers: int, query: bool
           ) -> tuple[list[float], int]:
    """``clients`` threads, ``requests`` each (``token``: the bearer token, if any); returns
    (latencies in ms, errors)."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    start = threading.Barrier(clients)

    def client(seed: int) -> None:
        rng = random.Random(seed)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        with httpx.Client(base_url=base, timeout=30.0, headers=headers) as http:
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


WRK_SCRIPT = """
init = function(args)
  math.randomseed(7)
  barriers = tonumber(os.getenv("TSB_BARRIERS"))
  query = os.getenv("TSB_QUERY") == "1"
  token = os.getenv("TSB_TOKEN") or ""
  bad = 0
end
request = function()
  local headers = {}
  if token ~= "" then headers["Authorization"] = "Bearer " .. token end
  if query then
    headers["Content-Type"] = "application/json"
    return wrk.format("POST", nil, headers, '{"version": ' .. math.random(1, barriers) .. '}')
  end
  return wrk.format("GET", nil, headers)
end
response = function(status, headers, body)
  if status ~= 200 or (query and not string.find(body, '"file"', 1, true)) then bad = bad + 1 end
end
"""


def wrk(url: str, clients: int, seconds: int, barriers: int, query: bool, tmp: str,
        token: str = "") -> tuple[float, float, int, int]:
    """``clients`` connections of one ``wrk`` thread for ``seconds``: (p50 ms, p99 ms, answers, errors)."""
    env = {"TSB_BARRIERS": str(barriers), "TSB_QUERY": "1" if query else "0", "TSB_TOKEN": token}
    return run_wrk(url, clients, seconds, WRK_SCRIPT, env, tmp, "sharing_load")


@dataclass
class Figures:
    """One run's figures (milliseconds; ``qps`` answers a second)."""

    q50: float
    q99: float
    b50: float
    b99: float
    answers: int
    qps: float
    errors: int


def measure(base: str, token: str, args: argparse.Namespace, tmp: str) -> Figures:
    """The baseline (``GET /shares``), then the queries, by the clients of ``args.generator``."""
    hammer(base, token, args.clients, 5, args.barriers, query=True)  # warm-up
    if args.generator == "wrk":
        b50, b99, _n, base_err = wrk(base + "/shares", args.clients, args.seconds, args.barriers, False, tmp, token)
        q50, q99, answers, err = wrk(base + QUERY, args.clients, args.seconds, args.barriers, True, tmp, token)
        return Figures(q50, q99, b50, b99, answers, answers / args.seconds, err + base_err)
    base_lat, base_err = hammer(base, token, args.clients, args.requests, args.barriers, query=False)
    began = time.perf_counter()
    lat, err = hammer(base, token, args.clients, args.requests, args.barriers, query=True)
    qps = len(lat) / (time.perf_counter() - began)
    return Figures(median(lat), percentile(lat, 99), median(base_lat), percentile(base_lat, 99),
                   len(lat), qps, err + base_err)


@contextmanager
def metastore_url(sqlite: bool, tmp: str) -> Iterator[str]:
    """A metastore URL: SQLite in ``tmp``, else a database of a throwaway PostgreSQL (stopped after)."""
    if sqlite:
        yield f"sqlite:///{tmp}/tsb.db"
        return
    from dev.pg import start_postgres

    pg = start_postgres()
    try:
        yield pg.create_database("tsb_bench")
    finally:
        pg.stop()


@contextmanager
def standalone_server(url: str) -> Iterator[tuple[str, str]]:
    """The sharing routes under uvicorn in a process of their own: ``(base URL, no token)``."""
    port = _free_port()
    server = subprocess.Popen(module_command("sharing_load", "--serve", url, str(port)), cwd=REPO)
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
                raise RuntimeError("the sharing server did not start")
            time.sleep(0.2)
        yield base, ""
    finally:
        server.terminate()
        server.wait(20)


@contextmanager
def airflow_api_server(url: str, workers: int) -> Iterator[tuple[str, str]]:
    """The real Airflow api-server (``workers`` processes, ``[api] workers``) with the tsb plugin
    on metastore ``url``: ``(base URL, admin JWT)``. The caller's ``AIRFLOW__TSB__*`` variables
    (``[tsb]`` settings, e.g. ``AIRFLOW__TSB__SHARING_THREADS``) reach the api-server."""
    from dev.local_airflow import start_airflow

    env = {"TSB_METASTORE_URL": url, "AIRFLOW__API__WORKERS": str(workers),
           **{k: v for k, v in os.environ.items() if k.startswith("AIRFLOW__TSB__")}}
    af = start_airflow(components=("api-server",), env_extra=env)
    try:
        yield af.base_url + "/tsb/sharing", af.get_token()
    finally:
        af.stop()


def main() -> int:
    options = parser(__doc__, sqlite=True)
    options.add_argument("--clients", type=int, default=20)
    options.add_argument("--requests", type=int, default=50, help="httpx: queries per client")
    options.add_argument("--barriers", type=int, default=50)
    options.add_argument("--generator", choices=("wrk", "httpx"), default="wrk" if shutil.which("wrk") else "httpx",
                         help="the clients: wrk (C, default when installed) or httpx threads")
    options.add_argument("--seconds", type=int, default=10, help="wrk: seconds of each run")
    options.add_argument("--api-server", action="store_true", help="serve through the real Airflow api-server")
    options.add_argument("--workers", type=int, default=1, help="--api-server: its processes ([api] workers)")
    options.add_argument("--serve", nargs=2, metavar=("URL", "PORT"), help=argparse.SUPPRESS)
    args = options.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return 0
    if args.generator == "httpx":
        print("note: the clients are Python threads on the server's cores (wrk not on the PATH, or --generator "
              "httpx): their CPU is in the figures; apt-get install wrk for the server's own", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="tsb-sharing-load-") as tmp, metastore_url(args.sqlite, tmp) as url:
        build(url, Path(tmp) / "wh", args.barriers)
        server = airflow_api_server(url, args.workers) if args.api_server else standalone_server(url)
        with server as (base, token):
            fig = measure(base, token, args, tmp)
    served = f"the Airflow api-server ({args.workers} worker)" if args.api_server else "the sharing routes alone"
    print(f"queries: {fig.answers}, {args.barriers} barriers, metastore {'SQLite' if args.sqlite else 'PostgreSQL'}, "
          f"served by {served}")
    report("sharing_load", clients=args.clients, p50_ms=round(fig.q50, 1), p99_ms=round(fig.q99, 1), errors=fig.errors,
           baseline_p50_ms=round(fig.b50, 1), baseline_p99_ms=round(fig.b99, 1), qps=round(fig.qps),
           generator=args.generator)
    return 0 if fig.errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
