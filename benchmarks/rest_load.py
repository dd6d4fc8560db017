"""The MetaService REST API under many readers while barriers are generated (issue 25 item 3).

The real Airflow 3 api-server with the tsb plugin (:func:`dev.local_airflow.start_airflow`,
only the ``api-server`` component; Airflow's metadata DB on SQLite, SimpleAuthManager, the admin
JWT from ``POST /auth/token``), the tsb metastore on a throwaway PostgreSQL (:mod:`dev.pg`,
``TSB_METASTORE_URL``). A chain topology (a root table and ``--tables`` jobs, one sink each) has
``--preload`` barriers; a generator thread in this process keeps generating barriers (each table
PROCESSED, then WRITTEN, in chain order) every ``--interval`` seconds during the run.

``--clients`` threads send ``--requests`` requests each, a mix of ``POST /tsb/api/v1/versions``
(REPEATABLE_READ, READ_COMMITTED, AS OF a committed barrier, ``min_barrier``, and a lease) on
random subsets Q of the tables, and ``GET /tsb/api/v1/delays``. Every answer is checked after
the run against the in-process resolution (``store.resolution.resolve`` AS OF the answer's
barrier; a PROCESSED table of a READ_COMMITTED answer against its previous WRITTEN version and
the staged manifest written): ``wrong`` counts answers that differ, including a barrier older
than the newest committed before the request was sent or newer than the newest started when
the answer came back. ``errors`` counts non-2xx answers and transport failures.

The baseline is ``GET /tsb/api/v1/health`` (authenticated, no metastore work) by the same
clients in the same run, before the load. Also printed: the p50 of each request kind and the CPU
milliseconds per request of the api-server (with its workers), PostgreSQL and this process (the
clients and the generator), measured with psutil: on a shared machine the load average alone
does not say what the api-server costs. ``--profile FILE`` records the api-server with py-spy
(``pip install py-spy``) as collapsed stacks. Last lines::

    baseline clients=<n> p50_ms=<q> p99_ms=<q> errors=<n>
    clients=<n> p50_ms=<q> p99_ms=<q> errors=<n> wrong=<n> load=<1-min load average, lowest-highest over the load>

(with ``wrk``, the p50 and p99 wrk's own; with ``--generator httpx``, the harness's percentiles)

    .venv/bin/python -m benchmarks.rest_load [--clients 50] [--requests 40] [--tables 8] [--workers 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness import LoadWatch, line, median, parser, percentile, report
from benchmarks.wrk_clients import run_wrk

TOPOLOGY = "restload"
ROOT = "tsb.rl.src"
API = "/tsb/api/v1"


def table_names(n: int) -> list[str]:
    """The chain's sinks ``tsb.rl.t1 .. tsb.rl.t<n>`` (the root table not included)."""
    return [f"tsb.rl.t{i}" for i in range(1, n + 1)]


def manifest_of(table: str, barrier: int) -> dict[str, Any]:
    """The staged manifest the generator records for ``table`` at ``barrier`` (checked in answers)."""
    return {"files": [f"_tsb_staging/{table}/{barrier}/part-0.parquet"]}


@dataclass
class Generator:
    """Generates barriers in the metastore; ``committed``/``started`` bracket the answers."""

    store: Any
    tables: list[str]
    interval: float
    committed: int = 0
    started: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def barrier(self, k: int) -> None:
        self.started = k
        self.store.barriers.create(TOPOLOGY, {ROOT: k}, run_key=f"r{k}")
        for i, table in enumerate(self.tables, start=1):
            job = f"job{i}"
            self.store.table_states.record_processed(table, k, job, manifest_of(table, k))
            self.store.table_states.record_written(table, k, k, job)
        self.committed = k

    def run(self) -> None:
        k = self.committed
        while not self.stop.is_set():
            k += 1
            self.barrier(k)
            self.stop.wait(self.interval)


def build(url: str, warehouse: Path, tables: int, preload: int, interval: float) -> Generator:
    """Register the chain topology and generate ``preload`` barriers; returns the generator."""
    from airflow_provider_tsb.metastore.store import MetaStore
    from airflow_provider_tsb.topology import Topology

    store = MetaStore(url)
    store.migrate()
    topo = Topology(TOPOLOGY, warehouse=str(warehouse))
    topo.root_table("rl.src")
    previous = "rl.src"
    for i in range(1, tables + 1):
        topo.job(f"job{i}", f"job{i}.py", sources=[previous], sinks=[f"rl.t{i}"])
        previous = f"rl.t{i}"
    store.registry.register_topology(topo)
    gen = Generator(store, table_names(tables), interval)
    for k in range(1, preload + 1):
        gen.barrier(k)
    return gen


@dataclass
class Sample:
    kind: str
    body: dict[str, Any] | None
    low: int
    high: int
    ms: float
    status: int
    answer: Any


def request_body(rng: random.Random, names: list[str], low: int) -> tuple[str, dict[str, Any]]:
    """A random ``POST /versions`` body of one of the five kinds."""
    q = rng.sample(names, rng.randint(2, min(5, len(names))))
    kind = rng.choice(["repeatable", "repeatable", "committed", "as_of", "monotonic", "lease"])
    body: dict[str, Any] = {"tables": q, "level": "REPEATABLE_READ"}
    if kind == "committed":
        body["level"] = "READ_COMMITTED"
    elif kind == "as_of":
        body["as_of"] = rng.randint(1, low)
    elif kind == "monotonic":
        body["min_barrier"] = low
    elif kind == "lease":
        body["lease_seconds"] = 30
    return kind, body


def hammer(base: str, token: str, gen: Generator, clients: int, requests: int, baseline: bool) -> list[Sample]:
    """``clients`` threads x ``requests`` requests; the health route when ``baseline``."""
    samples: list[Sample] = []
    lock = threading.Lock()
    start = threading.Barrier(clients)

    def client(seed: int) -> None:
        rng = random.Random(seed)
        out = []
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=base, timeout=60.0, headers=headers) as http:
            start.wait()
            for _ in range(requests):
                low = gen.committed
                kind, body = ("health", None) if baseline else request_body(rng, gen.tables, low)
                if not baseline and rng.random() < 0.15:
                    kind, body = "delays", None
                began = time.perf_counter()
                try:
                    if kind == "health":
                        r = http.get(f"{API}/health")
                    elif kind == "delays":
                        r = http.get(f"{API}/delays", params={"topology": TOPOLOGY, "limit": 10})
                    else:
                        r = http.post(f"{API}/versions", json=body)
                    status, answer = r.status_code, r.json()
                except (httpx.HTTPError, ValueError) as exc:
                    status, answer = 0, repr(exc)
                ms = (time.perf_counter() - began) * 1000
                out.append(Sample(kind, body, low, gen.started, ms, status, answer))
        with lock:
            samples.extend(out)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return samples


WRK_SCRIPT = """
init = function(args)
  math.randomseed(tonumber(os.getenv("TSB_SEED")))
  names = {}
  for name in string.gmatch(os.getenv("TSB_TABLES"), "[^,]+") do table.insert(names, name) end
  low = tonumber(os.getenv("TSB_LOW"))
  topology = os.getenv("TSB_TOPOLOGY")
  headers = {["Authorization"] = "Bearer " .. os.getenv("TSB_TOKEN"), ["Content-Type"] = "application/json"}
  baseline = os.getenv("TSB_BASELINE") == "1"
  only = os.getenv("TSB_ONLY") or ""
  pause = tonumber(os.getenv("TSB_PAUSE_MS"))
  out = io.open(os.getenv("TSB_ANSWERS"), "w")
  out:setvbuf("line")
  bad = 0
end
delay = function() return math.random(0, 2 * pause) end
local kinds = {"repeatable", "repeatable", "committed", "as_of", "monotonic", "lease"}
request = function()
  if baseline then return wrk.format("GET", "/tsb/api/v1/health", headers) end
  if only ~= "" then kinds = {only} end
  if only == "delays" or (only == "" and math.random() < 0.15) then
    return wrk.format("GET", "/tsb/api/v1/delays?topology=" .. topology .. "&limit=10", headers)
  end
  local pool = {}
  for i, n in ipairs(names) do pool[i] = n end
  local q = {}
  for i = 1, math.random(2, math.min(5, #pool)) do
    table.insert(q, '"' .. table.remove(pool, math.random(1, #pool)) .. '"')
  end
  local kind = kinds[math.random(1, #kinds)]
  local body = '{"tables": [' .. table.concat(q, ",") .. ']'
  if kind == "committed" then body = body .. ', "level": "READ_COMMITTED"'
  elseif kind == "as_of" then body = body .. ', "as_of": ' .. math.random(1, low)
  elseif kind == "monotonic" then body = body .. ', "min_barrier": ' .. low
  elseif kind == "lease" then body = body .. ', "lease_seconds": 30' end
  return wrk.format("POST", "/tsb/api/v1/versions", headers, body .. "}")
end
response = function(status, headers, body)
  if status ~= 200 then bad = bad + 1 end
  out:write(status, "\\t", body, "\\n")
end
"""


def wrk(base: str, token: str, gen: Generator, clients: int, seconds: float, tmp: Path,
        baseline: bool = False, only: str = "", pause_ms: int = 0) -> tuple[list[Sample], dict[str, float]]:
    """``clients`` connections of one ``wrk`` thread for ``seconds`` sending the same mix as
    :func:`hammer` (a C client: its CPU stays off the server's cores). wrk does not tie an
    answer to its request, so each answer is checked on its own (:func:`wrong_versions` with
    the body the answer implies: its level, ``as_of`` and lease) and against the barriers
    committed before the run and started after it. Returns the answers as samples (``ms`` 0)
    and wrk's figures (``p50_ms``, ``p99_ms``)."""
    answers = tmp / "answers.tsv"
    low = gen.committed
    env = {"TSB_SEED": "7", "TSB_TABLES": ",".join(gen.tables), "TSB_LOW": str(low),
           "TSB_TOPOLOGY": TOPOLOGY, "TSB_TOKEN": token, "TSB_ANSWERS": str(answers),
           "TSB_BASELINE": "1" if baseline else "0", "TSB_ONLY": only, "TSB_PAUSE_MS": str(pause_ms)}
    p50, p99, requests, errors = run_wrk(base, clients, seconds, WRK_SCRIPT, env, tmp, "rest_load")
    high = gen.started
    samples = []
    for text_line in answers.read_text().splitlines():
        status, _, text = text_line.partition("\t")
        try:
            answer = json.loads(text)
        except ValueError:
            samples.append(Sample("unparsed", None, low, high, 0.0, 0, text[:200]))
            continue
        if baseline:
            samples.append(Sample("health", None, low, high, 0.0, int(status), answer))
            continue
        if "level" not in answer:
            samples.append(Sample("delays", None, low, high, 0.0, int(status), answer))
            continue
        body = {"tables": list(answer.get("tables", {})), "level": answer.get("level"), "as_of": answer.get("as_of")}
        if answer.get("lease"):
            body["lease_seconds"] = 30
        samples.append(Sample("versions", body, 0 if body["as_of"] else low, high, 0.0, int(status), answer))
    print(f"wrk: p50_ms={p50:.3f} p99_ms={p99:.3f} requests={requests} errors={errors}", flush=True)
    return samples, {"p50_ms": p50, "p99_ms": p99}


def wrong_versions(store: Any, s: Sample, cache: dict[tuple[str, int], Any]) -> str | None:
    """Why the ``POST /versions`` answer of ``s`` differs from the in-process resolve (None: equal)."""
    a, body = s.answer, s.body or {}
    b = a["barrier"]
    if body.get("as_of") is not None and b != body["as_of"]:
        return f"AS OF {body['as_of']} answered barrier {b}"
    if body.get("as_of") is None and not s.low <= b <= s.high:
        return f"barrier {b} outside [{s.low}, {s.high}] (committed before, started after)"
    if body.get("min_barrier") is not None and b < body["min_barrier"]:
        return f"barrier {b} below min_barrier {body['min_barrier']}"
    if body.get("lease_seconds") is not None and not (a.get("lease") or {}).get("id"):
        return "no lease in the answer"
    for name in body["tables"]:
        got = a["tables"][name]
        at = b if got["state"] == "WRITTEN" else b - 1  # PROCESSED: the previous WRITTEN version
        if (name, at) not in cache:
            cache[(name, at)] = store.resolution.resolve([name], "REPEATABLE_READ", as_of=at).tables[name]
        want = cache[(name, at)]
        if got["version"] != want.version or got["location"] != want.location or got["barrier"] != b:
            return f"{name}: got version {got['version']} at barrier {got['barrier']}, in-process {want.version}"
        if got["state"] == "PROCESSED" and (body["level"] != "READ_COMMITTED" or got["staged"] != manifest_of(name, b)):
            return f"{name}: PROCESSED answer {got} at level {body['level']}"
    return None


def check(store: Any, samples: list[Sample]) -> tuple[int, int, list[str]]:
    """(errors, wrong, first reasons) over ``samples``."""
    errors, wrong, reasons = 0, 0, []
    cache: dict[tuple[str, int], Any] = {}
    for s in samples:
        if not 200 <= s.status < 300:
            errors += 1
            reasons.append(f"{s.kind} {s.body}: HTTP {s.status} {str(s.answer)[:200]}")
            continue
        why = None
        if s.kind == "delays":
            ids = [d["barrier"] for d in s.answer["barriers"]]
            if s.answer["topology"] != TOPOLOGY or not ids or max(ids) > s.high or max(ids) < s.low:
                why = f"delays barriers {ids[:3]} outside [{s.low}, {s.high}]"
        elif s.kind != "health":
            why = wrong_versions(store, s, cache)
        if why:
            wrong += 1
            reasons.append(f"{s.kind} {s.body}: {why}")
    return errors, wrong, reasons[:5]


def figures(samples: list[Sample]) -> dict[str, float]:
    """``p50_ms`` and ``p99_ms`` of the samples (the httpx clients' latencies)."""
    ms = [s.ms for s in samples]
    return {"p50_ms": round(median(ms), 1), "p99_ms": round(percentile(ms, 99), 1)}


def start_profiler(out: str | None, pid: int) -> subprocess.Popen[bytes] | None:
    """py-spy (``pip install py-spy``) sampling the api-server and its workers into ``out``
    (collapsed stacks, one line per stack and its sample count), or nothing without ``out``."""
    if not out:
        return None
    spy = str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen([spy, "record", "--subprocesses", "--format", "raw", "--rate", "100", "-o", out,
                             "--pid", str(pid)], stdout=subprocess.DEVNULL)


def stop_profiler(profiler: subprocess.Popen[bytes] | None) -> None:
    if profiler is not None:
        profiler.send_signal(signal.SIGINT)
        profiler.wait(60)


def tree_cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of processes ``pids`` and all their live children (psutil)."""
    import psutil

    total = 0.0
    if pids == [os.getpid()]:  # this process alone (the clients and the generator), not the api-server
        t = psutil.Process().cpu_times()
        return t.user + t.system
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for proc in procs:
            try:
                t = proc.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
    return total


def cpu_phase(pids: dict[str, int], phase: Any) -> tuple[Any, dict[str, float]]:
    """Run ``phase()``; returns its result and the CPU seconds each process tree used meanwhile."""
    before = {k: tree_cpu_s([p]) for k, p in pids.items()}
    result = phase()
    return result, {k: tree_cpu_s([p]) - before[k] for k, p in pids.items()}


def load_phases(args: argparse.Namespace, base_url: str, token: str, gen: Generator, pids: dict[str, int],
                tmp: Path) -> tuple[list[Sample], dict[str, float], list[Sample], dict[str, float],
                                    list[dict[str, float]]]:
    """The baseline, then the load, by the clients of ``args.generator``: (baseline samples, their
    CPU, load samples, their CPU, the figures ``p50_ms``, ``p99_ms`` of baseline and load)."""
    if args.generator == "wrk":
        (base, base_figures), base_cpu = cpu_phase(
            pids, lambda: wrk(base_url, token, gen, args.clients, args.seconds, tmp, baseline=True,
                              pause_ms=args.pause_ms))
        profiler = start_profiler(args.profile, pids["api-server"])
        (samples, load_figures), cpu = cpu_phase(
            pids, lambda: wrk(base_url, token, gen, args.clients, args.seconds, tmp, only=args.only,
                              pause_ms=args.pause_ms))
        stop_profiler(profiler)
        return base, base_cpu, samples, cpu, [base_figures, load_figures]
    base, base_cpu = cpu_phase(pids, lambda: hammer(base_url, token, gen, args.clients, args.requests, True))
    profiler = start_profiler(args.profile, pids["api-server"])
    samples, cpu = cpu_phase(pids, lambda: hammer(base_url, token, gen, args.clients, args.requests, False))
    stop_profiler(profiler)
    return base, base_cpu, samples, cpu, [figures(base), figures(samples)]


def run(args: argparse.Namespace, url: str, tmp: Path, postmaster: int) -> int:
    from dev.local_airflow import start_airflow

    gen = build(url, tmp / "wh", args.tables, args.preload, args.interval)
    env = {"TSB_METASTORE_URL": url, "AIRFLOW__API__WORKERS": str(args.workers)}
    af = start_airflow(components=("api-server",), env_extra=env)
    thread = threading.Thread(target=gen.run, daemon=True)
    try:
        token = af.get_token()
        hammer(af.base_url, token, gen, args.clients, 3, baseline=False)  # warm-up
        thread.start()
        pids = {"api-server": af.processes["api-server"].pid, "postgres": postmaster, "clients": os.getpid()}
        with LoadWatch() as loads:
            base, base_cpu, samples, cpu, phases = load_phases(args, af.base_url, token, gen, pids, tmp)
    finally:
        gen.stop.set()
        af.stop()
    thread.join(30)
    base_err, _, _ = check(gen.store, base)
    errors, wrong, reasons = check(gen.store, samples)
    for reason in reasons:
        print("  " + reason)
    kinds = {k: sum(s.kind == k for s in samples) for k in sorted({s.kind for s in samples})}
    if args.generator == "httpx":
        by_kind = {k: f"{median([s.ms for s in samples if s.kind == k]):.0f}" for k in kinds}
        print(f"p50_ms by kind: {by_kind}")
    print(f"requests: {len(samples)} {kinds}; barriers {args.preload} preloaded, {gen.committed} at the end; "
          f"{args.tables} tables; api workers {args.workers}; clients {args.generator}")
    per = {k: f"{v * 1000 / len(samples):.1f}" for k, v in cpu.items()}
    base_per = {k: f"{v * 1000 / len(base):.1f}" for k, v in base_cpu.items()}
    print(f"CPU ms per request (api-server with its workers; PostgreSQL and this process incl. the generator): "
          f"load {per}, baseline {base_per}{' (py-spy attached)' if args.profile else ''}")
    if args.generator == "wrk":
        print(f"answers per second: {len(samples) / args.seconds:.0f}")
    print(f"baseline {line(clients=args.clients, **phases[0], errors=base_err)}")
    report("rest_load", clients=args.clients, **phases[1], errors=errors, wrong=wrong, load=loads.range)
    gen.store.dispose()
    return 0 if errors == wrong == base_err == 0 else 1


def main() -> int:
    options = parser(__doc__)
    options.add_argument("--clients", type=int, default=50)
    options.add_argument("--requests", type=int, default=40, help="requests per client")
    options.add_argument("--tables", type=int, default=8, help="jobs (sink tables) in the chain")
    options.add_argument("--preload", type=int, default=30, help="barriers generated before the run")
    options.add_argument("--interval", type=float, default=0.2, help="seconds between generated barriers")
    options.add_argument("--workers", type=int, default=1, help="api-server workers ([api] workers)")
    options.add_argument("--generator", choices=("wrk", "httpx"), default="wrk" if shutil.which("wrk") else "httpx",
                         help="the clients: wrk (C, default when installed) or httpx threads of this process")
    options.add_argument("--seconds", type=float, default=10.0, help="wrk: seconds of each phase")
    options.add_argument("--pause-ms", type=int, default=0,
                         help="wrk: each client waits this long between an answer and its next request (0: no pause)")
    kinds = ("", "repeatable", "committed", "as_of", "monotonic", "lease", "delays")
    options.add_argument("--only", default="", choices=kinds,
                         help="wrk: send only requests of this kind (the CPU per request of one kind)")
    options.add_argument("--profile", metavar="FILE", help="py-spy the api-server during the load (collapsed stacks)")
    args = options.parse_args()
    from dev.pg import start_postgres

    pg = start_postgres()
    try:
        with tempfile.TemporaryDirectory(prefix="tsb-rest-load-") as tmp:
            postmaster = int(Path(pg.data_dir, "postmaster.pid").read_text().split()[0])
            return run(args, pg.create_database("tsb_rest_load"), Path(tmp), postmaster)
    finally:
        pg.stop()


if __name__ == "__main__":
    sys.exit(main())
