"""Take the README's screenshots from the running demo: ``make demo``, then run this.

    make demo                                  # a real streaming run of the flights topology
    .venv/bin/python dev/readme_screenshots.py # writes docs/images/{lineage,freshness,delays}.png

It logs in to the demo's Airflow UI (``.demo/airflow.json``; user admin) in headless system
Chromium (``apt-get install -y chromium``) and shoots the lineage, freshness and delay views of the
``flights`` topology at 1400x900. Development material: not part of the package.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # a script: the repository root is not on sys.path

from dev.browser import chromium, login, new_page, screenshot  # noqa: E402


def main() -> int:
    state_path = REPO / ".demo" / "airflow.json"
    if not state_path.exists():
        print("no demo Airflow is running: run `make demo` first", file=sys.stderr)
        return 2
    base = json.loads(state_path.read_text())["base_url"]
    out = REPO / "docs" / "images"
    with chromium() as browser:
        page = new_page(browser)
        login(page, base, "admin", "admin")
        page.goto(f"{base}/tsb/ui/lineage?dag_id=flights_streaming")
        page.wait_for_selector("body[data-loaded=true]")
        print(screenshot(page, out, "lineage"))
        page.goto(f"{base}/tsb/ui/freshness?topology=flights")
        page.wait_for_selector("#tsb-freshness-table tr[data-table]")
        print(screenshot(page, out, "freshness"))
        page.goto(f"{base}/tsb/ui/delays?topology=flights&limit=50")
        page.wait_for_selector("#tsb-delay-table tr[data-barrier]")
        page.wait_for_selector("body[data-loaded=true]")
        print(screenshot(page, out, "delays"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
