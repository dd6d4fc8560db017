"""The user guide's steps (docs/guide.md), for the tests that follow it as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide.md"
#: the guide's first line of output: where the provider it runs is installed
WHO = "the guide runs the provider of"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```$", re.S | re.M)


def guide_steps(text: str | None = None) -> list[tuple[str, str, str]]:
    """``[(kind, target, body)]`` in the order of the guide: ``("file", path, content)`` for a
    ``python file=PATH`` block, ``("bash", "", script)`` for a ``bash`` block."""
    steps = []
    for lang, info, body in FENCE.findall(GUIDE.read_text() if text is None else text):
        target = re.search(r"file=(\S+)", info)
        if target:
            steps.append(("file", target.group(1), body))
        elif lang == "bash":
            steps.append(("bash", "", body))
    return steps


def follow_guide(folder: Path, *, until: str | None = None) -> subprocess.CompletedProcess:
    """Write the guide's files into ``folder`` and run its commands there, in one ``bash -e``,
    up to (not including) the first command block containing ``until``.

    The environment is this one minus any ``TSB_*`` / ``AIRFLOW_CONN_*`` setting (the guide sets
    its own), with the ``bin`` of the virtualenv ``$TSB_GUIDE_VENV`` (a wheel installed outside
    the checkout, as a user installs it; ``.ci/run`` makes one) or else of this interpreter first
    on ``PATH``, nothing of the checkout on ``PYTHONPATH``, and ``AIRFLOW_HOME`` in ``folder``.
    """
    venv = os.environ.get("TSB_GUIDE_VENV")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TSB_", "AIRFLOW_CONN_", "PYSPARK_")) and k != "PYTHONPATH"}
    bin_dir = os.path.join(venv, "bin") if venv else os.path.dirname(sys.executable)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env["AIRFLOW_HOME"] = str(folder / "airflow")
    who = f'python -c "import airflow_provider_tsb; print({WHO!r}, airflow_provider_tsb.__file__)"'
    script = ["set -euo pipefail", who]
    for kind, target, body in guide_steps():
        if kind == "file":
            path = folder / target
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
        elif until is not None and until in body:
            break
        else:
            script.append(body)
    return subprocess.run(["bash", "-c", "\n".join(script)], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=900)


def stop_guide_spark(folder: Path) -> None:
    """Stop the Spark Connect server the guide's ``tsb spark start`` left running in ``folder``
    (its home is ``$AIRFLOW_HOME/tsb-spark``, ``AIRFLOW_HOME`` being ``folder/airflow``)."""
    from airflow_provider_tsb.spark.connect_server import ConnectServer

    ConnectServer(folder / "airflow" / "tsb-spark").stop()
