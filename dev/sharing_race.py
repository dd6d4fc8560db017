"""Pinned multi-table reads over Delta Sharing racing barrier commits (issue 24: "0 mixed cuts").

A :class:`~dev.wordcount_writer.WordcountWriter` thread commits barriers while reader
threads, each with only the official ``delta-sharing`` client, ask the share's version of
``count_of_counts`` and read the three word count tables at that version. A read whose three
tables break the FLIP-276 invariants (:func:`~dev.wordcount_writer.cut_errors`) is a
*mixed cut*. The root table is compacted every :data:`COMPACT_EVERY` barriers (a commit
without a barrier, as ``OPTIMIZE`` would), so a read fetches a bounded number of files.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from dev.wordcount_writer import CC, WC, WORDS, WordcountWriter, cut_errors

COMPACT_EVERY = 10


@dataclass
class RaceResult:
    """What the readers saw: ``reads`` pinned reads, ``mixed`` of them mixed cuts, ``errors``
    failed requests; ``barriers`` committed during the race; ``examples`` of what went wrong."""

    reads: int = 0
    mixed: int = 0
    errors: int = 0
    barriers: int = 0
    versions: set[int] = field(default_factory=set)
    examples: list[str] = field(default_factory=list)


def write_profile(path: Path, endpoint: str, token: str = "") -> str:
    """A Delta Sharing profile file for ``endpoint`` (``token``: the bearer token); its path."""
    import json

    path.write_text(json.dumps({"shareCredentialsVersion": 1, "endpoint": endpoint, "bearerToken": token or "-"}))
    return str(path)


def _url(profile: str, table: str) -> str:
    _catalog, schema, name = table.split(".")
    return f"{profile}#wordcount.{schema}.{name}"


def race(profile: str, writer: WordcountWriter, *, reads: int, readers: int, interval_s: float) -> RaceResult:
    """``readers`` threads make ``reads`` pinned reads in all while ``writer`` commits a barrier
    every ``interval_s`` seconds; returns what they saw."""
    import delta_sharing

    result, lock, done = RaceResult(), threading.Lock(), threading.Event()

    def write() -> None:
        while not done.is_set():
            writer.commit_next()
            if writer.barrier % COMPACT_EVERY == 0:
                from deltalake import DeltaTable

                DeltaTable(writer.locations[WORDS]).optimize.compact()
            with lock:
                result.barriers += 1
            time.sleep(interval_s)

    def read() -> None:
        while True:
            with lock:
                if result.reads + result.errors >= reads:
                    return
            try:
                version = delta_sharing.get_table_version(_url(profile, CC))
                frames = {t: delta_sharing.load_as_pandas(_url(profile, t), version=version) for t in (WORDS, WC, CC)}
            except Exception as exc:  # a failed request is counted, not a mixed cut
                with lock:
                    result.errors += 1
                    result.examples.append(f"error: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            wrong = cut_errors(version, frames)
            with lock:
                result.reads += 1
                result.versions.add(version)
                if wrong:
                    result.mixed += 1
                    result.examples.append(f"barrier {version}: {'; '.join(wrong)}")

    writing = threading.Thread(target=write, daemon=True)
    writing.start()
    threads = [threading.Thread(target=read) for _ in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    writing.join(60)
    return result
