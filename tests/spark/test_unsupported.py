"""A Delta table with a reader feature the tsb reader lacks gets an actionable error, not a crash."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_provider_tsb.delta.errors import UnsupportedTableFeatureError
from airflow_provider_tsb.spark.inputs import read_snapshot


def test_deletion_vectors_are_refused_with_the_table_named(spark, tmp_path) -> None:
    location = str(tmp_path / "dv_table")
    write_deltalake(location, pa.table({"a": [1, 2]}), configuration={"delta.enableDeletionVectors": "true"})
    with pytest.raises(UnsupportedTableFeatureError) as err:
        read_snapshot(spark, location, 0)
    assert location in str(err.value) and "deletionVectors" in str(err.value)
    assert "rewrite the table without them" in str(err.value)
