"""append_to_root: the supported way to write a root table (issue 11)."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_provider_tsb.delta.roots import input_ended
from airflow_provider_tsb.root_tables import RUN_KEY, append_to_root


def test_appends_are_idempotent_per_run_key(tmp_path) -> None:
    loc = str(tmp_path / "penguins")
    first = append_to_root(loc, pa.table({"species": ["Adelie", "Gentoo"], "mass_g": [3750.0, 5000.0]}),
                           run_key="run-1")
    assert (first.version, first.rows, first.appended) == (0, 2, True)
    retried = append_to_root(loc, pa.table({"species": ["Adelie"], "mass_g": [1.0]}), run_key="run-1")
    assert (retried.version, retried.rows, retried.appended) == (0, 0, False)
    second = append_to_root(loc, pd.DataFrame({"species": ["Chinstrap"], "mass_g": [3700.0]}), run_key="run-2")
    assert (second.version, second.rows) == (1, 1)
    table = DeltaTable(loc)
    assert table.to_pyarrow_table().num_rows == 3
    assert table.transaction_version("tsb-root:run-2") == 1
    assert table.history(1)[0][RUN_KEY] == "run-2"


def test_files_are_read_and_cast_to_the_table_schema(tmp_path) -> None:
    loc = str(tmp_path / "penguins")
    append_to_root(loc, pa.table({"species": ["Adelie"], "mass_g": [3750.0]}))
    csv = tmp_path / "day2.csv"
    csv.write_text("mass_g,species\n4200,Gentoo\n")  # other column order, integers for a double column
    assert append_to_root(loc, csv).rows == 1
    parquet = tmp_path / "day3.data"
    pq.write_table(pa.table({"species": ["Chinstrap"], "mass_g": [3500.0]}), parquet)
    assert append_to_root(loc, parquet, file_format="parquet", end_of_input=True).version == 2
    rows = DeltaTable(loc).to_pyarrow_table().sort_by("mass_g").to_pylist()
    assert rows == [{"species": "Chinstrap", "mass_g": 3500.0}, {"species": "Adelie", "mass_g": 3750.0},
                    {"species": "Gentoo", "mass_g": 4200.0}]
    assert input_ended(loc)


def test_bad_input_names_what_is_wrong_and_writes_nothing(tmp_path) -> None:
    loc = str(tmp_path / "penguins")
    append_to_root(loc, pa.table({"species": ["Adelie"], "mass_g": [3750.0]}))
    with pytest.raises(ValueError, match=r"columns \['island: string'\] do not match the table's "
                                         r"\['species: string', 'mass_g: double'\]"):
        append_to_root(loc, pa.table({"island": ["Biscoe"]}))
    with pytest.raises(ValueError, match="mass_g"):
        append_to_root(loc, pa.table({"species": ["Gentoo"], "mass_g": ["heavy"]}))
    with pytest.raises(FileNotFoundError, match="no data file .*nope.csv"):
        append_to_root(loc, tmp_path / "nope.csv")
    (tmp_path / "day.txt").write_text("x")
    with pytest.raises(ValueError, match="cannot tell the format of .*day.txt"):
        append_to_root(loc, tmp_path / "day.txt")
    with pytest.raises(ValueError, match="cannot append a list to a root table"):
        append_to_root(loc, [1, 2])
    assert DeltaTable(loc).version() == 0


def test_an_ingest_that_compacts_keeps_its_rows_its_retries_and_its_end_of_input(tmp_path) -> None:
    """``append_to_root(compaction=...)``: the small files are rewritten once there are
    ``min_files`` of them, in a commit after the append; the result names the append's version,
    a retried run key still appends nothing, and an end-of-input append stays the newest commit."""
    from airflow_provider_tsb.delta.compaction import Compaction
    from airflow_provider_tsb.delta.roots import COMPACTION

    loc = str(tmp_path / "readings")
    options = Compaction(min_files=3)
    results = [append_to_root(loc, pa.table({"n": [i]}), run_key=f"run-{i}", compaction=options) for i in range(7)]
    assert [r.version for r in results] == [0, 1, 2, 4, 5, 7, 8]  # after versions 2, 5 and 8: a compaction each
    table = DeltaTable(loc)
    assert [h["version"] for h in table.history() if h.get(COMPACTION) == "auto"] == [9, 6, 3]
    assert len(table.file_uris()) == 1 and sorted(table.to_pyarrow_table().column("n").to_pylist()) == list(range(7))
    retried = append_to_root(loc, pa.table({"n": [99]}), run_key="run-4", compaction=options)
    assert (retried.version, retried.appended) == (5, False)  # the txn survives the compaction
    last = append_to_root(loc, pa.table({"n": [7]}), run_key="run-7", compaction=options, end_of_input=True)
    assert DeltaTable(loc).version() == last.version == 10 and input_ended(loc)


def test_append_to_root_refuses_a_relative_path_and_a_folder_that_is_no_delta_table(tmp_path, monkeypatch) -> None:
    """Issue 57 item 7: ``append_to_root('../../etc', ...)`` created a table at /tmp/etc, and a
    folder of other files got a table in it. Both are refused, and nothing is written."""
    import os

    import pyarrow as pa

    from airflow_provider_tsb.exceptions import InvalidLocationError, TsbError
    from airflow_provider_tsb.root_tables import append_to_root

    monkeypatch.chdir(tmp_path)
    rows = pa.table({"a": [1]})
    with pytest.raises(InvalidLocationError, match="is relative"):
        append_to_root("../../etc", rows)
    with pytest.raises(InvalidLocationError, match="'..' segment"):
        append_to_root(f"{tmp_path}/x/../../etc", rows)
    foreign = tmp_path / "reports"
    foreign.mkdir()
    (foreign / "q3.csv").write_text("a\n1\n")
    with pytest.raises(InvalidLocationError, match="holds files but no Delta log") as err:
        append_to_root(str(foreign), rows)
    assert isinstance(err.value, TsbError) and str(foreign) in str(err.value)
    assert sorted(os.listdir(foreign)) == ["q3.csv"]
    assert append_to_root(str(tmp_path / "fresh"), rows).version == 0  # a new folder is fine
    # with [tsb] allowed_location_roots set, REST's roots hold here too
    from airflow_provider_tsb.exceptions import LocationNotAllowedError

    monkeypatch.setenv("AIRFLOW__TSB__ALLOWED_LOCATION_ROOTS", str(tmp_path / "lake"))
    with pytest.raises(LocationNotAllowedError, match="outside the allowed roots"):
        append_to_root(str(tmp_path / "fresh"), rows)
    assert append_to_root(str(tmp_path / "lake" / "t"), rows).version == 0
