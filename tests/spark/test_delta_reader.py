"""Root tables as users' Spark writes them: deletion vectors, column mapping (a column renamed and
one dropped), ``timestampNtz``, and DELETE / UPDATE / MERGE / OPTIMIZE epochs, read by tsb's
inputs through Spark's Delta reader (issue 58 item 2). Every version and every epoch equals what
pandas computes from the same rows."""

from __future__ import annotations

from collections import Counter

import pytest

from airflow_provider_tsb.spark.inputs import (
    CHANGE_TYPE,
    COMMIT_VERSION,
    DELETE_TYPES,
    INSERT_TYPES,
    read_changes,
    read_snapshot,
)

pytestmark = pytest.mark.delta_spark


def _rows(df, columns) -> Counter:
    return Counter(tuple(r[c] for c in columns) for r in df.select(*columns).collect())


def _history(spark, location: str, cdf: bool) -> list[Counter]:
    """Write a root the way a user's Spark does; return the expected rows per Delta version."""
    t = f"delta.`{location}`"
    props = ("'delta.enableDeletionVectors' = 'true', 'delta.columnMapping.mode' = 'name', "
             "'delta.enableChangeDataFeed' = " + ("'true'" if cdf else "'false'"))
    spark.sql(f"CREATE TABLE {t} (id BIGINT, word STRING, extra INT, ts TIMESTAMP_NTZ) USING delta "
              f"TBLPROPERTIES ({props})")                                                   # v0
    expected = [Counter()]
    rows = {i: (i, f"w{i % 3}") for i in range(1, 11)}
    spark.sql(f"INSERT INTO {t} VALUES " + ", ".join(
        f"({i}, 'w{i % 3}', {i}, TIMESTAMP_NTZ'2026-01-01 00:00:0{i % 10}.123456')" for i in rows))  # v1
    expected.append(Counter(rows.values()))
    spark.sql(f"DELETE FROM {t} WHERE id IN (2, 3)")                                        # v2 (deletion vectors)
    for i in (2, 3):
        rows.pop(i)
    expected.append(Counter(rows.values()))
    spark.sql(f"UPDATE {t} SET word = 'upd' WHERE id = 4")                                  # v3
    rows[4] = (4, "upd")
    expected.append(Counter(rows.values()))
    spark.sql(f"ALTER TABLE {t} RENAME COLUMN word TO token")                               # v4
    expected.append(Counter(rows.values()))
    spark.sql(f"ALTER TABLE {t} DROP COLUMN extra")                                         # v5
    expected.append(Counter(rows.values()))
    spark.sql(f"MERGE INTO {t} AS t USING (SELECT 5L AS id, 'merged' AS token UNION ALL SELECT 20L, 'new') AS s "
              "ON t.id = s.id WHEN MATCHED THEN UPDATE SET t.token = s.token "
              "WHEN NOT MATCHED THEN INSERT (id, token) VALUES (s.id, s.token)")            # v6
    rows[5] = (5, "merged")
    rows[20] = (20, "new")
    expected.append(Counter(rows.values()))
    spark.sql(f"OPTIMIZE {t}")                                                              # v7: dataChange=false
    expected.append(Counter(rows.values()))
    spark.sql(f"INSERT INTO {t} (id, token) VALUES (30, 'w0')")                              # v8
    rows[30] = (30, "w0")
    expected.append(Counter(rows.values()))
    return expected


@pytest.mark.parametrize("cdf", [True, False], ids=["change-data-feed", "no-change-data-feed"])
def test_a_root_with_deletion_vectors_and_column_mapping_reads_at_every_version(spark, tmp_path, cdf) -> None:
    location = str(tmp_path / "root")
    expected = _history(spark, location, cdf)
    last = len(expected) - 1
    assert spark.sql(f"DESCRIBE DETAIL delta.`{location}`").collect()[0]["minReaderVersion"] == 3
    for version in (1, 2, 3, 6, 7, last):
        got = read_snapshot(spark, location, version)
        names = ["id", "token" if version >= 4 else "word"]
        assert _rows(got, names) == expected[version], version
    assert "extra" not in read_snapshot(spark, location, last).columns
    # every epoch's changes, applied to the version before, give the version after
    for start, end in ((0, 1), (1, 2), (2, 3), (3, 6), (6, 7), (1, last)):
        changes = read_changes(spark, location, start, end)
        word = "token" if end >= 4 else "word"  # the epoch's changes come in its last version's schema
        assert {COMMIT_VERSION, CHANGE_TYPE, "id", word} <= set(changes.columns), changes.columns
        assert _applied(expected[start], changes, word) == expected[end], (start, end)
        assert {r[COMMIT_VERSION] for r in changes.collect()} <= set(range(start + 1, end + 1))
    assert read_changes(spark, location, 6, 7).count() == 0  # OPTIMIZE is no change
    deleted = read_changes(spark, location, 1, 2)
    if cdf:  # row-level: exactly the two deleted rows
        assert sorted((r["id"], r[CHANGE_TYPE]) for r in deleted.collect()) == [(2, "delete"), (3, "delete")]


def _applied(before: Counter, changes, word: str) -> Counter:
    state = Counter(before)
    for r in changes.collect():
        key = (r["id"], r[word])
        if r[CHANGE_TYPE] in INSERT_TYPES:
            state[key] += 1
        elif r[CHANGE_TYPE] in DELETE_TYPES:
            state[key] -= 1
    assert all(v >= 0 for v in state.values()), state
    return +state
