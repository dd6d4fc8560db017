"""The docs site builds as ``make docs`` builds it (mkdocs-material, ``--strict``), every page is
in its navigation, the API reference renders the public classes from their docstrings, and the
README stays a front door whose links resolve (issue 22 item 7)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _nav_pages(nav: list) -> set[str]:
    pages: set[str] = set()
    for item in nav:
        values = item.values() if isinstance(item, dict) else [item]
        for value in values:
            pages |= _nav_pages(value) if isinstance(value, list) else {value}
    return pages


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, timeout=300,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def test_every_page_is_in_the_navigation() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    in_nav = _nav_pages(config["nav"])
    on_disk = {p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md")}
    assert on_disk - in_nav == set(), "pages missing from mkdocs.yml's nav"
    assert in_nav - on_disk == set(), "nav entries without a page"


def test_the_site_builds_strict_with_the_api_reference(site: Path) -> None:
    metastore = (site / "reference" / "metastore" / "index.html").read_text()
    spark = (site / "reference" / "spark" / "index.html").read_text()
    airflow = (site / "reference" / "airflow" / "index.html").read_text()
    # the metastore's managers and the apps' classes, rendered from their docstrings
    for name in ("resolution.ResolutionManager.resolve", "barriers.BarrierManager.create",
                 "registry.RegistryManager.register_topology", "store.MetaStore.migrate"):
        assert f'id="airflow_provider_tsb.metastore.{name}"' in metastore, name
    for name in ("TsbApp", "Sink", "BarrierContext"):
        assert f'id="airflow_provider_tsb.spark.model.{name}"' in spark, name
    assert "TsbBarrierCommittedSensor" in airflow and "TsbSparkJobOperator" in airflow
    # the README's moved sections are pages of the site
    assert "Spark Connect" in (site / "engines" / "index.html").read_text()
    assert "make demo" in (site / "index.html").read_text()


def test_the_readme_is_a_front_door_whose_links_resolve() -> None:
    text = (REPO / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; move detail to docs/"
    quick_start = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"^make demo\b", quick_start, re.M) and re.search(r"^make test\b", quick_start, re.M)
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    assert len(local) >= 10
    missing = [link for link in local if not (REPO / link).exists()]
    assert missing == [], f"README links to missing files: {missing}"


#: Keep a Changelog 1.1.0's groups, in its order
CHANGELOG_GROUPS = ["Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"]


def test_the_changelog_is_for_users_one_release_per_section() -> None:
    """Issue 59 item 2: ``[Unreleased]`` on top, then one dated section per release whose version
    is the package's; in each, Keep a Changelog's groups once each in its order; one line per
    change, with no timings and no test names; at most 150 lines."""
    import tomllib

    text = (REPO / "CHANGELOG.md").read_text()
    lines = text.splitlines()
    assert len(lines) <= 150, f"CHANGELOG.md has {len(lines)} lines"
    releases = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.M)
    assert releases[0] == ("Unreleased", ""), releases[:2]
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert releases[1][0] == version and releases[1][1], f"the newest release section is not [{version}] - DATE"
    for section in re.split(r"^## ", text, flags=re.M)[2:]:
        groups = re.findall(r"^### (.+)$", section, re.M)
        assert groups == [g for g in CHANGELOG_GROUPS if g in groups], (section.splitlines()[0], groups)
    bullets = [line for line in lines if line.startswith("- ")]
    measured = r"(?<!default )\b\d+(\.\d+)? ?(ms|s|min)\b"  # a timing; a setting's default is fine
    assert [b for b in bullets if re.search(measured, b) or re.search(r"tests?/\S+\.py", b)] == []


def test_every_documented_parameter_is_in_its_signature(tmp_path: Path) -> None:
    """``make lint``'s pydoclint check: the package passes, and a docstring that documents an
    argument its signature does not take (the sensor's ``poll_interval``) fails, named."""
    check = [sys.executable, str(REPO / "dev" / "doc_params.py")]
    ok = subprocess.run([*check, str(REPO / "airflow_provider_tsb")], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = tmp_path / "sensor.py"
    bad.write_text('def wait(tables: list[str], poke_interval: float) -> None:\n'
                   '    """Wait.\n\n    :param tables: the tables.\n    :param poll_interval: seconds.\n    """\n')
    found = subprocess.run([*check, str(bad)], capture_output=True, text=True, timeout=300)
    assert found.returncode == 1 and "function wait documents ['poll_interval']" in found.stdout, found.stdout
