"""The barrier feed's batches of ready barriers (``BarrierFeed.next_plans_after``, what a streaming
micro-batch takes on either engine): in order, at most ``limit``, never past ``until_barrier``
or ``max_barriers``, and nothing after a final barrier (FLIP-147); the ``spark-submit`` engine's
source offering them as offset ranges; a replayed micro-batch's group starting after what the
sink holds. On a real plan file over real Delta tables."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_tsb.delta.roots import append_rows
from airflow_provider_tsb.spark.barrier_source import BarrierFeed
from airflow_provider_tsb.spark.catalog import PlanFile, PlanFileCatalog

ROOT = "raw.events"


def _catalog(tmp_path: Path, barriers: int, final_at: int | None = None) -> tuple[PlanFileCatalog, dict[str, str]]:
    location = str(tmp_path / "events")
    plan = PlanFile(str(tmp_path / "plan.json"))
    plan.set_tables({ROOT: location})
    for n in range(1, barriers + 1):
        append_rows(location, pa.table({"id": [n]}))
        plan.append_barrier([ROOT], final=n == final_at)
    return PlanFileCatalog(plan.path), {ROOT: location}


def test_ready_barriers_come_in_batches_of_at_most_the_limit(tmp_path: Path) -> None:
    catalog, sources = _catalog(tmp_path, 7)
    feed = BarrierFeed(catalog.spec(), "job", sources, catalog=catalog)
    first = feed.next_plans_after(-1, 3)
    assert [p.barrier for p in first] == [1, 2, 3]
    # each plan's previous inputs are the inputs of the plan before it: one epoch each
    assert [p.previous_barrier for p in first] == [None, 1, 2]
    assert first[1].previous_inputs == first[0].inputs and first[2].previous_inputs == first[1].inputs
    assert [p.barrier for p in feed.next_plans_after(3, 3)] == [4, 5, 6]
    assert [p.barrier for p in feed.next_plans_after(6, 3)] == [7]
    assert feed.next_plans_after(7, 3) == []
    assert feed.next_after(2).barrier == 3  # the one-barrier form is the same rule


def test_a_batch_stops_at_until_barrier_max_barriers_and_a_final_barrier(tmp_path: Path) -> None:
    catalog, sources = _catalog(tmp_path, 7, final_at=5)
    until = BarrierFeed(catalog.spec(), "job", sources, catalog=catalog, until_barrier=4)
    assert [p.barrier for p in until.next_plans_after(-1, 16)] == [1, 2, 3, 4]
    assert until.next_plans_after(4, 16) == []
    bounded = BarrierFeed(catalog.spec(), "job", sources, catalog=catalog, max_barriers=3)
    assert [p.barrier for p in bounded.next_plans_after(-1, 16)] == [1, 2, 3]
    assert bounded.next_plans_after(3, 16) == []
    # offered again (a replay after a restart) is not a new barrier: it does not count twice
    assert [p.barrier for p in bounded.next_plans_after(1, 16)] == [2, 3]
    final = BarrierFeed(catalog.spec(), "job", sources, catalog=catalog)
    assert [p.barrier for p in final.next_plans_after(2, 16)] == [3, 4, 5]
    assert final.final == 5 and final.ended(5) and final.next_plans_after(5, 16) == []


def test_the_stream_reader_offers_ranges_of_ready_barriers_and_replays_them(tmp_path: Path) -> None:
    """The ``spark-submit`` engine's source (``TsbStreamReader``): a micro-batch ``(start, end]``
    holds up to ``max_barriers_per_trigger`` ready barriers, and its partition the plans of every
    one of them in order, the same when Spark replays the range from its checkpoint."""
    import json

    from airflow_provider_tsb.spark.barrier_source import TsbStreamReader

    catalog, sources = _catalog(tmp_path, 7)

    def reader(per_trigger: str | None) -> TsbStreamReader:
        options = {"catalog": json.dumps(catalog.spec()), "job_id": "job", "sources": json.dumps(sources),
                   "start_after": "-1"}
        return TsbStreamReader(options if per_trigger is None else {**options, "max_barriers_per_trigger": per_trigger})

    def barriers(r: TsbStreamReader, start: int, end: int) -> list[int]:
        parts = r.partitions({"barrier": start}, {"barrier": end})
        rows = [row for part in parts for row in r.read(part)]
        assert [json.loads(plan)["barrier"] for _, plan in rows] == [b for b, _ in rows]
        return [b for b, _ in rows]

    grouped = reader("3")
    assert grouped.latestOffset({"barrier": -1}) == {"barrier": 3}
    assert barriers(grouped, -1, 3) == [1, 2, 3]
    assert grouped.latestOffset({"barrier": 3}) == {"barrier": 6}
    assert barriers(grouped, 3, 6) == [4, 5, 6]
    assert barriers(reader("3"), 3, 6) == [4, 5, 6]  # a restarted query replays the range it logged
    assert grouped.latestOffset({"barrier": 6}) == {"barrier": 7}
    assert barriers(grouped, 7, 7) == []
    single = reader(None)  # without the option: a barrier per micro-batch, as before
    assert single.latestOffset({"barrier": 2}) == {"barrier": 3}
    assert barriers(single, 2, 3) == [3]
    with pytest.raises(RuntimeError, match=r"micro-batch \(2, 9\] expected barrier 9 after 2, catalog returned "
                       r"\[3, 4, 5, 6, 7\]"):
        barriers(single, 2, 9)


def test_a_replayed_micro_batch_starts_its_group_after_the_barriers_its_sinks_hold(tmp_path: Path) -> None:
    """A micro-batch Spark replays from its checkpoint after a failure may begin with barriers the
    sink already committed: each is skipped (WRITTEN re-reported from the log) and hands the
    group's start on, so the barriers left are still staged together by the first of them."""
    from deltalake import Schema as DeltaSchema

    from airflow_provider_tsb.delta.commit import commit_barrier_files
    from airflow_provider_tsb.delta.conventions import BarrierTag
    from airflow_provider_tsb.spark.app_run import AppRun
    from airflow_provider_tsb.spark.barrier_group import BarrierGroup
    from airflow_provider_tsb.spark.model import Sink, TsbApp
    from airflow_provider_tsb.spark.runner import run_barrier

    catalog, sources = _catalog(tmp_path, 5)
    sink = str(tmp_path / "out")
    for barrier in (1, 2, 3):  # the sink holds barriers 1-3
        commit_barrier_files(sink, [], tag=BarrierTag(barrier, "job"), mode="append",
                             schema=DeltaSchema.from_arrow(pa.schema([("id", pa.int64())])))
    app = TsbApp("job", {ROOT: None}, {"out": Sink()}, lambda ctx: {})
    plans = BarrierFeed(catalog.spec(), "job", sources, catalog=catalog).next_plans_after(1, 4)
    group = BarrierGroup(plans)
    assert group.first == 2
    for plan in plans[:2]:  # no Spark needed: a committed barrier is never processed
        [result] = run_barrier(AppRun(None, app, None, {**sources, "out": sink}), plan, group=group)  # type: ignore[arg-type]
        assert result.skipped and result.barrier == plan.barrier and result.version == plan.barrier - 1
    assert group.first == 4 and [p.barrier for p in group.plans] == [4, 5]
