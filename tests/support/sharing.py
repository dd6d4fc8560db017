"""The FLIP-276 wordcount topology on real Delta tables, as the Delta Sharing tests read it.

Root ``words(word)`` -> job ``wc_job`` -> ``word_count(word, cnt)`` -> job ``cc_job`` ->
``count_of_counts(cnt, cnt2)``; :func:`build_wordcount` commits :data:`BATCHES` as barriers.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa

from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.topology import Topology
from tests.support.metaservice import write

TOPOLOGY = "wordcount"
WORDS, WC, CC = "tsb.wc.words", "tsb.wc.word_count", "tsb.wc.count_of_counts"
BATCHES = [["a", "b", "a"], ["c", "a"], ["b", "d", "d", "e"], ["a", "z"]]
WORD = pa.schema([("word", pa.string())])
COUNT = pa.schema([("word", pa.string()), ("cnt", pa.int64())])
COUNTS = pa.schema([("cnt", pa.int64()), ("cnt2", pa.int64())])


def build_wordcount(store: MetaStore, warehouse: Path, barriers: int = 4, committed: int = 3) -> None:
    topo = Topology(TOPOLOGY, warehouse=str(warehouse))
    topo.root_table("wc.words")
    topo.job("wc_job", "wc.py", sources=["wc.words"], sinks=["wc.word_count"])
    topo.job("cc_job", "cc.py", sources=["wc.word_count"], sinks=["wc.count_of_counts"])
    store.registry.register_topology(topo)
    loc = {t: store.registry.table(t).location for t in (WORDS, WC, CC)}
    seen: list[str] = []
    for k, batch in enumerate(BATCHES[:barriers], start=1):
        write(loc[WORDS], WORD, [(w,) for w in batch], "append", None, None)
        store.barriers.create(TOPOLOGY, {WORDS: k - 1}, run_key=f"r{k}")
        seen.extend(batch)
        counts = Counter(seen)
        write(loc[WC], COUNT, sorted(counts.items()), "overwrite", k, "wc_job")
        store.table_states.record_written(WC, k, k - 1, "wc_job")
        if k <= committed:
            write(loc[CC], COUNTS, sorted(Counter(counts.values()).items()), "overwrite", k, "cc_job")
            store.table_states.record_written(CC, k, k - 1, "cc_job")
