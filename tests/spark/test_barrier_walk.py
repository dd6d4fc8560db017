"""A barrier's plan visits each module of the package once, in order (issue 22, "Done when").

``dev/barrier_walk.py`` traces ``run_barrier`` of the word count's two jobs (a merge sink fed by
the root's changes and its own previous state, an overwrite sink over an intermediate input)
in a batch run on the metastore catalog, as the operator's jobs run. The plan's walk leaves
out the app's own reads of its context and the calls into the control plane (the catalog, the
input lease, the report queue, the commit protocol's ``Reports``), which the walk lists apart
at their place.
"""

from __future__ import annotations

from typing import Any

import pytest

from dev.barrier_walk import walk_wordcount


@pytest.mark.parametrize("barrier", [2, 3])
def test_the_plan_of_a_barrier_visits_each_module_once_in_order(spark: Any, barrier: int) -> None:
    walks = dict(walk_wordcount(spark, barrier))
    assert sorted(walks) == ["wordcount_counts", "wordcount_words"]
    for job_id, walk in walks.items():
        modules = [stop.split(":")[0] for stop in walk.stops]
        assert len(modules) == len(set(modules)), (job_id, walk.stops)
        assert walk.revisits == 0 and walk.climbs == [], (job_id, walk.stops, walk.climbs)
        # the layers in order: the start, the sink's log, the context, the commit protocol
        assert modules[:5] == ["spark.runner", "delta.sink_log", "delta.snapshots", "delta.barriers", "spark.model"]
        assert modules[5] == "spark.barrier_commit" and modules.index("delta.commit") > modules.index("spark.outputs")
        assert modules[-1] == "spark.outputs_staging"  # the orphan attempts go after WRITTEN
        reports = [m for _, m in walk.messages]
        processed = [i for i, m in enumerate(reports) if m.endswith(":before")]
        assert len(processed) == 1 and reports.index("spark.barrier_reports:finish") > processed[0], reports
    words = walks["wordcount_words"]
    assert [read[0] for _, read in words.app_reads] == [
        "spark.model:changes", "spark.epochs:change_sign", "spark.model:previous"]
    assert {"spark.outputs_merge", "spark.outputs_compaction"} <= {s.split(":")[0] for s in words.stops}
