"""``wrk`` (the C HTTP load generator; Debian package ``wrk``) as a benchmark's clients.

One ``wrk`` thread holds ``clients`` connections for ``seconds``; its CPU stays small, so the
server under test keeps the machine's cores, as it would with clients on other machines. A
benchmark gives the Lua functions that make its requests and check its answers (``init``,
``request``, ``response``; ``response`` counts bad answers in the global ``bad``); :data:`REPORT`
adds the ``setup`` and ``done`` that print the figures, and :func:`run_wrk` runs it.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

#: Lua: collects the threads, then prints p50 and p99 (ms), the requests and the errors (wrk's
#: transport errors plus every thread's ``bad`` count)
REPORT = """
local threads = {}
setup = function(thread) table.insert(threads, thread) end
done = function(summary, latency, requests)
  local e = summary.errors
  local bad = 0
  for _, thread in ipairs(threads) do bad = bad + thread:get("bad") end
  io.write(string.format("wrk: p50_ms=%.3f p99_ms=%.3f requests=%d errors=%d\\n",
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, summary.requests,
    e.connect + e.read + e.write + e.timeout + bad))
end
"""


def run_wrk(url: str, clients: int, seconds: float, script: str, env: Mapping[str, str], tmp: str | Path,
            name: str = "load") -> tuple[float, float, int, int]:
    """Run ``wrk -t1 -c<clients> -d<seconds>s`` against ``url`` with ``script`` + :data:`REPORT`
    (written to ``tmp/<name>.lua``), the process environment plus ``env``.

    Returns:
        ``(p50 ms, p99 ms, requests, errors)``.

    Raises:
        RuntimeError: wrk printed no figures (its output's end in the message).
        subprocess.CalledProcessError: wrk failed.
    """
    path = Path(tmp) / f"{name}.lua"
    path.write_text(script + REPORT)
    out = subprocess.run(
        ["wrk", "-t1", f"-c{clients}", f"-d{max(1, round(seconds))}s", "--timeout", "60s", "-s", str(path), url],
        env={**os.environ, **env}, capture_output=True, text=True, check=True,
    ).stdout
    found = re.search(r"wrk: p50_ms=(\S+) p99_ms=(\S+) requests=(\d+) errors=(\d+)", out)
    if found is None:
        raise RuntimeError(f"wrk printed no figures: {out[-500:]}")
    return float(found[1]), float(found[2]), int(found[3]), int(found[4])
