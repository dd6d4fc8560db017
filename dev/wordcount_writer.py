"""A writer of the FLIP-276 word count's tables, barrier after barrier, without Spark.

``words(word)`` (root, append) -> ``word_count(word, cnt)`` (overwrite) -> ``count_of_counts(cnt,
cnt2)`` (overwrite), each committed with delta-rs and reported to the metastore as the jobs
would (the root's version in the barrier, WRITTEN for the two sinks). Every barrier appends
:data:`WORDS_PER_BARRIER` words, so a consistent cut at barrier ``n`` satisfies
(:func:`cut_errors`): ``len(words) == WORDS_PER_BARRIER * n``, ``sum(word_count.cnt) ==
len(words)``, ``sum(count_of_counts.cnt2) == len(word_count)``. Used by the Delta Sharing
benchmarks and the race test.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake

TOPOLOGY = "wordcount"
WORDS, WC, CC = "tsb.wc.words", "tsb.wc.word_count", "tsb.wc.count_of_counts"
WORDS_PER_BARRIER = 50


def _write(location: str, table: pa.Table, mode: str, barrier: int | None, job: str | None) -> None:
    props = None if barrier is None else CommitProperties(custom_metadata={"tsb.barrier": str(barrier),
                                                                           "tsb.job": job or ""})
    write_deltalake(location, table, mode=mode, commit_properties=props)


class WordcountWriter:
    """Registers the word count topology in ``store`` (a ``MetaStore``) with its tables under
    ``warehouse`` and commits its barriers one by one (:meth:`commit_next`)."""

    def __init__(self, store: Any, warehouse: Path, seed: int = 7) -> None:
        from airflow_provider_tsb.topology import Topology

        self.store = store
        topo = Topology(TOPOLOGY, warehouse=str(warehouse))
        topo.root_table("wc.words")
        topo.job("wc_job", "wc.py", sources=["wc.words"], sinks=["wc.word_count"])
        topo.job("cc_job", "cc.py", sources=["wc.word_count"], sinks=["wc.count_of_counts"])
        store.registry.register_topology(topo)
        self.locations = {t: store.registry.table(t).location for t in (WORDS, WC, CC)}
        self.barrier = 0
        self._rng = random.Random(seed)
        self._seen: Counter[str] = Counter()

    def commit_next(self) -> int:
        """Commit the next barrier in all three tables (COMMIT over the topology); its id."""
        k, loc = self.barrier + 1, self.locations
        batch = [f"w{self._rng.randrange(200)}" for _ in range(WORDS_PER_BARRIER)]
        _write(loc[WORDS], pa.table({"word": batch}), "append", None, None)
        root_version = DeltaTable(loc[WORDS]).version()  # not k - 1 once the root was compacted
        self.store.barriers.create(TOPOLOGY, {WORDS: root_version}, run_key=f"r{k}")
        self._seen.update(batch)
        _write(loc[WC], pa.table({"word": list(self._seen), "cnt": list(self._seen.values())}), "overwrite", k,
               "wc_job")
        self.store.table_states.record_written(WC, k, k - 1, "wc_job")
        counts = Counter(self._seen.values())
        _write(loc[CC], pa.table({"cnt": list(counts), "cnt2": list(counts.values())}), "overwrite", k, "cc_job")
        self.store.table_states.record_written(CC, k, k - 1, "cc_job")
        self.barrier = k
        return k


def cut_errors(barrier: int, frames: Mapping[str, Any]) -> list[str]:
    """What breaks the FLIP-276 invariants in ``frames`` (``{table: pandas.DataFrame}``) read at
    ``barrier`` (see module doc); empty for a consistent cut."""
    words, wc, cc = frames[WORDS], frames[WC], frames[CC]
    errors = []
    if len(words) != WORDS_PER_BARRIER * barrier:
        errors.append(f"words has {len(words)} rows at barrier {barrier}, not {WORDS_PER_BARRIER * barrier}")
    if int(wc["cnt"].sum()) != len(words):
        errors.append(f"sum(word_count.cnt) = {int(wc['cnt'].sum())} but words has {len(words)} rows")
    if int(cc["cnt2"].sum()) != len(wc):
        errors.append(f"sum(count_of_counts.cnt2) = {int(cc['cnt2'].sum())} but word_count has {len(wc)} rows")
    return errors
