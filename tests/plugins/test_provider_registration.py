"""After ``pip install``, Airflow lists the provider and loads the plugin (real ``airflow`` CLI)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.airflow  # runs the airflow CLI

AIRFLOW = str(Path(sys.executable).parent / "airflow")


def airflow(*args: str, home: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update({"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"})
    out = subprocess.run([AIRFLOW, *args], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_providers_list_and_plugins_show_tsb(tmp_path: Path) -> None:
    providers = airflow("providers", "list", "--output", "json", home=tmp_path)
    assert '"package_name": "airflow-provider-tsb"' in providers
    hooks = airflow("providers", "hooks", "--output", "json", home=tmp_path)
    assert "TsbMetastoreHook" in hooks
    plugins = airflow("plugins", "--output", "json", home=tmp_path)
    assert '"name": "tsb"' in plugins and "TSB Lineage" in plugins
