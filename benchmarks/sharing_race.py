"""Pinned multi-table Delta Sharing reads racing barrier commits (issue 24 goal: 0 mixed cuts in
at least 1,000 reads).

The word count topology (:class:`dev.wordcount_writer.WordcountWriter`) with ``--preload``
barriers, its metastore on a throwaway PostgreSQL (``--sqlite``: SQLite), served by the sharing
routes in a process of their own (``--api-server``: the real Airflow api-server, the admin's
JWT in the profile). While a writer thread commits a barrier every ``--interval`` seconds,
``--readers`` threads make ``--reads`` pinned reads with the official ``delta-sharing`` client:
the share's version of ``count_of_counts``, then the three tables at that version
(:func:`dev.sharing_race.race`). A read breaking the FLIP-276 invariants is a mixed cut.
Last line::

    reads=<n> mixed=<n> errors=<n> barriers=<committed during the race> versions=<distinct read> seconds=<s> load=<l>

    .venv/bin/python -m benchmarks.sharing_race [--reads 1000] [--readers 4] [--interval 0.05] [--sqlite] [--api-server]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import parser, report
from benchmarks.sharing_load import airflow_api_server, metastore_url, standalone_server
from dev.sharing_race import race, write_profile
from dev.wordcount_writer import WordcountWriter


def main() -> int:
    options = parser(__doc__, sqlite=True)
    options.add_argument("--reads", type=int, default=1000)
    options.add_argument("--readers", type=int, default=4)
    options.add_argument("--interval", type=float, default=0.05, help="seconds between committed barriers")
    options.add_argument("--preload", type=int, default=5, help="barriers committed before the race")
    options.add_argument("--api-server", action="store_true", help="serve through the real Airflow api-server")
    args = options.parse_args()
    from airflow_provider_tsb.metastore.store import MetaStore

    with tempfile.TemporaryDirectory(prefix="tsb-sharing-race-") as tmp, metastore_url(args.sqlite, tmp) as url:
        store = MetaStore(url)
        store.migrate()
        writer = WordcountWriter(store, Path(tmp) / "wh")
        for _ in range(args.preload):
            writer.commit_next()
        server = airflow_api_server(url, 1) if args.api_server else standalone_server(url)
        with server as (base, token):
            profile = write_profile(Path(tmp) / "race.share", base, token)
            began = time.perf_counter()
            result = race(profile, writer, reads=args.reads, readers=args.readers, interval_s=args.interval)
            seconds = time.perf_counter() - began
        store.dispose()
    for line in result.examples[:10]:
        print("  " + line)
    report("sharing_race", reads=result.reads, mixed=result.mixed, errors=result.errors, barriers=result.barriers,
           versions=len(result.versions), seconds=round(seconds, 1))
    return 0 if result.mixed == result.errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
