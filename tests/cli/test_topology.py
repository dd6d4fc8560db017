"""`tsb topology validate` / `show` and `tsb db` on real DAG files, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a tsb subprocess per call

REPO = Path(__file__).resolve().parents[2]


def tsb(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow_provider_tsb", *args],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, **(env or {})}, timeout=300,
    )


def write(path: Path, body: str) -> Path:
    path.write_text(textwrap.dedent(body))
    return path


TEAM_A = """
    from airflow_provider_tsb.topology import Topology
    topo = Topology("shop")
    topo.root_table("tsb.raw.orders")
    topo.job("daily_orders", "a.py", sources=["tsb.raw.orders"], sinks=["tsb.mart.daily_orders"])
"""


def test_validate_good_files_and_folder(tmp_path: Path) -> None:
    write(tmp_path / "team_a.py", TEAM_A)
    write(tmp_path / "team_b.py", """
        from airflow_provider_tsb.topology import Topology
        topo = Topology("shop")
        topo.external_table("tsb.mart.daily_orders")
        topo.job("weekly_orders", "b.py", sources=["tsb.mart.daily_orders"], sinks=["tsb.mart.weekly_orders"])
    """)
    result = tsb("topology", "validate", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "ok shop: 1 root table(s), 2 intermediate table(s), 2 job(s) across 2 DAG files"
    )


def test_validate_skips_what_airflowignore_excludes_as_airflow_does(tmp_path: Path) -> None:
    """Support packages beside the DAG files (the examples' ``tsb_examples/``) are excluded by
    ``.airflowignore`` from Airflow's parsing, and so from ``tsb topology validate``; a nested
    ignore file applies below its own folder."""
    write(tmp_path / "team_a.py", TEAM_A)
    (tmp_path / "support").mkdir()
    write(tmp_path / "support" / "loader.py", "raise RuntimeError('a support module, not a DAG file')\n")
    (tmp_path / "team").mkdir()
    write(tmp_path / "team" / "scratch_orders.py", "raise RuntimeError('scratch, not a DAG file')\n")
    write(tmp_path / "team" / ".airflowignore", "scratch_*.py\n")
    failing = tsb("topology", "validate", str(tmp_path))
    assert failing.returncode == 1 and "loader.py: RuntimeError: a support module" in failing.stdout + failing.stderr
    write(tmp_path / ".airflowignore", "support/\n")
    result = tsb("topology", "validate", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "ok shop: 1 root table(s), 1 intermediate table(s), 1 job(s)"


def test_validate_reports_every_error(tmp_path: Path) -> None:
    write(tmp_path / "team_a.py", TEAM_A)
    write(tmp_path / "team_c.py", """
        from airflow_provider_tsb.topology import Topology
        topo = Topology("shop")
        topo.root_table("tsb.raw.orders")
        topo.job("rogue", "c.py", sources=["tsb.raw.orders"], sinks=["tsb.mart.daily_orders"])
        topo.job("orphan", "d.py", sources=["tsb.raw.missing"], sinks=["tsb.mart.x"])
    """)
    write(tmp_path / "broken.py", """
        from airflow_provider_tsb.topology import Topology
        topo = Topology("broken")
        topo.root_table("tsb.raw/escape.t")
    """)
    result = tsb("topology", "validate", str(tmp_path))
    assert result.returncode == 1
    err = result.stderr
    assert "3 error(s):" in err
    assert "table 'tsb.mart.daily_orders' has two writer jobs, 'daily_orders' and 'rogue'" in err
    assert "job 'orphan' reads unknown table 'tsb.raw.missing'" in err
    assert "broken.py: InvalidNameError: invalid table name 'tsb.raw/escape.t'" in err
    assert "Traceback" not in err


def test_validate_cycle_in_one_file(tmp_path: Path) -> None:
    dag = write(tmp_path / "cyc.py", """
        from airflow_provider_tsb.topology import Topology
        topo = Topology("cyc")
        topo.job("a", "a.py", sources=["c.d.t1"], sinks=["c.d.t2"])
        topo.job("b", "b.py", sources=["c.d.t2"], sinks=["c.d.t1"])
    """)
    result = tsb("topology", "validate", str(dag))
    assert result.returncode == 1
    assert "the topology has a cycle: c.d.t1 -> job a -> c.d.t2 -> job b -> c.d.t1" in result.stderr


def test_validate_missing_path() -> None:
    result = tsb("topology", "validate", "/nonexistent/dags")
    assert result.returncode == 2
    assert "no such DAG file or folder: /nonexistent/dags" in result.stderr


def test_show_from_dag_files_and_metastore(tmp_path: Path) -> None:
    write(tmp_path / "team_a.py", TEAM_A)
    shown = tsb("topology", "show", "shop", "--dags", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    assert "root table tsb.raw.orders" in shown.stdout
    assert "job daily_orders: tsb.raw.orders -> tsb.mart.daily_orders" in shown.stdout
    url = f"sqlite:///{tmp_path / 'tsb.db'}"
    assert tsb("db", "migrate", "--url", url).returncode == 0
    from airflow_provider_tsb.dag_loading import load_dag_file
    from airflow_provider_tsb.metastore.store import MetaStore

    (topo,) = load_dag_file(str(tmp_path / "team_a.py")).topologies
    MetaStore(url).registry.register_topology(topo)
    shown = tsb("topology", "show", "shop", "--url", url, "--format", "json")
    assert shown.returncode == 0, shown.stderr
    assert '"job:daily_orders"' in shown.stdout
    missing = tsb("topology", "show", "nope", "--url", url)
    assert missing.returncode == 1 and "topology 'nope' is not declared in the metastore" in missing.stderr


def test_db_commands_and_help(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    check = tsb("db", "check", "--url", url)
    assert check.returncode == 2 and "run `tsb db migrate`" in check.stderr
    assert "is at revision" in tsb("db", "migrate", "--url", url).stdout
    assert tsb("db", "check", "--url", url).returncode == 0
    for cmd in (["--help"], ["db", "--help"], ["db", "migrate", "--help"], ["topology", "validate", "--help"],
                ["topology", "show", "--help"], ["versions", "--help"]):
        out = tsb(*cmd)
        assert out.returncode == 0 and "usage: tsb" in out.stdout, cmd
    env_home = tsb("db", "migrate", env={"AIRFLOW_HOME": str(tmp_path / "home"), "TSB_METASTORE_URL": ""})
    assert env_home.returncode == 0, env_home.stderr
    assert (tmp_path / "home" / "tsb.db").exists()


def test_versions_refuses_out_of_range_arguments_without_a_traceback(tmp_path: Path) -> None:
    """Numbers the metastore cannot hold, infinite or NaN leases and unknown URL schemes get a
    one-line error naming the option, not an OverflowError or NoSuchModuleError traceback."""
    url = f"sqlite:///{tmp_path / 'tsb.db'}"
    cases = {
        ("--as-of", "9223372036854775808"):
            "argument --as-of: no such barrier: 9223372036854775808 is not a barrier id",
        ("--as-of", "1e30"): "argument --as-of: '1e30' is not a barrier id",
        ("--min-barrier", "-1"): "argument --min-barrier: no such barrier: -1 is not a barrier id",
        ("--lease-seconds", "inf"): "argument --lease-seconds: 'inf' is not a lease duration",
        ("--lease-seconds", "1e300"): "argument --lease-seconds: '1e300' is not a lease duration",
        ("--lease-seconds", "nan"): "argument --lease-seconds: 'nan' is not a lease duration",
        ("--lease-seconds", "4e7"): "'4e7' is not a lease duration: give seconds > 0 and at most 31622400 (366 days)",
    }
    for (option, value), message in cases.items():
        out = tsb("versions", "tsb.raw.words", f"{option}={value}", "--url", url)
        assert out.returncode == 2, (option, value, out.stderr)
        assert message in out.stderr and "Traceback" not in out.stderr, out.stderr
    out = tsb("versions", "tsb.raw.words", "--url", "bogus://x")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "cannot open the metastore" in out.stderr and "sqlite:///" in out.stderr


def test_validate_reports_an_error_found_at_parse_time_once(tmp_path: Path) -> None:
    """A DAG file that validates its topology fails with the error the union check finds again:
    it is printed once, with the file's name."""
    dag = write(tmp_path / "typo.py", """
        from airflow_provider_tsb.topology import Topology
        topo = Topology("shop")
        topo.root_table("tsb.raw.orders")
        topo.job("daily", "a.py", sources=["tsb.raw.order"], sinks=["tsb.mart.daily"])
        topo.validate()
    """)
    result = tsb("topology", "validate", str(tmp_path))
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.startswith("  - ")]
    assert result.stderr.startswith("1 error(s):"), result.stderr
    assert lines == [
        f"  - {dag}: UnknownTableError: job 'daily' reads unknown table 'tsb.raw.order': declare it with "
        "root_table() if it is ingested from outside, external_table() if a job of another DAG file writes "
        "it, or add the job that writes it"
    ]


def test_commands_import_only_what_they_use(tmp_path: Path) -> None:
    """``tsb --help`` loads neither SQLAlchemy, pyarrow nor Airflow; ``tsb versions`` on a metastore
    named by ``--metastore-url`` or ``$TSB_METASTORE_URL`` does not load Airflow (seconds to import)."""
    url = f"sqlite:///{tmp_path / 'tsb.db'}"
    assert tsb("db", "migrate", "--metastore-url", url).returncode == 0
    probe = (
        "import sys\n"
        "from airflow_provider_tsb.cli import main\n"
        "try:\n"
        "    main(sys.argv[1:])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(m for m in ('sqlalchemy', 'pyarrow', 'airflow', 'pyspark') if m in sys.modules),"
        " file=sys.stderr)\n"
    )

    def loaded(*args: str, env: dict[str, str] | None = None) -> tuple[str, str]:
        done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=REPO,
                              env={**os.environ, "TSB_METASTORE_URL": "", **(env or {})}, timeout=300)
        return done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "", done.stdout

    assert loaded("--help")[0] == ""
    modules, out = loaded("versions", "tsb.raw.words", "--level", "read-uncommitted", "--metastore-url", url)
    assert "airflow" not in modules.split() and "sqlalchemy" in modules.split(), modules
    modules, _ = loaded("versions", "tsb.raw.words", env={"TSB_METASTORE_URL": url})
    assert "airflow" not in modules.split(), modules


def test_barrier_create_takes_the_topologys_time_kind(tmp_path: Path) -> None:
    """Issue 23 item 2: ``tsb barrier create`` without ``--ts-kind`` generates the kind of the
    topology's barriers so far; the other kind is refused, naming both, and nothing is generated."""
    dags = tmp_path / "dags"
    dags.mkdir()
    write(dags / "sensors.py", f"""
        from airflow_provider_tsb.topology import Topology
        topo = Topology("sensors", warehouse={str(tmp_path / 'wh')!r})
        topo.root_table("tsb.raw.readings", event_time_column="ts")
        topo.job("clean", "a.py", sources=["tsb.raw.readings"], sinks=["tsb.mart.clean"])
    """)
    (tmp_path / "day1.csv").write_text("sensor,ts\ns1,2005-06-01T10:00:00\n")
    env = {"TSB_METASTORE_URL": f"sqlite:///{tmp_path / 'tsb.db'}"}
    assert tsb("db", "migrate", env=env).returncode == 0
    appended = tsb("root", "append", "raw.readings", str(tmp_path / "day1.csv"), "--dags", str(dags), env=env)
    assert appended.returncode == 0, appended.stderr
    kinds = []
    for args in (["--ts-kind", "event"], [], ["--ts-kind", "system"]):
        proc = tsb("barrier", "create", "sensors", "--dags", str(dags), *args, env=env)
        kinds.append((proc.returncode, json.loads(proc.stdout)["ts_kind"] if proc.returncode == 0 else proc.stderr))
    assert kinds[:2] == [(0, "event"), (0, "event")]
    assert kinds[2][0] == 1 and "has event-time barriers (barrier 2 is event-time): a system-time barrier is " \
        "refused" in kinds[2][1] and "Traceback" not in kinds[2][1]


def test_a_dag_file_that_never_returns_is_reported_not_waited_for(tmp_path: Path) -> None:
    """Issue 57 item 7: a DAG file whose top level never returns blocked every --dags command
    forever; it is stopped after Airflow's dagbag_import_timeout and reported, naming the file."""
    import time

    write(tmp_path / "good.py", TEAM_A)
    stuck = write(tmp_path / "stuck.py", """
        import time
        while True:
            time.sleep(0.1)
    """)
    env = {"AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "2", "TSB_METASTORE_URL": f"sqlite:///{tmp_path / 'tsb.db'}"}
    started = time.monotonic()
    done = tsb("topology", "validate", str(tmp_path), env=env)
    assert time.monotonic() - started < 60
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert f"{stuck}: DagFileTimeoutError: importing it took more than 2 s" in out, out
    assert "Traceback" not in out
    barrier = tsb("barrier", "create", "shop", "--dags", str(tmp_path), env=env)
    assert barrier.returncode != 0 and "DagFileTimeoutError" in barrier.stdout + barrier.stderr
