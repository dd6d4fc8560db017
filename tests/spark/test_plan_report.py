"""The plan-file catalog's report: JSON Lines appended per report (flat in history), folded back
by ``read_report``; a repeated WRITTEN report counted once; a ``tsb-report/1`` file still read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_provider_tsb.spark.catalog import PlanFileCatalog, read_report


def test_reports_are_appended_lines_folded_by_read_report(tmp_path: Path) -> None:
    report = tmp_path / "plan.report"
    catalog = PlanFileCatalog(str(tmp_path / "plan.json"), str(report))
    catalog.record_processed("t", 1, "job", [{"path": "a.parquet", "size": 3}])
    catalog.record_written("t", 1, 4, "job")
    catalog.record_written("t", 1, 4, "job")  # a retry reports the same commit again
    catalog.heartbeat("job")
    catalog.record_job_barrier("job", 1, "succeeded", 10, 20)
    size = report.stat().st_size
    catalog.record_written("t", 2, 5, "job")
    # one more report appends one line: the file is not rewritten
    assert report.read_text().count("\n") == 6 and report.stat().st_size > size
    folded = read_report(str(report))
    assert [(w["table"], w["barrier"], w["version"]) for w in folded["written"]] == [("t", 1, 4), ("t", 2, 5)]
    assert folded["processed"][0]["manifest"] == [{"path": "a.parquet", "size": 3}]
    assert set(folded["heartbeats"]) == {"job"}
    assert folded["jobs"] == [{"job_id": "job", "barrier": 1, "status": "succeeded", "started_at": 10,
                               "finished_at": 20}]


def test_read_report_reads_the_old_format_and_names_a_broken_line(tmp_path: Path) -> None:
    old = tmp_path / "old.report"
    old.write_text(json.dumps({"format": "tsb-report/1", "processed": [], "heartbeats": {},
                               "written": [{"table": "t", "barrier": 1, "version": 2, "job_id": "j", "at": 0}]}))
    assert read_report(str(old))["written"][0]["version"] == 2
    broken = tmp_path / "broken.report"
    broken.write_text('{"kind": "heartbeat", "job_id": "j", "at": 1}\n{"kind": "writ\n')
    with pytest.raises(ValueError, match=r"broken.report: line 2 is not JSON"):
        read_report(str(broken))
    assert read_report(str(tmp_path / "missing"))["written"] == []
