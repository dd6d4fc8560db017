"""Server side of the TSB UI pages (``/tsb/ui/lineage``, ``/tsb/ui/freshness``, ``/tsb/ui/delays``).

The pages are plain HTML + vanilla JavaScript + inline SVG (no build step; the lineage graph's
layout is the vendored ``dagre`` and its pan and zoom the vendored ``svg-pan-zoom``, served from
``/tsb/static/vendor``, no CDN, so the pages work offline; text is at least 12 CSS px): the
server renders a shell (``templates/page.html`` around the page's own ``templates/<page>.html``)
with a JSON config (which topology, the
registered topologies for the selector, the API base); ``static/tsb.js`` then fetches bounded
data from the authenticated MetaService API (``/tsb/api/v1/topology``, ``/tables/.../barriers``,
``/freshness``, ``/delays?limit=``) with the browser's Airflow ``_token`` cookie and draws it.
No data is embedded in the page beyond the
topology names, and the page routes themselves require Airflow authentication.

Only the topologies the user may read are listed or shown (the API's rules,
:mod:`airflow_provider_tsb.api.access`). DAG -> topology (``?dag_id=`` from the DAG page tab),
first match wins:

0. the topology the DAG runs (its tasks write the topology's tables);
1. a topology named exactly like the DAG id;
2. the DAG id without a ``_topology`` / ``-topology`` suffix (``flights_topology`` -> ``flights``);
3. the longest topology name that prefixes the DAG id followed by ``_``, ``-`` or ``.``
   (``flights_reporting`` -> ``flights``).

Otherwise (and without ``?topology=``) the page shows a selector of the registered topologies
(or picks the only one).
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from functools import cache
from importlib import resources
from string import Template
from typing import TYPE_CHECKING, Any

from airflow_provider_tsb.caches import CACHES

if TYPE_CHECKING:
    from airflow_provider_tsb.api.access import TopologyAccess
    from airflow_provider_tsb.metastore.store import MetaStore

API_BASE = "../api/v1"  # relative to /tsb/ui/<page>: works under any root path and inside iframes
_SUFFIXES = ("_topology", "-topology", ".topology")
_SEPARATORS = ("_", "-", ".")


@cache
def _asset(kind: str, name: str) -> str:
    return resources.files(__package__).joinpath(kind, name).read_text(encoding="utf-8")



CACHES.on_clear("ui.assets", _asset.cache_clear)

def topology_for_dag(dag_id: str, topologies: Sequence[str]) -> str | None:
    """The topology shown for DAG ``dag_id`` (see module docstring), or None."""
    known = set(topologies)
    if dag_id in known:
        return dag_id
    for suffix in _SUFFIXES:
        if dag_id.endswith(suffix) and dag_id[: -len(suffix)] in known:
            return dag_id[: -len(suffix)]
    prefixed = [t for t in known if any(dag_id.startswith(t + sep) for sep in _SEPARATORS)]
    return max(prefixed, key=len) if prefixed else None


def _choose(
    store: MetaStore | None, topology: str | None, dag_id: str | None, access: TopologyAccess | None = None
) -> tuple[str | None, list[str], str | None]:
    """(chosen topology, registered topologies the user may read, error message).

    With ``access``, only the topologies it lets the user read are listed or chosen, and a DAG
    maps first to the topology it runs (:meth:`TopologyAccess.topology_of_dag`).
    """
    if store is None:
        return topology, [], "The TSB metastore is not reachable (check TSB_METASTORE_URL / tsb_default)."
    try:
        names = sorted(store.registry.topologies())
        if access is not None:
            names = access.visible(names)
    except Exception as exc:  # noqa: BLE001 - show the problem on the page
        return topology, [], f"The TSB metastore is not readable: {type(exc).__name__}"
    if topology:
        if topology in names:
            return topology, names, None
        return None, names, f"Topology {topology!r} is not registered, or you may not read it."
    if dag_id:
        found = (access.topology_of_dag(dag_id, names) if access is not None else None) or topology_for_dag(
            dag_id, names
        )
        if found:
            return found, names, None
        return None, names, f"DAG {dag_id!r} has no topology (no registered topology matches its id)."
    if len(names) == 1:
        return names[0], names, None
    return None, names, None if names else "No topology is registered yet."


#: (page, link text) of the navigation bar, in order
PAGES = (("lineage", "Lineage graph"), ("freshness", "Freshness"), ("delays", "Barrier delays"))
#: page -> its heading (``templates/page.html`` is the shell; ``templates/<page>.html`` its body)
HEADINGS = {"lineage": "Timestamp-barrier lineage", "freshness": "Table freshness",
            "delays": "Timestamp-barrier delays"}
#: page -> the scripts it loads before ``static/tsb.js``
PAGE_SCRIPTS = {"lineage": '<script src="../static/vendor/svg-pan-zoom/svg-pan-zoom.min.js"></script>\n'
                            '<script src="../static/vendor/dagre/dagre.min.js"></script>\n'}


def _nav(current: str) -> str:
    links = []
    for page, text in PAGES:
        if page == current:
            links.append(f'<span class="tsb-navcurrent" aria-current="page">{html.escape(text)}</span>')
        else:
            links.append(f'<a id="tsb-link-{page}" class="tsb-navlink" href="{page}">{html.escape(text)}</a>')
    return '<nav class="tsb-nav">' + " ".join(links) + "</nav>"


def _render(
    title: str, page: str, user: str, topology: str | None, dag_id: str | None,
    names: list[str], error: str | None, extra: dict[str, Any] | None = None,
) -> str:
    """The page's HTML: the shell ``templates/page.html`` (header, navigation, topology bar,
    config, scripts) around the page's own ``templates/<page>.html``."""
    config = {"page": page, "apiBase": API_BASE, "topology": topology, "dagId": dag_id, "topologies": names,
              "error": error, **(extra or {})}
    # JSON inside <script>: escape what could close the element or open a comment.
    config_json = json.dumps(config).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    scope = f"DAG {dag_id}" if dag_id else (f"topology {topology}" if topology else "all topologies")
    return Template(_asset("templates", "page.html")).substitute(
        page=page,
        heading=HEADINGS[page],
        body=_asset("templates", f"{page}.html").rstrip("\n"),
        scripts=PAGE_SCRIPTS.get(page, ""),
        title=html.escape(title),
        user=html.escape(user),
        scope=html.escape(scope),
        topology=html.escape(topology or "-"),
        nav=_nav(page),
        config=config_json,
        css=_asset("static", "tsb.css"),
        script=_asset("static", "tsb.js"),
    )


def render_lineage(
    store: MetaStore | None, user: str, topology: str | None, dag_id: str | None,
    access: TopologyAccess | None = None, table: str | None = None,
) -> str:
    """HTML of the lineage page (topologies limited to what ``access`` lets the user read);
    ``table`` opens that table's barrier history (the link in a tsb asset's ``extra``)."""
    chosen, names, error = _choose(store, topology, dag_id, access)
    return _render("TSB lineage", "lineage", user, chosen, dag_id, names, error, {"table": table})


def render_delays(
    store: MetaStore | None, user: str, topology: str | None, dag_id: str | None, limit: int = 50,
    access: TopologyAccess | None = None,
) -> str:
    """HTML of the delays page (the newest ``limit`` barriers; topologies as for the lineage page)."""
    chosen, names, error = _choose(store, topology, dag_id, access)
    return _render("TSB barrier delays", "delays", user, chosen, dag_id, names, error,
                   {"limit": limit})


def render_freshness(
    store: MetaStore | None, user: str, topology: str | None, dag_id: str | None,
    access: TopologyAccess | None = None,
) -> str:
    """HTML of the freshness page: per table how far it is behind the newest barrier, its target
    and whether it misses it (topologies as for the lineage page)."""
    chosen, names, error = _choose(store, topology, dag_id, access)
    return _render("TSB freshness", "freshness", user, chosen, dag_id, names, error)
