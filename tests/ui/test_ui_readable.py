"""The UI pages read well at 1400x900 in headless Chromium (issue 23 item 4), on a real Airflow.

* text is at least 12 px: the computed font size of every element with text of its own, the
  lineage graph's SVG labels included, and the graph labels' size on screen (font size times the
  zoom of the pan/zoom view);
* nothing is wider than the viewport (``document.scrollWidth <= innerWidth``) on any page, also
  with a table's detail open;
* the lineage graph fills the width and zooms and pans (the vendored svg-pan-zoom);
* a failed job shows its error text (the job's record in the metastore) and a link to its task
  log in the Airflow 3 UI, which opens the failed try's log;
* ``/tsb/docs`` renders Swagger UI with every request outside the api-server blocked (no CDN), and
  ``/tsb/openapi.json`` and ``/tsb/docs`` need a login like the API.

The Airflow and its metastore: ``conftest.py`` and :mod:`tests.ui.flights_ui`.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from playwright.sync_api import Page, Route

from dev.airflow_harness import AirflowHandle
from dev.browser import DEFAULT_TIMEOUT_MS, screenshot
from tests.ui.flights_ui import FAILED_JOB, FAILING_DAG_ID, FAILURE_TEXT, open_page

pytestmark = [pytest.mark.airflow, pytest.mark.browser]

PAGES = {
    "lineage": ("/tsb/ui/lineage?topology=flights", "#tsb-graph-svg"),
    "freshness": ("/tsb/ui/freshness?topology=flights", "#tsb-freshness-table"),
    "delays": ("/tsb/ui/delays?topology=flights", "#tsb-delay-table"),
}

#: [tag, class, text, computed font-size px] of every visible element that has text of its own
OWN_TEXT_SIZES = """() => [...document.querySelectorAll("body *")].filter((e) => {
    if (["SCRIPT", "STYLE", "TITLE"].includes(e.tagName)) return false;
    const own = [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    const box = e.getBoundingClientRect();
    return own && box.width > 0 && box.height > 0;
  }).map((e) => [e.tagName, e.getAttribute("class") || "", e.textContent.trim().slice(0, 40),
                 parseFloat(getComputedStyle(e).fontSize)])"""

OVERFLOW = """() => ({scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
  wide: [...document.querySelectorAll("body *")].filter((e) => e.getBoundingClientRect().right > window.innerWidth + 0.5
    && !e.closest(".tsb-scroll, .tsb-wide, .tsb-graph"))
    .map((e) => e.tagName + "#" + e.id + "." + e.getAttribute("class")).slice(0, 5)})"""


def small_text(page: Page) -> list[list[object]]:
    sizes = page.evaluate(OWN_TEXT_SIZES)
    assert len(sizes) > 20, sizes  # the check saw the page's text
    return [s for s in sizes if s[3] < 12]


def assert_fits(page: Page, name: str) -> None:
    fit = page.evaluate(OVERFLOW)
    assert fit["scrollWidth"] <= fit["innerWidth"], (name, fit)


@pytest.mark.parametrize("name", list(PAGES))
def test_text_is_at_least_12px_and_no_page_is_wider_than_the_viewport(
    page: Page, airflow_server: AirflowHandle, name: str
) -> None:
    path, ready = PAGES[name]
    open_page(page, airflow_server.base_url + path, ready)
    assert page.viewport_size == {"width": 1400, "height": 900}
    assert small_text(page) == []
    assert_fits(page, name)
    if name == "lineage":  # a table's detail, with the explanations of unsatisfiable levels
        # at a readable zoom the end of the chain is right of the view: a user pans to it; a click event
        page.locator('[data-node="table:tsb.flights.carrier_ranking"]').dispatch_event("click")
        page.wait_for_selector("#tsb-consistent tr[data-level]")
        assert small_text(page) == []
        assert_fits(page, "lineage with the detail of carrier_ranking")


def test_graph_labels_are_12px_on_screen_and_the_graph_fills_the_width(
    page: Page, airflow_server: AirflowHandle, screenshot_dir: Path
) -> None:
    open_page(page, airflow_server.base_url + PAGES["lineage"][0], "#tsb-graph-svg")
    labels = page.evaluate("""() => [...document.querySelectorAll("#tsb-graph-svg .node text")].map((t) =>
        [t.textContent, parseFloat(getComputedStyle(t).fontSize), t.getScreenCTM().a])""")
    assert len(labels) >= 8 * 2, labels  # 5 tables and 3 jobs, two lines or more each
    assert [lbl for lbl in labels if lbl[1] < 12 or lbl[1] * lbl[2] < 12] == []
    graph = page.locator("#tsb-graph-svg").bounding_box()
    width = page.evaluate("document.documentElement.clientWidth")
    assert graph is not None and graph["width"] >= width - 60 and graph["height"] >= 320, (graph, width)
    screenshot(page, screenshot_dir, "lineage_1400x900", full_page=False)


def _viewport_transform(page: Page) -> str:
    return page.locator("#tsb-graph-svg .svg-pan-zoom_viewport").get_attribute("transform") or ""


def _transform_changed_from(page: Page, before: str, timeout_ms: float = 5000) -> str:
    """The viewport's transform once it differs from ``before`` (svg-pan-zoom applies a zoom or a
    pan on the next animation frame, late on a busy machine); a timeout fails the test."""
    page.wait_for_function(
        "(before) => (document.querySelector('#tsb-graph-svg .svg-pan-zoom_viewport')"
        "?.getAttribute('transform') || '') !== before", arg=before, timeout=timeout_ms,
    )
    return _viewport_transform(page)


def test_graph_zooms_and_pans(page: Page, airflow_server: AirflowHandle) -> None:
    open_page(page, airflow_server.base_url + PAGES["lineage"][0], "#tsb-graph-svg")
    zoom = float(page.locator("#tsb-graph-svg").get_attribute("data-zoom") or 0)
    assert zoom >= 0.94, zoom  # never starts where the 13 px labels would show below 12 px
    start = _viewport_transform(page)
    page.locator("#svg-pan-zoom-zoom-in").click()
    zoomed = _transform_changed_from(page, start)
    assert page.evaluate("window.tsbPanZoom.getSizes().realZoom") > zoom
    box = page.locator("#tsb-graph-svg").bounding_box()
    assert box is not None
    x, y = box["x"] + 40, box["y"] + box["height"] - 40  # empty corner: a drag pans
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + 150, y - 60, steps=5)
    page.mouse.up()
    _transform_changed_from(page, zoomed)  # panned
    page.locator("#svg-pan-zoom-reset-pan-zoom").click()
    assert page.evaluate("window.tsbPanZoom.getSizes().realZoom") < zoom * 1.3 + 1


def test_failed_job_shows_its_error_and_a_link_to_its_task_log(
    page: Page, airflow_server: AirflowHandle, screenshot_dir: Path
) -> None:
    open_page(page, airflow_server.base_url + PAGES["lineage"][0], "#tsb-graph-svg")
    failure = page.locator(f'#tsb-job-failures .tsb-failure[data-job="{FAILED_JOB}"]')
    assert failure.count() == 1
    assert failure.locator("pre.tsb-error-text").inner_text() == FAILURE_TEXT
    assert page.locator("#tsb-job-failures .tsb-failure").count() == 1  # only the failed job
    link = failure.locator("a.tsb-log-link")
    run_id = airflow_server.failed_run_id  # type: ignore[attr-defined]
    expected = (f"{airflow_server.base_url}/dags/{FAILING_DAG_ID}/runs/{quote(run_id)}/tasks/{FAILED_JOB}"
                "?try_number=1")
    assert (link.get_attribute("href"), link.get_attribute("target")) == (expected, "_top")
    assert_fits(page, "lineage with a failed job")
    screenshot(page, screenshot_dir, "lineage_failed_job", full_page=False)
    # the link opens the failed try in the Airflow UI, whose log holds the task's error
    log = airflow_server.task_log(FAILING_DAG_ID, run_id, FAILED_JOB, try_number=1)
    assert "dep_delayy" in log and "RuntimeError" in log
    link.click()
    page.wait_for_url(expected, timeout=DEFAULT_TIMEOUT_MS)
    page.get_by_text("dep_delayy").first.wait_for(timeout=60_000)


def test_swagger_ui_renders_without_network(page: Page, airflow_server: AirflowHandle) -> None:
    blocked: list[str] = []

    def only_airflow(route: Route) -> None:
        if route.request.url.startswith(airflow_server.base_url):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    page.context.route("**/*", only_airflow)
    response = page.goto(f"{airflow_server.base_url}/tsb/docs")
    assert response is not None and response.status == 200
    page.wait_for_selector(".swagger-ui .info .title", timeout=DEFAULT_TIMEOUT_MS)
    assert "airflow-provider-tsb" in page.locator(".swagger-ui .info .title").inner_text()
    page.wait_for_selector(".opblock-summary-path[data-path='/api/v1/topology']")
    assert blocked == []
    assert_fits(page, "docs")


def test_openapi_and_docs_need_a_login(airflow_server: AirflowHandle) -> None:
    with httpx.Client(base_url=airflow_server.base_url, timeout=30) as anon:
        for path in ("/tsb/openapi.json", "/tsb/docs"):
            r = anon.get(path)
            assert r.status_code == 401, (path, r.status_code)
            assert "/api/v1/topology" not in r.text
        assert anon.get("/tsb/redoc").status_code == 404  # no ReDoc (it loads from a CDN)
    r = airflow_server.request("GET", "/tsb/openapi.json")
    assert r.status_code == 200 and "/api/v1/topology" in r.json()["paths"]
    assert r.json()["info"]["title"] == "airflow-provider-tsb"
    docs = airflow_server.request("GET", "/tsb/docs")
    assert docs.status_code == 200 and "/tsb/static/vendor/swagger-ui/swagger-ui-bundle.js" in docs.text
    assert "cdn" not in docs.text.lower()


#: per table node of the graph: its name, the screen boxes of its title lines, the box's screen
#: rectangle, and the title's on-screen font size
NODE_BOXES = """() => [...document.querySelectorAll('#tsb-graph-svg .node[data-kind=table]')].map((g) => ({
    name: g.getAttribute('data-name'),
    title: [...g.querySelectorAll('text.title')].map((t) => t.textContent).join(''),
    lines: [...g.querySelectorAll('text.title')].map((t) => t.getBoundingClientRect().toJSON()),
    box: g.querySelector('rect').getBoundingClientRect().toJSON(),
    px: parseFloat(getComputedStyle(g.querySelector('text.title')).fontSize) * g.getScreenCTM().a}))"""


@pytest.mark.parametrize("topology", ["us_births", "flights"])
def test_every_table_name_is_readable_in_view_at_1400px(
    page: Page, airflow_server: AirflowHandle, screenshot_dir: Path, topology: str
) -> None:
    """Issue 56 item 5: a topology of 2 roots, 3 jobs and 5 sinks whose names share a long prefix
    (and the flights chain of 7 columns) is laid out by dagre to fit 1400 px: every table's whole
    name is on screen without panning, at >= 12 px, and no two boxes overlap."""
    open_page(page, f"{airflow_server.base_url}/tsb/ui/lineage?topology={topology}", "#tsb-graph-svg")
    view = page.locator("#tsb-lineage").bounding_box()
    assert view is not None
    nodes = page.evaluate(NODE_BOXES)
    assert len(nodes) == (7 if topology == "us_births" else 5), nodes
    for node in nodes:
        assert node["title"] == node["name"], node  # the whole name, on one or two lines
        assert node["px"] >= 12, node
        for line in node["lines"]:
            inside = (line["left"] >= view["x"] - 0.5 and line["right"] <= view["x"] + view["width"] + 0.5
                      and line["top"] >= view["y"] - 0.5 and line["bottom"] <= view["y"] + view["height"] + 0.5)
            assert inside, (node["name"], line, view)
            assert line["right"] <= node["box"]["right"] + 0.5, node  # inside its own box
    boxes = [n["box"] for n in nodes]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            apart = (a["right"] <= b["left"] or b["right"] <= a["left"]
                     or a["bottom"] <= b["top"] or b["bottom"] <= a["top"])
            assert apart, (a, b)
    assert_fits(page, f"lineage of {topology}")
    screenshot(page, screenshot_dir, f"lineage_{topology}_1400x900", full_page=False)


def test_a_failed_jobs_box_leads_with_its_exception_line(page: Page, airflow_server: AirflowHandle) -> None:
    """Issue 56 item 5: a Python traceback's exception line is its last; the box shows it first."""
    from tests.ui.flights_ui import TRACEBACK_TEXT

    open_page(page, f"{airflow_server.base_url}/tsb/ui/lineage?topology=us_births", "#tsb-graph-svg")
    failure = page.locator('#tsb-job-failures .tsb-failure[data-job="state_merge"]')
    assert failure.locator(".tsb-error-line").inner_text() == TRACEBACK_TEXT.splitlines()[-1]
    assert failure.locator("pre.tsb-error-text").inner_text() == TRACEBACK_TEXT
    line, pre = (failure.locator(s).bounding_box() for s in (".tsb-error-line", "pre.tsb-error-text"))
    assert line is not None and pre is not None and line["y"] < pre["y"]
    open_page(page, airflow_server.base_url + PAGES["lineage"][0], "#tsb-graph-svg")  # a JVM error: its first line
    assert page.locator(f'.tsb-failure[data-job="{FAILED_JOB}"] .tsb-error-line').count() == 0


def test_chart_axes_tick_at_round_durations(page: Page, airflow_server: AirflowHandle) -> None:
    """Issue 56 item 5: ticks 0, 30 s, 1 min ... (a 1-2-5 step of a unit), never 22.8 s or 1.1 min."""
    open_page(page, airflow_server.base_url + PAGES["delays"][0], "#tsb-delay-table")
    ticks = page.evaluate("""() => [...document.querySelectorAll('svg text.tick')].map((t) =>
        [t.closest('svg').id, Number(t.getAttribute('data-ms')), t.textContent])""")
    assert ticks, "no chart ticks"
    steps = {1, 2, 5, 10, 20, 50, 100, 200, 500, *(s * 1000 for s in (1, 2, 5, 10, 15, 20, 30)),
             *(m * 60000 for m in (1, 2, 5, 10, 15, 20, 30))}
    for chart in {c for c, _, _ in ticks}:
        values = [v for c, v, _ in ticks if c == chart]
        assert values[0] == 0 and len(values) >= 3, (chart, values)
        gaps = {b - a for a, b in zip(values, values[1:], strict=False)}
        assert len(gaps) == 1 and gaps <= steps, (chart, values)
    assert [label for _, _, label in ticks if re.search(r"\.\d*0\b", label)] == []  # no "1.0 min"
