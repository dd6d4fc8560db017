"""Topology declaration and validation: every error names what is wrong."""

from __future__ import annotations

import pytest

from airflow_provider_tsb.exceptions import (
    CycleError,
    DoubleWriterError,
    InvalidNameError,
    TopologyError,
    UnknownTableError,
)
from airflow_provider_tsb.names import parse_table_name
from airflow_provider_tsb.topology import Topology, validate_union


def wordcount() -> Topology:
    topo = Topology("wordcount")
    topo.root_table("tsb.raw.words")
    topo.job("count_words", "a.py", sources=["tsb.raw.words"], sinks=["tsb.mart.word_count"])
    topo.job("count_counts", "b.py", sources=["tsb.mart.word_count"], sinks=["tsb.mart.count_of_counts"])
    return topo


def test_valid_topology_graph_and_order() -> None:
    topo = wordcount().validate()
    graph = topo.graph
    assert set(graph.nodes) == {
        "table:tsb.raw.words", "table:tsb.mart.word_count", "table:tsb.mart.count_of_counts",
        "job:count_words", "job:count_counts",
    }
    assert graph.has_edge("table:tsb.raw.words", "job:count_words")
    assert graph.has_edge("job:count_counts", "table:tsb.mart.count_of_counts")
    assert [j.id for j in topo.jobs_in_order()] == ["count_words", "count_counts"]
    assert topo.writer_of("tsb.mart.word_count") == "count_words"
    assert topo.location("tsb.mart.word_count").endswith("tsb/mart/word_count")


def test_cycle_message_shows_path() -> None:
    topo = Topology("cyclic")
    topo.root_table("c.d.t0")
    topo.job("a", "a.py", sources=["c.d.t0", "c.d.t1"], sinks=["c.d.t2"])
    topo.job("b", "b.py", sources=["c.d.t2"], sinks=["c.d.t1"])
    with pytest.raises(CycleError) as err:
        topo.validate()
    assert "c.d.t1 -> job a -> c.d.t2 -> job b -> c.d.t1" in str(err.value)
    assert err.value.cycle == ["c.d.t1", "job a", "c.d.t2", "job b", "c.d.t1"]


def test_double_writer_names_table_and_both_jobs() -> None:
    topo = Topology("dw")
    topo.root_table("c.d.src")
    topo.job("job_one", "a.py", sources=["c.d.src"], sinks=["c.d.out"])
    topo.job("job_two", "b.py", sources=["c.d.src"], sinks=["c.d.out"])
    with pytest.raises(DoubleWriterError) as err:
        topo.validate()
    assert "'c.d.out'" in str(err.value) and "'job_one'" in str(err.value) and "'job_two'" in str(err.value)
    assert err.value.jobs == ("job_one", "job_two")


def test_root_table_that_is_also_a_sink() -> None:
    topo = Topology("rs")
    topo.root_table("c.d.src")
    topo.job("j", "a.py", sources=["c.d.src"], sinks=["c.d.src2"])
    topo.root_table("c.d.src2")
    with pytest.raises(TopologyError, match=r"'c.d.src2' is declared as a root table and is also a sink of job 'j'"):
        topo.validate()


def test_unknown_source_table() -> None:
    topo = Topology("unk")
    topo.job("j", "a.py", sources=["c.d.nowhere"], sinks=["c.d.out"])
    with pytest.raises(UnknownTableError, match=r"job 'j' reads unknown table 'c.d.nowhere'"):
        topo.validate()


def test_job_without_sink() -> None:
    topo = Topology("nosink")
    topo.root_table("c.d.src")
    topo.job("lonely", "a.py", sources=["c.d.src"], sinks=[])
    with pytest.raises(TopologyError, match=r"job 'lonely' has no sink table"):
        topo.validate()


@pytest.mark.parametrize(
    "name,fragment",
    [
        ("c.d/evil.t", "'d/evil' is not an identifier"),
        ("c.d.t*", "'t*' is not an identifier"),
        ("c.d.'t'", "is not an identifier"),
        ("c.d.my table", "'my table' is not an identifier"),
        ("a.b.c.d", "got 4 part(s)"),
        ("justone", "got 1 part(s)"),
        ("c..t", "'' is not an identifier"),
        ("raw.evil\n", "is not an identifier"),  # a trailing newline passed a `$`-anchored check
    ],
)
def test_invalid_names(name: str, fragment: str) -> None:
    with pytest.raises(InvalidNameError) as err:
        parse_table_name(name)
    assert fragment in str(err.value)
    assert repr(name) in str(err.value)


def test_invalid_name_in_declaration() -> None:
    topo = Topology("bad")
    with pytest.raises(InvalidNameError, match="is not an identifier"):
        topo.root_table("c.d.e/tc")


def test_job_id_with_a_trailing_newline_is_refused() -> None:
    topo = Topology("bad")
    topo.root_table("raw.a")
    with pytest.raises(InvalidNameError):
        topo.job("nljob\n", "app.py", sources=["raw.a"], sinks=["x.b"])


def test_two_part_name_gets_default_catalog() -> None:
    assert str(parse_table_name("raw.flights")) == "tsb.raw.flights"


def test_union_catches_double_writer_across_files() -> None:
    a = Topology("shared")
    a.root_table("c.d.src")
    a.job("team_a", "a.py", sources=["c.d.src"], sinks=["c.d.out"])
    b = Topology("shared")
    b.external_table("c.d.out")
    b.root_table("c.d.src")
    b.job("team_b", "b.py", sources=["c.d.src"], sinks=["c.d.out"])
    assert a.errors() == []
    errors = validate_union([a, b])
    assert any(isinstance(e, DoubleWriterError) and e.table == "c.d.out" for e in errors)


def test_union_of_split_topology_is_valid() -> None:
    a = Topology("split")
    a.root_table("c.d.src")
    a.job("team_a", "a.py", sources=["c.d.src"], sinks=["c.d.mid"])
    b = Topology("split")
    b.external_table("c.d.mid")
    b.job("team_b", "b.py", sources=["c.d.mid"], sinks=["c.d.out"])
    assert b.errors() == []
    assert validate_union([a, b]) == []
