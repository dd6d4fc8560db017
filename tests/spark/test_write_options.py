"""Who writes a sink's commit: the ``writer`` option, and the tag Delta's writer leaves (unit)."""

from __future__ import annotations

import pytest

from airflow_provider_tsb.delta.conventions import BarrierTag, parse_tag
from airflow_provider_tsb.spark.model import Sink
from airflow_provider_tsb.spark.write_options import WRITER_VARIABLE, WriteOptions


def test_a_sink_takes_its_writer_from_itself_then_the_environment(monkeypatch) -> None:
    monkeypatch.delenv(WRITER_VARIABLE, raising=False)
    assert Sink().options.writer == "staged"
    monkeypatch.setenv(WRITER_VARIABLE, "delta")
    assert Sink().options.writer == "delta"
    assert Sink(writer="staged").options.writer == "staged"
    monkeypatch.setenv(WRITER_VARIABLE, "parquet")
    with pytest.raises(ValueError, match=r"unknown sink writer 'parquet'.*TSB_SINK_WRITER"):
        Sink().options  # noqa: B018
    with pytest.raises(ValueError, match="unknown sink writer 'x'"):
        WriteOptions(writer="x")  # type: ignore[arg-type]


def test_the_tag_is_read_from_user_metadata_when_delta_wrote_the_commit() -> None:
    tag = BarrierTag(barrier=7, job_id="j", inputs={"tsb.raw.a": 3}, ts_ms=-28944000000, attempt="ab12")
    assert parse_tag({"userMetadata": tag.user_metadata(), "operation": "MERGE"}) == tag
    assert parse_tag(tag.to_metadata()) == tag
    for foreign in ("nightly load", '{"tsb.barrier": "7"}', "[1]", '{"other": 1}', None):
        assert parse_tag({"userMetadata": foreign}) is None, foreign


def test_only_a_tag_in_user_metadata_alone_is_delta_s_writer() -> None:
    from airflow_provider_tsb.delta.conventions import written_by_delta

    tag = BarrierTag(barrier=3, job_id="j")
    assert written_by_delta({"userMetadata": tag.user_metadata()})
    assert not written_by_delta(tag.to_metadata())  # the staged writer's commit holds the keys too
    assert not written_by_delta({"userMetadata": "a user's note"}) and not written_by_delta(None)
