/* TSB UI: lineage graph and delay views. Vanilla JS + inline SVG, no build step.
   Data comes from the authenticated MetaService API (cookie `_token`), bounded by limit. */
(function () {
  "use strict";
  const CFG = JSON.parse(document.getElementById("tsb-config").textContent);
  const SVGNS = "http://www.w3.org/2000/svg";
  /* the smallest zoom the lineage graph starts at: its 13 px labels then show at 12.2 px */
  const MIN_READABLE_ZOOM = 0.94;
  /* a table name longer than this many characters is shown on two lines */
  const NAME_CHARS = 26;
  const PALETTE = ["#0b6bcb", "#e8590c", "#2b8a3e", "#862e9c", "#c92a2a", "#1098ad", "#5f3dc4", "#a61e4d"];

  function $(id) { return document.getElementById(id); }
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, v);
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, v);
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function fmtMs(ms) {
    if (ms === null || ms === undefined) return "–";
    if (ms < 1000) return ms + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
    if (ms < 3600000) return (ms / 60000).toFixed(1) + " min";
    return (ms / 3600000).toFixed(1) + " h";
  }
  /* the smallest round duration (1-2-5 ms steps up to 500 ms, then 1, 2, 5, 10, 15, 20, 30 s, the same in
     minutes, then 1, 2, 3, 6, 12, 24 h) at or above ms: a chart's tick step */
  const NICE_MS = [1, 2, 5, 10, 20, 50, 100, 200, 500].concat(
    [1, 2, 5, 10, 15, 20, 30].map((s) => s * 1000), [1, 2, 5, 10, 15, 20, 30].map((m) => m * 60000),
    [1, 2, 3, 6, 12, 24].map((h) => h * 3600000));
  function niceStep(ms) {
    for (const step of NICE_MS) if (step >= ms) return step;
    return Math.ceil(ms / 86400000) * 86400000;
  }
  /* a tick's label: a round value with no trailing ".0" (20 s, 1 min, 1.5 h) */
  function fmtTick(ms) {
    const units = [[3600000, " h"], [60000, " min"], [1000, " s"]];
    for (const [size, unit] of units) if (ms >= size) return +(ms / size).toFixed(2) + unit;
    return ms === 0 ? "0" : ms + " ms";
  }
  /* a long dotted or snake_case name may wrap after "." and "_" (zero-width spaces), never mid-word */
  function breakable(name) { return String(name).replace(/([._])/g, "$1\u200b"); }
  function fmtTime(ms) {
    if (ms === null || ms === undefined) return "–";
    return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }
  function showError(msg) { const e = $("tsb-error"); e.textContent = msg; e.hidden = !msg; }
  async function api(path) {
    const r = await fetch(CFG.apiBase + path, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!r.ok) {
      let detail = r.statusText;
      try { detail = (await r.json()).detail || detail; } catch (_) { /* not JSON */ }
      throw new Error("HTTP " + r.status + ": " + (typeof detail === "string" ? detail : JSON.stringify(detail)));
    }
    return r.json();
  }
  function qs(params) {
    const u = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") u.set(k, v);
    const s = u.toString();
    return s ? "?" + s : "";
  }

  /* ---------------------------------------------------------------- common chrome */
  function setupChrome() {
    const sel = $("tsb-topology-select");
    const names = CFG.topologies || [];
    sel.appendChild(el("option", { value: "" }, names.length ? "— choose —" : "(none registered)"));
    for (const n of names) {
      const o = el("option", { value: n, "data-topology": n }, n);
      if (n === CFG.topology) o.selected = true;
      sel.appendChild(o);
    }
    sel.addEventListener("change", () => {
      if (sel.value) location.search = qs({ topology: sel.value, limit: CFG.page === "delays" ? CFG.limit : null });
    });
    if (CFG.topology) {
      document.querySelectorAll("a.tsb-navlink").forEach((a) => { a.href = a.getAttribute("href") + qs({ topology: CFG.topology }); });
    }
    $("tsb-refresh").addEventListener("click", () => load());
    if (CFG.error) showError(CFG.error);
  }

  /* ---------------------------------------------------------------- lineage */
  /* a table name on at most two lines, broken after a "." or "_" near its middle when it is long */
  function wrapName(name, max) {
    const text = String(name);
    if (text.length <= max) return [text];
    let best = -1;
    for (let i = 1; i < text.length - 1; i++) {
      if ((text[i - 1] === "." || text[i - 1] === "_") &&
          (best < 0 || Math.abs(text.length / 2 - i) < Math.abs(text.length / 2 - best))) best = i;
    }
    return best < 0 ? [text] : [text.slice(0, best), text.slice(best)];
  }

  function layout(topo, sizes, rankdir) {
    /* the vendored dagre (Sugiyama layered layout): node centres, edge routes and the graph's
       size, in SVG user units (1 unit = 1 CSS px at zoom 1) */
    const g = new window.dagre.graphlib.Graph();
    g.setGraph({ rankdir: rankdir, nodesep: rankdir === "LR" ? 28 : 24, ranksep: rankdir === "LR" ? 56 : 44,
      marginx: 24, marginy: 24 });
    g.setDefaultEdgeLabel(() => ({}));
    for (const n of topo.nodes) g.setNode(n.id, { width: sizes[n.id].w, height: sizes[n.id].h });
    for (const e of topo.edges) if (sizes[e.source] && sizes[e.target]) g.setEdge(e.source, e.target);
    window.dagre.layout(g);
    const pos = {};
    for (const n of topo.nodes) {
      const v = g.node(n.id), w = sizes[n.id].w, h = sizes[n.id].h;
      pos[n.id] = { x: v.x - w / 2, y: v.y - h / 2, w: w, h: h, cx: v.x, cy: v.y };
    }
    return { pos: pos, width: g.graph().width, height: g.graph().height, rankdir: rankdir };
  }

  function fitLayout(topo, sizes, hostWidth) {
    /* left to right when it fits the page at a readable zoom, else top to bottom (a deep chain
       becomes rows, a wide fan-out a row of boxes), whichever is narrower on screen */
    const lr = layout(topo, sizes, "LR");
    if (lr.width * MIN_READABLE_ZOOM <= hostWidth) return lr;
    const tb = layout(topo, sizes, "TB");
    return tb.width < lr.width ? tb : lr;
  }

  function behindText(t) {
    /* one wording for "how far behind": "up to date" / "behind: 2 barriers, 15.3 min" /
       "behind: nothing WRITTEN yet, 15.3 min" (time from the freshness report, barriers from the graph) */
    const secs = t.freshness_lag_s;
    const time = secs ? ", " + fmtMs(Math.round(secs * 1000)) : "";
    if (t.lag === null || t.lag === undefined) return "behind: nothing WRITTEN yet" + time;
    if (t.lag === 0 && !secs) return "up to date";
    return `behind: ${t.lag} barrier${t.lag === 1 ? "" : "s"}${time}`;
  }

  function targetText(t) {
    /* "target 30 s: MISSED" / "target 1.0 h: met" / "" without a target */
    const target = t.freshness_target_s;
    if (target === null || target === undefined) return "";
    return `target ${fmtMs(Math.round(target * 1000))}: ${t.freshness_missed ? "MISSED" : "met"}`;
  }

  function attr(v) { return v === null || v === undefined ? "" : v; }

  function drawTableNode(g, n, t) {
    g.classList.add(t.role || n.role || "unknown");
    if (t.lag) g.classList.add("lagging");
    if (t.freshness_missed) g.classList.add("missed");
    const data = { role: t.role || n.role || "", barrier: t.written_barrier, version: t.version, lag: t.lag,
      "freshness-target": t.freshness_target_s, "freshness-lag": t.freshness_lag_s,
      missed: t.freshness_missed ? "true" : "false", bottleneck: t.bottleneck || "" };
    for (const [k, v] of Object.entries(data)) g.setAttribute("data-" + k, attr(v));
    const wb = t.written_barrier === null || t.written_barrier === undefined ? "none" : "#" + t.written_barrier;
    const ver = t.version === null || t.version === undefined ? "–" : "v" + t.version;
    const behind = behindText(t), target = targetText(t);
    const lines = wrapName(n.name, NAME_CHARS).map((part) => [part, "title"]);
    lines.push([`${t.role || n.role} · WRITTEN ${wb} · Delta ${ver}`, "sub"], [behind, "sub lag" + (t.lag ? " warn" : "")]);
    if (target) lines.push([target, "sub freshness" + (t.freshness_missed ? " warn" : "")]);
    if (t.bottleneck) lines.push(["bottleneck: " + t.bottleneck, "sub bottleneck" + (t.freshness_missed ? " warn" : "")]);
    lines.forEach(([text, cls], i) => g.appendChild(svg("text", { x: 12, y: 24 + i * 21, class: cls }, text)));
    g.appendChild(svg("title", {}, `${n.name}\nnewest WRITTEN barrier ${wb}, Delta ${ver}\n${behind}` +
      (target ? "\n" + target : "") + (t.bottleneck ? "\nbottleneck job: " + t.bottleneck : "")));
  }

  function drawJobNode(g, n, j) {
    g.classList.add("job", "state-" + (j.status || "unknown"));
    if (j.stale) g.classList.add("stale");
    g.setAttribute("data-state", j.stale ? "stale" : (j.status || "unknown"));
    g.setAttribute("data-status", j.status || "");
    g.setAttribute("data-stale", j.stale ? "true" : "false");
    g.appendChild(svg("text", { x: 14, y: 25, class: "title" }, "⚙ " + n.name));
    const cur = j.current_barrier === null || j.current_barrier === undefined ? "" : ` · barrier #${j.current_barrier}`;
    g.appendChild(svg("text", { x: 14, y: 47, class: "sub state" }, (j.status || "unknown") + cur));
    if (j.stale) g.appendChild(svg("text", { x: 14, y: 68, class: "warn" }, "STALE: no heartbeat"));
    else if (j.status === "failed") g.appendChild(svg("text", { x: 14, y: 68, class: "warn" }, "error and log: see above"));
    g.appendChild(svg("title", {}, `job ${n.name}\nstatus ${j.status}${j.stale ? " (stale)" : ""}\n` +
      `last heartbeat ${fmtTime(j.last_heartbeat_ms)}` + (j.message ? "\n" + j.message : "")));
  }

  function drawGraph(topo) {
    /* draw each node's box at the origin, measure its text, lay the graph out with dagre
       (fitLayout), then move the boxes and route the edges */
    const host = $("tsb-lineage");
    host.textContent = "";
    const root = svg("svg", { id: "tsb-graph-svg", width: "100%", height: "100%", role: "img",
      "aria-label": "topology " + topo.name, "data-topology": topo.name });
    const defs = svg("defs");
    const marker = svg("marker", { id: "tsb-arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 8,
      markerHeight: 8, orient: "auto-start-reverse" });
    marker.appendChild(svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#9aa5b1" }));
    defs.appendChild(marker);
    root.appendChild(defs);
    const edges = svg("g", { class: "edges" });
    root.appendChild(edges);
    host.appendChild(root); /* in the document, so that its text can be measured */
    const groups = {}, sizes = {};
    for (const n of topo.nodes) {
      const g = svg("g", { class: "node", "data-node": n.id, "data-kind": n.kind, "data-name": n.name });
      const rect = svg("rect", { width: 10, height: 10, rx: n.kind === "job" ? 14 : 4 });
      g.appendChild(rect);
      if (n.kind === "table") {
        drawTableNode(g, n, topo.tables[n.name] || {});
        g.addEventListener("click", () => selectTable(n.name, g));
      } else {
        drawJobNode(g, n, topo.jobs[n.name] || {});
      }
      root.appendChild(g);
      const box = g.getBBox();
      const w = Math.ceil(Math.max(n.kind === "table" ? 200 : 160, box.x + box.width + 14));
      const h = Math.ceil(Math.max(n.kind === "table" ? 100 : 76, box.y + box.height + 12));
      rect.setAttribute("width", w);
      rect.setAttribute("height", h);
      groups[n.id] = g;
      sizes[n.id] = { w: w, h: h };
    }
    const { pos, width, height, rankdir } = fitLayout(topo, sizes, host.clientWidth || 1200);
    for (const n of topo.nodes) groups[n.id].setAttribute("transform", `translate(${pos[n.id].x},${pos[n.id].y})`);
    for (const e of topo.edges) {
      const a = pos[e.source], b = pos[e.target];
      if (!a || !b) continue;
      let d;
      if (rankdir === "LR") {
        const x1 = a.x + a.w, y1 = a.cy, x2 = b.x, y2 = b.cy, mx = (x1 + x2) / 2;
        d = `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`;
      } else {
        const x1 = a.cx, y1 = a.y + a.h, x2 = b.cx, y2 = b.y, my = (y1 + y2) / 2;
        d = `M ${x1} ${y1} C ${x1} ${my}, ${x2} ${my}, ${x2} ${y2}`;
      }
      edges.appendChild(svg("path", { class: "edge", d: d, "marker-end": "url(#tsb-arrow)",
        "data-edge": e.source + "->" + e.target }));
    }
    root.setAttribute("viewBox", "0 0 " + width + " " + height);
    root.setAttribute("data-width", width);
    root.setAttribute("data-rankdir", rankdir);
    /* the box as high as the graph at its starting zoom (no empty band): within the window when
       left to right; top to bottom the whole graph, and the page scrolls (never sideways) */
    const most = rankdir === "LR" ? 1.5 : 1.0;
    const zoom = Math.min(most, Math.max(MIN_READABLE_ZOOM, host.clientWidth / width));
    const tall = rankdir === "LR" ? Math.min(window.innerHeight - 160, height * zoom + 56) : height * zoom + 56;
    host.style.height = Math.round(Math.max(320, tall)) + "px";
    panZoom(root, most);
  }

  function panZoom(root, most) {
    /* zoom and pan with the vendored svg-pan-zoom; start with the whole graph in view when its
       labels stay >= 12 px on screen, else at the smallest such zoom from the left (the root
       tables): drag to pan, wheel or +/- to zoom, the reset button shows the whole graph */
    if (!window.svgPanZoom) return;
    const pz = window.svgPanZoom(root, { controlIconsEnabled: true, zoomScaleSensitivity: 0.25, minZoom: 0.1,
      maxZoom: 10, fit: true, center: true, dblClickZoomEnabled: false });
    const real = pz.getSizes().realZoom;
    if (real < MIN_READABLE_ZOOM) {
      pz.zoom(pz.getZoom() * MIN_READABLE_ZOOM / real);
      pz.pan({ x: 8, y: pz.getPan().y });
    } else if (real > most) {
      pz.zoom(pz.getZoom() * most / real);
      pz.center();
    }
    root.setAttribute("data-zoom", pz.getSizes().realZoom.toFixed(3));
    window.tsbPanZoom = pz;
  }

  /* the line that names the exception of an error text: a Python traceback ends with it
     ("RuntimeError: ..."), a JVM one starts with it; null when the text is that line already */
  function exceptionLine(text) {
    const lines = String(text || "").split("\n").map((l) => l.trim()).filter(Boolean);
    if (lines.length < 2) return null;
    const named = /^([A-Za-z_][\w.$]*(Error|Exception|Exit|Interrupt)|\[[A-Z_.]+\])[:\s]/;
    if (/^Traceback \(most recent call last\)/.test(lines[0])) {
      for (let i = lines.length - 1; i > 0; i--) if (named.test(lines[i])) return lines[i];
      return lines[lines.length - 1];
    }
    return null; /* the first line is the exception already */
  }

  function renderFailures(topo) {
    /* the failed jobs' error text (metastore job record) and a link to their Airflow task log */
    const box = $("tsb-job-failures");
    box.textContent = "";
    const failed = Object.entries(topo.jobs).filter(([, j]) => j.status === "failed").sort();
    box.hidden = !failed.length;
    if (!failed.length) return;
    box.appendChild(el("h2", {}, failed.length === 1 ? "Failed job" : `Failed jobs (${failed.length})`));
    for (const [name, j] of failed) {
      const item = el("div", { class: "tsb-failure", "data-job": name });
      const at = j.current_barrier === null || j.current_barrier === undefined ? "" : ` at barrier #${j.current_barrier}`;
      item.appendChild(el("strong", {}, `${name} failed${at}`));
      item.appendChild(document.createTextNode(` (last heartbeat ${fmtTime(j.last_heartbeat_ms)}) `));
      if (j.log_url) {
        item.appendChild(el("a", { class: "tsb-log-link", href: j.log_url, target: "_top" }, "Task log in Airflow ↗"));
      } else {
        item.appendChild(el("span", { class: "tsb-muted tsb-no-log" }, "no Airflow task instance found for this job"));
      }
      const headline = exceptionLine(j.message);
      if (headline) item.appendChild(el("p", { class: "tsb-error-line" }, headline));
      item.appendChild(el("pre", { class: "tsb-error-text" }, j.message || "(the job recorded no error text)"));
      box.appendChild(item);
    }
  }

  function renderFreshness(data) {
    const host = $("tsb-freshness");
    host.textContent = "";
    const names = Object.keys(data.tables).sort();
    const t = el("table", { class: "tsb", id: "tsb-freshness-table", "data-missed": data.missed.join(",") });
    const head = el("tr");
    for (const h of ["table", "behind", "target", "target met?", "newest WRITTEN barrier", "bottleneck job"]) {
      head.appendChild(el("th", {}, h));
    }
    t.appendChild(head);
    for (const name of names) {
      const f = data.tables[name];
      const tr = el("tr", { "data-table": name, "data-missed": f.missed ? "true" : "false",
        "data-lag-s": f.lag_s, "data-target-s": f.target_s === null ? "" : f.target_s, "data-bottleneck": f.bottleneck || "" });
      tr.appendChild(el("td", { class: "l" }, name));
      /* the lineage graph's wording, without its "behind: " */
      const barriersBehind = f.committed_barrier === null || data.newest_barrier === null ? null
        : Math.max(0, data.newest_barrier - f.committed_barrier);
      tr.appendChild(el("td", {}, behindText({ lag: barriersBehind, freshness_lag_s: f.lag_s }).replace(/^behind: /, "")));
      tr.appendChild(el("td", {}, f.target_s === null ? "–" : fmtMs(Math.round(f.target_s * 1000))));
      const st = el("td", { class: "l" }, f.missed ? "MISSED" : (f.target_s === null ? "no target" : "met"));
      if (f.missed) st.classList.add("bottleneck");
      tr.appendChild(st);
      tr.appendChild(el("td", {}, f.committed_barrier === null ? "none" : "#" + f.committed_barrier));
      tr.appendChild(el("td", { class: "l" }, f.bottleneck || "–"));
      t.appendChild(tr);
    }
    const summary = (data.missed.length ? `${data.missed.length} table(s) miss their freshness target: ${data.missed.join(", ")}`
      : "No table misses its freshness target") +
      (data.newest_barrier === null ? "" : ` · newest barrier #${data.newest_barrier}, generated ` +
        `${fmtMs(Math.round(data.newest_barrier_age_s * 1000))} ago`);
    host.appendChild(el("p", { class: "tsb-summary", id: "tsb-freshness-summary" }, summary));
    host.appendChild(t);
    if (!names.length) host.appendChild(el("p", { class: "tsb-muted" }, "The topology has no sink table."));
    renderJobFreshness(data);
  }

  function renderJobFreshness(data) {
    const host = $("tsb-freshness-jobs");
    host.textContent = "";
    const t = el("table", { class: "tsb", id: "tsb-freshness-jobs-table" });
    const head = el("tr");
    for (const h of ["job", "status", "own lag", "newest WRITTEN barrier", "inputs ready up to"]) head.appendChild(el("th", {}, h));
    t.appendChild(head);
    for (const name of Object.keys(data.jobs).sort()) {
      const j = data.jobs[name];
      const tr = el("tr", { "data-job": name, "data-lag-s": j.lag_s });
      tr.appendChild(el("td", { class: "l" }, name));
      tr.appendChild(el("td", { class: "l" }, j.status));
      tr.appendChild(el("td", {}, j.lag_s ? fmtMs(Math.round(j.lag_s * 1000)) : "up to date"));
      tr.appendChild(el("td", {}, j.written_barrier === null ? "none" : "#" + j.written_barrier));
      tr.appendChild(el("td", {}, j.ready_barrier === null ? "none" : "#" + j.ready_barrier));
      t.appendChild(tr);
    }
    host.appendChild(t);
  }

  async function loadFreshness() {
    if (!CFG.topology) { $("tsb-freshness").textContent = "Choose a topology above."; return; }
    try {
      renderFreshness(await api("/freshness" + qs({ topology: CFG.topology })));
    } catch (err) {
      showError(String(err.message || err));
      $("tsb-freshness").textContent = "";
    }
  }

  async function selectTable(name, g) {
    document.querySelectorAll("svg .node.selected").forEach((n) => n.classList.remove("selected"));
    if (g) g.classList.add("selected");
    const box = $("tsb-table-detail");
    box.hidden = false;
    box.textContent = "";
    box.setAttribute("data-table", name);
    box.appendChild(el("h2", { id: "tsb-detail-title" }, "Table " + name));
    const parts = name.split(".").map(encodeURIComponent).join("/");
    let data;
    try {
      data = await api(`/tables/${parts}/barriers?limit=50`);
    } catch (err) {
      box.appendChild(el("p", { class: "tsb-error" }, String(err.message || err)));
      return;
    }
    const cols = el("div", { class: "tsb-cols" });
    const left = el("div", { class: "tsb-wide" });
    left.appendChild(el("h3", {}, "Barrier history (newest 50)"));
    const t = el("table", { class: "tsb", id: "tsb-history" });
    const head = el("tr");
    for (const h of ["barrier", "Delta version", "state", "job", "PROCESSED at", "WRITTEN at"]) head.appendChild(el("th", {}, h));
    t.appendChild(head);
    for (const it of data.items) {
      const tr = el("tr", { "data-barrier": it.barrier, "data-state": it.state });
      tr.appendChild(el("td", {}, "#" + it.barrier));
      tr.appendChild(el("td", {}, it.version === null ? "–" : it.version));
      tr.appendChild(el("td", { class: "l state-" + it.state }, it.state));
      tr.appendChild(el("td", { class: "l" }, it.job_id || "–"));
      tr.appendChild(el("td", {}, fmtTime(it.processed_at_ms)));
      tr.appendChild(el("td", {}, fmtTime(it.written_at_ms)));
      t.appendChild(tr);
    }
    if (!data.items.length) t.appendChild(el("tr", {}, "")).appendChild(el("td", { colspan: 6, class: "l" }, "no barrier yet"));
    left.appendChild(t);
    const right = el("div", { class: "tsb-wide" });
    right.appendChild(el("h3", {}, "Consistent version per level (this table alone)"));
    const c = el("table", { class: "tsb", id: "tsb-consistent" });
    const ch = el("tr");
    for (const h of ["level", "barrier", "Delta version", "state"]) ch.appendChild(el("th", {}, h));
    c.appendChild(ch);
    for (const [level, v] of Object.entries(data.consistent || {})) {
      const tr = el("tr", { "data-level": level });
      tr.appendChild(el("td", { class: "l" }, level));
      if (v.error) {
        tr.appendChild(el("td", { class: "l pending explain", colspan: 3 }, v.error));
      } else {
        tr.appendChild(el("td", {}, v.barrier === null ? "–" : "#" + v.barrier));
        tr.appendChild(el("td", {}, v.version === null ? "–" : v.version));
        tr.appendChild(el("td", { class: "l state-" + (v.state || "") }, v.state || "–"));
      }
      c.appendChild(tr);
    }
    right.appendChild(c);
    cols.appendChild(left);
    cols.appendChild(right);
    box.appendChild(cols);
  }

  async function loadLineage() {
    if (!CFG.topology) { $("tsb-lineage").textContent = "Choose a topology above."; return; }
    let topo;
    try {
      topo = await api("/topology" + qs({ name: CFG.topology }));
    } catch (err) {
      showError(String(err.message || err));
      $("tsb-lineage").textContent = "";
      return;
    }
    showError(CFG.error && !topo ? CFG.error : "");
    const nt = Object.keys(topo.tables).length, nj = Object.keys(topo.jobs).length;
    const stale = Object.values(topo.jobs).filter((j) => j.stale).length;
    $("tsb-summary").textContent = `${nt} tables, ${nj} jobs · newest barrier ` +
      (topo.newest_barrier === null ? "none" : `#${topo.newest_barrier} (ts ${fmtTime(topo.newest_barrier_ts_ms)})`) +
      (stale ? ` · ${stale} stale job(s)` : "");
    renderFailures(topo);
    drawGraph(topo);
    const sel = $("tsb-table-detail").getAttribute("data-table") || CFG.table;
    if (sel) selectTable(sel, document.querySelector(`[data-node="table:${CSS.escape(sel)}"]`));
  }

  /* ---------------------------------------------------------------- delays */
  function lineChart(host, barriers, series, opts) {
    /* series: [{key, label, color, values: [ms|null per barrier], marks: [bool per barrier]}] */
    host.textContent = "";
    /* as wide as its container (no horizontal overflow); the legend is HTML below it and wraps */
    const W = Math.max(480, Math.floor(host.clientWidth || 960) - 2), H = 300, L = 76, R = 16, T = 18, B = 42;
    const pw = W - L - R, ph = H - T - B;
    let top = 1;
    for (const s of series) for (const v of s.values) if (v !== null && v > top) top = v;
    const tick = niceStep(top / 4), max = Math.ceil(top / tick) * tick; /* round ticks: 0, 20 s, 40 s, 1 min */
    const n = barriers.length;
    const band = pw / Math.max(1, n);
    const xOf = (i) => L + band * i + band / 2;
    const yOf = (v) => T + ph - (v / max) * ph;
    const root = svg("svg", { id: opts.id, width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img" });
    for (let v = 0; v <= max + tick / 2; v += tick) {
      const y = yOf(v);
      root.appendChild(svg("line", { class: "grid", x1: L, x2: L + pw, y1: y, y2: y }));
      root.appendChild(svg("text", { x: L - 6, y: y + 4, "text-anchor": "end", class: "sub tick", "data-ms": v },
        fmtTick(v)));
    }
    root.appendChild(svg("line", { class: "axis", x1: L, x2: L + pw, y1: T + ph, y2: T + ph }));
    const step = Math.max(1, Math.ceil(n / 20));
    barriers.forEach((b, i) => {
      if (i % step === 0 || i === n - 1) root.appendChild(svg("text", { x: xOf(i), y: T + ph + 16, "text-anchor": "middle", class: "sub" }, "#" + b.barrier));
    });
    root.appendChild(svg("text", { x: L + pw / 2, y: H - 4, "text-anchor": "middle", class: "sub" }, "barrier"));
    if (opts.bars) {
      const nb = series.length, bw = Math.max(2, (band * 0.8) / Math.max(1, nb));
      series.forEach((s, si) => {
        s.values.forEach((v, i) => {
          if (v === null) return;
          const x = L + band * i + band * 0.1 + si * bw, y = yOf(v);
          const r = svg("rect", { class: "bar" + (s.marks[i] ? " bottleneck" : ""), x: x, y: y, width: bw,
            height: T + ph - y, fill: s.color, "data-series": s.key, "data-barrier": barriers[i].barrier, "data-ms": v });
          r.appendChild(svg("title", {}, `${s.label} @ #${barriers[i].barrier}: ${fmtMs(v)}${s.marks[i] ? " (bottleneck)" : ""}`));
          root.appendChild(r);
          if (s.marks[i]) root.appendChild(svg("text", { x: x + bw / 2, y: y - 3, "text-anchor": "middle", class: "warn" }, "★"));
        });
      });
    } else {
      for (const s of series) {
        let d = "";
        s.values.forEach((v, i) => { if (v !== null) d += (d && s.values[i - 1] !== null ? " L " : " M ") + xOf(i) + " " + yOf(v); });
        if (d) root.appendChild(svg("path", { d: d, fill: "none", stroke: s.color, "stroke-width": 2, "data-series": s.key }));
        s.values.forEach((v, i) => {
          if (v === null) return;
          const c = svg("circle", { cx: xOf(i), cy: yOf(v), r: 3.5, fill: s.color, "data-series": s.key,
            "data-barrier": barriers[i].barrier, "data-ms": v });
          c.appendChild(svg("title", {}, `${s.label} @ #${barriers[i].barrier}: ${fmtMs(v)}`));
          root.appendChild(c);
        });
      }
    }
    host.appendChild(root);
    const legend = el("div", { class: "tsb-legend tsb-chart-legend" });
    for (const s of series) {
      const item = el("span", { class: "tsb-legend-item", "data-legend": s.key });
      item.appendChild(el("span", { class: "tsb-swatch", style: "background:" + s.color }));
      item.appendChild(document.createTextNode(s.label));
      legend.appendChild(item);
    }
    host.appendChild(legend);
  }

  function renderDelays(data) {
    const barriers = data.barriers.slice().reverse(); /* oldest -> newest, left -> right */
    const tables = [...new Set(barriers.flatMap((b) => Object.keys(b.tables)))].sort();
    const jobs = [...new Set(barriers.flatMap((b) => Object.keys(b.jobs)))].sort();
    if (!barriers.length) {
      $("tsb-chart-tables").textContent = "No barrier yet.";
      $("tsb-chart-jobs").textContent = "";
      $("tsb-summary").textContent = "";
      return;
    }
    const complete = barriers.filter((b) => b.complete);
    const e2e = complete.map((b) => b.end_to_end_ms);
    const avg = (xs) => (xs.length ? Math.round(xs.reduce((a, b) => a + b, 0) / xs.length) : null);
    $("tsb-summary").textContent = `${barriers.length} barriers (#${barriers[0].barrier}–#${barriers[barriers.length - 1].barrier}), ` +
      `${complete.length} complete · end-to-end avg ${fmtMs(avg(e2e))}, max ${fmtMs(e2e.length ? Math.max(...e2e) : null)}`;
    lineChart($("tsb-chart-tables"), barriers, tables.map((t, i) => ({
      key: t, label: t, color: PALETTE[i % PALETTE.length],
      values: barriers.map((b) => (b.tables[t] ? b.tables[t].delay_ms : null)), marks: barriers.map(() => false),
    })), { id: "tsb-chart-tables-svg" });
    lineChart($("tsb-chart-jobs"), barriers, jobs.map((j, i) => ({
      key: j, label: j, color: ["#5f3dc4", "#1098ad", "#e8590c", "#2b8a3e"][i % 4],
      values: barriers.map((b) => (b.jobs[j] ? b.jobs[j].delay_ms : null)), marks: barriers.map((b) => b.bottleneck === j),
    })), { id: "tsb-chart-jobs-svg", bars: true });

    const sum = el("table", { class: "tsb", id: "tsb-job-summary-table" });
    const sh = el("tr");
    for (const h of ["job", "barriers timed", "avg delay", "max delay", "bottleneck of"]) sh.appendChild(el("th", {}, h));
    sum.appendChild(sh);
    for (const j of jobs) {
      const vals = barriers.map((b) => b.jobs[j] && b.jobs[j].delay_ms).filter((v) => v !== null && v !== undefined);
      const bn = barriers.filter((b) => b.bottleneck === j).length;
      const tr = el("tr", { "data-job": j });
      tr.appendChild(el("td", { class: "l" }, j));
      tr.appendChild(el("td", {}, vals.length));
      tr.appendChild(el("td", { "data-job": j, "data-stat": "avg" }, fmtMs(avg(vals))));
      tr.appendChild(el("td", { "data-job": j, "data-stat": "max" }, fmtMs(vals.length ? Math.max(...vals) : null)));
      tr.appendChild(el("td", {}, `${bn} barrier${bn === 1 ? "" : "s"}`));
      sum.appendChild(tr);
    }
    const sh2 = $("tsb-job-summary");
    sh2.textContent = "";
    sh2.appendChild(sum);

    const t = el("table", { class: "tsb", id: "tsb-delay-table" });
    const h1 = el("tr"), h2 = el("tr");
    h1.appendChild(el("th", { rowspan: 2 }, "barrier"));
    h1.appendChild(el("th", { rowspan: 2 }, "generated at"));
    h1.appendChild(el("th", { rowspan: 2 }, "end-to-end"));
    h1.appendChild(el("th", { colspan: tables.length }, "generation → WRITTEN per table"));
    h1.appendChild(el("th", { colspan: jobs.length }, "processing delay per job"));
    h1.appendChild(el("th", { rowspan: 2 }, "bottleneck"));
    for (const tb of tables) h2.appendChild(el("th", { "data-table": tb }, breakable(tb)));
    for (const j of jobs) h2.appendChild(el("th", { "data-job": j }, breakable(j)));
    t.appendChild(h1);
    t.appendChild(h2);
    for (const b of data.barriers) { /* newest first */
      const tr = el("tr", { "data-barrier": b.barrier, "data-complete": b.complete ? "true" : "false" });
      tr.appendChild(el("td", {}, "#" + b.barrier));
      tr.appendChild(el("td", {}, fmtTime(b.created_at_ms)));
      tr.appendChild(el("td", { "data-e2e": b.end_to_end_ms === null ? "" : b.end_to_end_ms }, b.complete ? fmtMs(b.end_to_end_ms) : "pending"));
      for (const tb of tables) {
        const d = b.tables[tb];
        const td = el("td", { "data-table": tb, "data-ms": d && d.delay_ms !== null ? d.delay_ms : "" },
          d && d.delay_ms !== null ? fmtMs(d.delay_ms) : (d ? d.state : "–"));
        if (!d || d.delay_ms === null) td.classList.add("pending");
        tr.appendChild(td);
      }
      for (const j of jobs) {
        const d = b.jobs[j];
        const has = d && d.delay_ms !== null && d.delay_ms !== undefined;
        const td = el("td", { "data-job": j, "data-barrier": b.barrier, "data-ms": has ? d.delay_ms : "" }, has ? fmtMs(d.delay_ms) : "–");
        if (b.bottleneck === j) { td.classList.add("bottleneck"); td.setAttribute("data-bottleneck", "true"); td.textContent += " ★"; }
        if (!has) td.classList.add("pending");
        tr.appendChild(td);
      }
      tr.appendChild(el("td", { class: "l", "data-bottleneck-job": b.bottleneck || "" }, b.bottleneck || "–"));
      t.appendChild(tr);
    }
    const wrap = $("tsb-delay-table-wrap");
    wrap.textContent = "";
    wrap.appendChild(t);
    const before = new URLSearchParams(location.search).get("before");
    const nav = el("p", { class: "tsb-muted", id: "tsb-paging" },
      before ? `Barriers before #${before}, ${CFG.limit || 50} per page. ` : `The newest ${CFG.limit || 50} barriers. `);
    const page = (b) => qs({ topology: CFG.topology, limit: CFG.limit || 50, before: b });
    if (before) nav.appendChild(el("a", { id: "tsb-newest", href: page(null) }, "Newest barriers"));
    if (before && data.next_before) nav.appendChild(document.createTextNode(" · "));
    if (data.next_before) nav.appendChild(el("a", { id: "tsb-older", href: page(data.next_before) }, "Older barriers →"));
    wrap.appendChild(nav);
  }

  async function loadDelays() {
    if (!CFG.topology) { $("tsb-chart-tables").textContent = "Choose a topology above."; return; }
    try {
      const before = new URLSearchParams(location.search).get("before");
      renderDelays(await api("/delays" + qs({ topology: CFG.topology, limit: CFG.limit || 50, before })));
    } catch (err) {
      showError(String(err.message || err));
      $("tsb-chart-tables").textContent = "";
    }
  }

  function load() {
    if (CFG.page === "delays") return loadDelays();
    return CFG.page === "freshness" ? loadFreshness() : loadLineage();
  }
  setupChrome();
  load().finally(() => document.body.setAttribute("data-loaded", "true"));
})();
