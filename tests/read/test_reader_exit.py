"""A process that reads a table with the Arrow reader exits 0 (not SIGABRT at interpreter exit,
"terminate called without an active exception", which a threaded delta-rs/Arrow scan caused in
15 of 20 runs)."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pytest

from airflow_provider_tsb.root_tables import append_to_root

READER = """
import sys
from airflow_provider_tsb.metastore.records import TableVersion
from airflow_provider_tsb.read.version_reads import read_table_arrow
table = read_table_arrow(TableVersion("tsb.raw.t", sys.argv[1], 1, 1, "WRITTEN"))
print(table.num_rows)
"""


@pytest.mark.slow
def test_a_reader_process_exits_cleanly(tmp_path) -> None:
    loc = str(tmp_path / "t")
    for day in range(2):
        append_to_root(loc, pa.table({"k": list(range(1000)), "day": [day] * 1000}))
    codes = [subprocess.run([sys.executable, "-c", READER, loc], capture_output=True, text=True, timeout=120)
             for _ in range(6)]
    assert [(p.returncode, p.stdout.strip()) for p in codes] == [(0, "2000")] * 6, codes[0].stderr[-2000:]
