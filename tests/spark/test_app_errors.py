"""Errors of an app that disagrees with its topology or returns the wrong sinks, and the job's
status when an app ends. No Spark session: every error here is raised before Spark would start."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from airflow_provider_tsb.exceptions import UnknownJobError, UnknownTableError
from airflow_provider_tsb.metastore.records import JobStatus
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.spark.cli import run_app
from airflow_provider_tsb.spark.model import Sink, TsbApp
from airflow_provider_tsb.spark.runner import check_outputs
from airflow_provider_tsb.topology import Topology

ROOT = "tsb.raw.penguins"
CLEAN = "tsb.mart.clean_penguins"


def penguins(warehouse: str) -> Topology:
    topology = Topology("penguins", warehouse=warehouse)
    topology.root_table(ROOT)
    topology.job("clean", "clean.py", sources=[ROOT], sinks=[CLEAN])
    topology.job("aggregate", "aggregate.py", sources=[CLEAN], sinks=["tsb.mart.by_species"])
    return topology


def app(job_id: str = "clean", sources: tuple[str, ...] = ("raw.penguins",),
        sinks: tuple[str, ...] = ("mart.clean_penguins",)) -> TsbApp:
    def process(ctx: object) -> dict[str, object]:
        raise AssertionError("process() must not run")

    return TsbApp(job_id=job_id, sources=dict.fromkeys(sources), sinks={s: Sink() for s in sinks}, process=process)


@pytest.fixture
def registered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[MetaStore, list[str]]:
    """A SQLite metastore with the penguins topology registered, and the app's command line."""
    url = f"sqlite:///{tmp_path / 'tsb.db'}"
    store = MetaStore(url)
    store.migrate()
    store.registry.register_topology(penguins(str(tmp_path / "warehouse")))

    def no_spark(*args: object, **kwargs: object) -> None:
        raise AssertionError("Spark must not start")

    monkeypatch.setattr("airflow_provider_tsb.spark.session.get_spark", no_spark)
    return store, ["--metastore-url", url, "--warehouse", str(tmp_path / "warehouse")]


def test_an_app_with_another_job_id_names_both_before_spark(registered: tuple[MetaStore, list[str]]) -> None:
    _, argv = registered
    with pytest.raises(UnknownJobError) as err:
        run_app(app(job_id="cleaning"), argv)
    assert str(err.value) == (
        "the app and the topology disagree: the app's job id is 'cleaning', which is not a job registered in "
        "the metastore; its sinks are registered as written by 'mart.clean_penguins' by job 'clean'. Jobs "
        "registered in topology 'penguins': 'aggregate', 'clean'. Give TsbApp(job_id=...) the job id of "
        "Topology.job(...) (or register the topology first: its DAG's barrier task, or "
        "`tsb barrier create TOPOLOGY --dags PATH`)"
    )


def test_an_app_with_another_job_id_and_unknown_sinks_lists_every_job(
    registered: tuple[MetaStore, list[str]],
) -> None:
    _, argv = registered
    with pytest.raises(UnknownJobError) as err:
        run_app(app(job_id="cleaning", sinks=("mart.cleaned",)), argv)
    message = str(err.value)
    assert "the app's job id is 'cleaning'" in message
    assert "no registered job writes its sinks ('mart.cleaned')" in message
    assert "Jobs registered in the metastore: 'aggregate', 'clean'" in message


def test_an_app_with_another_source_name_names_the_topology_sources(
    registered: tuple[MetaStore, list[str]],
) -> None:
    _, argv = registered
    with pytest.raises(UnknownTableError) as err:
        run_app(app(sources=("raw.penguin",)), argv)
    assert str(err.value) == (
        "the app and the topology disagree: app 'clean' declares source(s) 'raw.penguin', but the sources of "
        "job 'clean' in topology 'penguins' are 'tsb.raw.penguins'. Make the app's sources (TsbApp(sources=...)) "
        "name the topology's tables, or fix Topology.job(...)"
    )


def test_an_app_with_another_sink_name_names_the_topology_sinks(registered: tuple[MetaStore, list[str]]) -> None:
    _, argv = registered
    with pytest.raises(UnknownTableError) as err:
        run_app(app(sinks=("mart.clean",)), argv)
    assert "app 'clean' declares sink(s) 'mart.clean', but the sinks of job 'clean'" in str(err.value)
    assert "are 'tsb.mart.clean_penguins'" in str(err.value)


def test_no_location_names_the_table_and_what_was_given() -> None:
    with pytest.raises(ValueError) as err:
        app(sources=("raw.penguin",)).resolve_locations(None, {"tsb.mart.clean_penguins": "/w/c"})
    assert str(err.value) == (
        "job clean: no location for table 'raw.penguin', which the app declares as a source: the tables "
        "given (--table NAME=LOCATION, the plan's tables) are ['tsb.mart.clean_penguins'], the app declares "
        "no default location for it and no --warehouse was given. If the app misspells it, make its name the "
        "topology's; else pass --table, --plan or --warehouse"
    )


def test_process_output_keys_must_be_the_sinks() -> None:
    two = app(sinks=("mart.a", "mart.b"))
    check_outputs(two, {"mart.a": 1, "mart.b": 2})
    with pytest.raises(KeyError) as err:
        check_outputs(two, {"mart.a": 1, "mart.bb": 2})
    assert err.value.args[0] == (
        "job clean: process() returned no DataFrame for sinks ['mart.b'] and keys ['mart.bb'] that are not "
        "sinks: it returned keys ['mart.a', 'mart.bb'], the app's sinks are ['mart.a', 'mart.b']; return one "
        "DataFrame per sink, keyed by the sink's name as declared in TsbApp(sinks=...)"
    )
    with pytest.raises(KeyError, match=r"returned keys \['extra', 'mart.a', 'mart.b'\]") as err:
        check_outputs(two, {"mart.a": 1, "mart.b": 2, "extra": 3})
    assert "keys ['extra'] that are not sinks" in err.value.args[0]
    with pytest.raises(TypeError, match=r"process\(\) must return \{sink: DataFrame\}.*got list"):
        check_outputs(two, [1, 2])


def test_an_app_run_by_hand_sets_its_status_when_it_ends(
    registered: tuple[MetaStore, list[str]], caplog: pytest.LogCaptureFixture,
) -> None:
    """Outside Airflow nobody else sets the job's status: the app does, and success clears the
    message of a previous failure; with no pending barrier it warns that it processed nothing."""
    store, argv = registered
    store.job_runs.heartbeat("clean", status=JobStatus.FAILED, message="KeyError: a previous run")
    with caplog.at_level(logging.WARNING, logger="airflow_provider_tsb.spark"):
        assert run_app(app(), argv, spark=object()) == 0
    job = store.registry.job("clean")
    assert (job.status, job.message) == (JobStatus.SUCCEEDED, None)
    assert any(
        "job clean: no barrier was pending for it, so nothing was processed" in r.getMessage()
        and "tsb barrier create TOPOLOGY --dags PATH" in r.getMessage()
        for r in caplog.records
    ), caplog.text


def test_an_app_that_fails_records_failed_with_its_error(registered: tuple[MetaStore, list[str]]) -> None:
    store, argv = registered
    store.barriers.create("penguins", {ROOT: 0})  # pending for clean; the root table does not exist
    with pytest.raises(Exception) as err:
        run_app(app(), argv, spark=object())
    job = store.registry.job("clean")
    assert job.status == JobStatus.FAILED
    assert job.message is not None and str(err.value)[:50] in job.message


def test_success_clears_the_message_of_a_previous_failure(registered: tuple[MetaStore, list[str]]) -> None:
    store, _ = registered
    store.job_runs.heartbeat("clean", status=JobStatus.FAILED, barrier=3, message="spark-submit exited 1")
    store.job_runs.heartbeat("clean", status=JobStatus.RUNNING, barrier=4)
    assert store.registry.job("clean").message == "spark-submit exited 1"  # still the last failure while it runs
    store.job_runs.heartbeat("clean", status=JobStatus.SUCCEEDED, barrier=4)
    assert (store.registry.job("clean").status, store.registry.job("clean").message) == (JobStatus.SUCCEEDED, None)
