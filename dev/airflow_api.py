"""The Airflow 3 REST API as the tests and the demo use it: DAGs, runs, task logs, assets.

:class:`AirflowApi` is the half of :class:`dev.local_airflow.AirflowHandle` that only
talks to a running deployment: it needs ``request``/``api`` (authenticated calls),
``check_alive`` and ``component_log`` from the handle.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote

TERMINAL_RUN_STATES = frozenset({"success", "failed"})


class AirflowHarnessError(RuntimeError):
    """Airflow did not start, or a run did not reach the expected state."""


class AirflowApi:
    """DAGs, runs, task logs, assets and plugins of a running Airflow, through ``/api/v2``."""

    def import_errors(self) -> list[dict[str, Any]]:
        return list(self.api("GET", "/importErrors", params={"limit": 100})["import_errors"])

    def wait_for_dag(
        self,
        dag_id: str,
        timeout: float = 60.0,
        *,
        fileloc_hint: str | None = None,
        since: datetime | None = None,
    ) -> dict[str, Any]:
        """Wait until the dag-processor has parsed ``dag_id``.

        Fails fast on an import error of a file whose path contains ``fileloc_hint`` (recorded at or
        after ``since``, so a stale error of an earlier version of the file is ignored).
        """
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            resp = self.request("GET", f"/api/v2/dags/{quote(dag_id, safe='')}")
            if resp.status_code == 200:
                return dict(resp.json())
            errors = self.import_errors()
            if fileloc_hint:
                relevant = [
                    e
                    for e in errors
                    if fileloc_hint in str(e.get("filename"))
                    and (since is None or datetime.fromisoformat(e["timestamp"]) >= since)
                ]
                if relevant:
                    raise AirflowHarnessError(f"Import errors while waiting for {dag_id}: {relevant}")
            if time.monotonic() > deadline:
                raise AirflowHarnessError(
                    f"DAG {dag_id!r} not parsed after {timeout}s. Import errors: {errors}\n"
                    f"dag-processor log:\n{self.component_log('dag-processor')}"
                )
            time.sleep(0.5)

    def set_paused(self, dag_id: str, paused: bool) -> None:
        self.api("PATCH", f"/dags/{quote(dag_id, safe='')}", json={"is_paused": paused})

    def unpause(self, dag_id: str) -> None:
        self.set_paused(dag_id, False)

    # ------------------------------------------------------------------ runs
    def trigger_dag(
        self,
        dag_id: str,
        conf: Mapping[str, Any] | None = None,
        *,
        run_id: str | None = None,
        logical_date: str | None = None,
        unpause: bool = True,
    ) -> dict[str, Any]:
        """Trigger a run through ``POST /api/v2/dags/{dag_id}/dagRuns``; returns the DagRun JSON."""
        if unpause:
            self.unpause(dag_id)
        body: dict[str, Any] = {"logical_date": logical_date, "conf": dict(conf or {})}
        if run_id is not None:
            body["dag_run_id"] = run_id
        return dict(self.api("POST", f"/dags/{quote(dag_id, safe='')}/dagRuns", json=body))

    def get_dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return dict(self.api("GET", f"/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}"))

    def wait_for_dag_run(
        self,
        dag_id: str,
        run_id: str,
        states: Iterable[str] = TERMINAL_RUN_STATES,
        timeout: float = 120.0,
        poll: float = 0.5,
    ) -> dict[str, Any]:
        """Poll until the run's state is in ``states``; returns the DagRun JSON."""
        wanted = set(states)
        deadline = time.monotonic() + timeout
        while True:
            run = self.get_dag_run(dag_id, run_id)
            if run["state"] in wanted:
                return run
            if time.monotonic() > deadline:
                raise AirflowHarnessError(
                    f"{dag_id}/{run_id} is {run['state']!r} after {timeout}s (wanted {sorted(wanted)})\n"
                    + self.describe_run(dag_id, run_id)
                )
            self.check_alive()
            time.sleep(poll)

    def run_dag(
        self,
        dag_id: str,
        conf: Mapping[str, Any] | None = None,
        *,
        expect: str | None = "success",
        timeout: float = 120.0,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """Unpause, trigger, wait for a terminal state; assert it equals ``expect`` (None: any)."""
        run = self.trigger_dag(dag_id, conf, run_id=run_id)
        final = self.wait_for_dag_run(dag_id, run["dag_run_id"], timeout=timeout)
        if expect is not None and final["state"] != expect:
            raise AirflowHarnessError(
                f"{dag_id}/{final['dag_run_id']} ended {final['state']!r}, expected {expect!r}\n"
                + self.describe_run(dag_id, final["dag_run_id"])
            )
        return final

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        data = self.api(
            "GET",
            f"/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}/taskInstances",
            params={"limit": 100},
        )
        return list(data["task_instances"])

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        """``{task_id (or task_id[map_index]): state}`` for a run."""
        out: dict[str, str | None] = {}
        for ti in self.task_instances(dag_id, run_id):
            key = ti["task_id"] if ti.get("map_index", -1) < 0 else f"{ti['task_id']}[{ti['map_index']}]"
            out[key] = ti["state"]
        return out

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1, map_index: int = -1) -> str:
        """The task's log as plain text (structured log lines joined)."""
        resp = self.request(
            "GET",
            f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}"
            f"/taskInstances/{quote(task_id, safe='')}/logs/{try_number}",
            params={"full_content": "true", "map_index": map_index},
            headers={"Accept": "application/json"},
        )
        if resp.status_code != 200:
            return f"<log unavailable: {resp.status_code} {resp.text[:500]}>"
        content = resp.json().get("content")
        return _render_log_content(content)

    def describe_run(self, dag_id: str, run_id: str, log_lines: int = 80) -> str:
        """Human-readable state of a run: task states, logs of unsuccessful tasks, component logs."""
        parts: list[str] = []
        try:
            tis = self.task_instances(dag_id, run_id)
        except AirflowHarnessError as exc:
            return f"<cannot list task instances: {exc}>"
        parts.append("task states: " + json.dumps({t["task_id"]: t["state"] for t in tis}))
        for ti in tis:
            if ti["state"] in ("success", "skipped", None, "scheduled", "queued"):
                continue
            tries = max(1, int(ti.get("try_number") or 1))
            log = self.task_log(dag_id, run_id, ti["task_id"], tries, ti.get("map_index", -1))
            tail = "\n".join(log.splitlines()[-log_lines:])
            parts.append(f"--- log of {ti['task_id']} (state {ti['state']}, try {tries}):\n{tail}")
        if any(ti["state"] in (None, "scheduled", "queued") for ti in tis):
            parts.append("--- scheduler log tail:\n" + self.component_log("scheduler", 40))
        if any(ti["state"] == "deferred" for ti in tis):
            parts.append("--- triggerer log tail:\n" + self.component_log("triggerer", 40))
        return "\n".join(parts)

    # ------------------------------------------------------------------ assets, plugins
    def asset_events(self, **filters: Any) -> list[dict[str, Any]]:
        """``GET /api/v2/assets/events`` (filters: asset_id, source_dag_id, source_run_id, ...)."""
        params = {"limit": 100, "order_by": "timestamp", **filters}
        return list(self.api("GET", "/assets/events", params=params)["asset_events"])

    def assets(self, **filters: Any) -> list[dict[str, Any]]:
        params = {"limit": 100, **filters}
        return list(self.api("GET", "/assets", params=params)["assets"])

    def plugins(self) -> list[dict[str, Any]]:
        return list(self.api("GET", "/plugins", params={"limit": 100})["plugins"])

    def health(self) -> dict[str, Any]:
        return dict(self.client.get("/api/v2/monitor/health").json())


def _render_log_content(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    lines: list[str] = []
    for item in content:
        if isinstance(item, dict):
            event = item.get("event", "")
            ts = item.get("timestamp", "")
            level = item.get("level", "")
            extra = {k: v for k, v in item.items() if k not in ("event", "timestamp", "level", "logger")}
            line = f"{ts} {level} {event}".strip()
            if extra:
                line += " " + json.dumps(extra, default=str)
            lines.append(line)
        else:
            lines.append(str(item))
    return "\n".join(lines)
