/* TSB UI: lineage graph and delay views. Vanilla JS + inline SVG, no build step.
   Data comes from the authenticated MetaService API (cookie `_token`), bounded by limit. */
(function () {
  "use strict";
  const CFG = JSON.parse(document.getElementById("tsb-config").textContent);
  const SVGNS = "http://www.w3.org/2000/svg";
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
    const other = $("tsb-link-delays") || $("tsb-link-lineage");
    if (other && CFG.topology) other.href = other.getAttribute("href") + qs({ topology: CFG.topology });
    $("tsb-refresh").addEventListener("click", () => load());
    if (CFG.error) showError(CFG.error);
  }

  /* ---------------------------------------------------------------- lineage */
  function layers(nodes, edges) {
    const preds = {}, level = {};
    for (const n of nodes) preds[n.id] = [];
    for (const e of edges) if (preds[e.target]) preds[e.target].push(e.source);
    const visiting = {};
    function depth(id) {
      if (level[id] !== undefined) return level[id];
      if (visiting[id]) return 0; /* defensive: the topology is acyclic */
      visiting[id] = true;
      let d = 0;
      for (const p of preds[id] || []) if (preds[p] !== undefined) d = Math.max(d, depth(p) + 1);
      level[id] = d;
      return d;
    }
    for (const n of nodes) depth(n.id);
    return level;
  }

  function drawGraph(topo) {
    const host = $("tsb-lineage");
    host.textContent = "";
    const TW = 236, TH = 108, JW = 190, JH = 62, COL = 262, ROW = 122, PAD = 24;
    const level = layers(topo.nodes, topo.edges);
    const cols = {};
    for (const n of topo.nodes) (cols[level[n.id]] = cols[level[n.id]] || []).push(n);
    const pos = {};
    let maxRows = 0;
    const ncols = Object.keys(cols).length;
    for (const [c, list] of Object.entries(cols)) {
      list.sort((a, b) => a.name.localeCompare(b.name));
      maxRows = Math.max(maxRows, list.length);
    }
    const height = Math.max(1, maxRows) * ROW + PAD * 2;
    for (const [c, list] of Object.entries(cols)) {
      const offset = (height - list.length * ROW) / 2;
      list.forEach((n, i) => {
        const w = n.kind === "table" ? TW : JW, h = n.kind === "table" ? TH : JH;
        const cx = PAD + Number(c) * COL + TW / 2;
        const cy = offset + i * ROW + ROW / 2;
        pos[n.id] = { x: cx - w / 2, y: cy - h / 2, w: w, h: h, cx: cx, cy: cy };
      });
    }
    const width = PAD * 2 + Math.max(0, ncols - 1) * COL + TW;
    const root = svg("svg", { id: "tsb-graph-svg", width: width, height: height, viewBox: "0 0 " + width + " " + height,
      role: "img", "aria-label": "topology " + topo.name, "data-topology": topo.name });
    const defs = svg("defs");
    const marker = svg("marker", { id: "tsb-arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 8,
      markerHeight: 8, orient: "auto-start-reverse" });
    marker.appendChild(svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#9aa5b1" }));
    defs.appendChild(marker);
    root.appendChild(defs);
    for (const e of topo.edges) {
      const a = pos[e.source], b = pos[e.target];
      if (!a || !b) continue;
      const x1 = a.x + a.w, y1 = a.cy, x2 = b.x, y2 = b.cy, mx = (x1 + x2) / 2;
      root.appendChild(svg("path", { class: "edge", d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`,
        "marker-end": "url(#tsb-arrow)", "data-edge": e.source + "->" + e.target }));
    }
    for (const n of topo.nodes) {
      const p = pos[n.id];
      const g = svg("g", { class: "node", "data-node": n.id, "data-kind": n.kind, "data-name": n.name,
        transform: `translate(${p.x},${p.y})` });
      g.appendChild(svg("rect", { width: p.w, height: p.h, rx: n.kind === "job" ? 14 : 4 }));
      if (n.kind === "table") {
        const t = topo.tables[n.name] || {};
        g.classList.add(t.role || n.role || "unknown");
        if (t.lag) g.classList.add("lagging");
        g.setAttribute("data-role", t.role || n.role || "");
        g.setAttribute("data-barrier", t.written_barrier === null || t.written_barrier === undefined ? "" : t.written_barrier);
        g.setAttribute("data-version", t.version === null || t.version === undefined ? "" : t.version);
        g.setAttribute("data-lag", t.lag === null || t.lag === undefined ? "" : t.lag);
        g.appendChild(svg("text", { x: 10, y: 19, class: "title" }, n.name));
        const wb = t.written_barrier === null || t.written_barrier === undefined ? "none" : "#" + t.written_barrier;
        const ver = t.version === null || t.version === undefined ? "–" : "v" + t.version;
        g.appendChild(svg("text", { x: 10, y: 39, class: "sub" }, `${t.role || n.role} · WRITTEN ${wb} · Delta ${ver}`));
        const lagText = t.lag === null || t.lag === undefined ? "never written" : (t.lag === 0 ? "up to date" :
          `${t.lag} barrier${t.lag === 1 ? "" : "s"} behind #${topo.newest_barrier}`);
        g.appendChild(svg("text", { x: 10, y: 58, class: "sub lag" + (t.lag ? " warn" : "") }, "lag: " + lagText));
        const fresh = freshnessText(t);
        if (t.freshness_missed) g.classList.add("missed");
        g.setAttribute("data-freshness-target", t.freshness_target_s === null || t.freshness_target_s === undefined ? "" : t.freshness_target_s);
        g.setAttribute("data-freshness-lag", t.freshness_lag_s === null || t.freshness_lag_s === undefined ? "" : t.freshness_lag_s);
        g.setAttribute("data-missed", t.freshness_missed ? "true" : "false");
        g.setAttribute("data-bottleneck", t.bottleneck || "");
        if (fresh) g.appendChild(svg("text", { x: 10, y: 77, class: "sub freshness" + (t.freshness_missed ? " warn" : "") }, fresh));
        if (t.bottleneck) g.appendChild(svg("text", { x: 10, y: 96, class: "sub bottleneck" + (t.freshness_missed ? " warn" : "") },
          "bottleneck: " + t.bottleneck));
        g.appendChild(svg("title", {}, `${n.name}\nnewest WRITTEN barrier ${wb}, Delta ${ver}\nlag: ${lagText}` +
          (fresh ? "\n" + fresh : "") + (t.bottleneck ? "\nbottleneck job: " + t.bottleneck : "")));
        g.addEventListener("click", () => selectTable(n.name, g));
      } else {
        const j = topo.jobs[n.name] || {};
        g.classList.add("job", "state-" + (j.status || "unknown"));
        if (j.stale) g.classList.add("stale");
        g.setAttribute("data-state", j.stale ? "stale" : (j.status || "unknown"));
        g.setAttribute("data-status", j.status || "");
        g.setAttribute("data-stale", j.stale ? "true" : "false");
        g.appendChild(svg("text", { x: 12, y: 21, class: "title" }, "⚙ " + n.name));
        const cur = j.current_barrier === null || j.current_barrier === undefined ? "" : ` · barrier #${j.current_barrier}`;
        g.appendChild(svg("text", { x: 12, y: 40, class: "sub state" }, (j.status || "unknown") + cur));
        if (j.stale) g.appendChild(svg("text", { x: 12, y: 55, class: "warn" }, "STALE: no heartbeat"));
        g.appendChild(svg("title", {}, `job ${n.name}\nstatus ${j.status}${j.stale ? " (stale)" : ""}\n` +
          `last heartbeat ${fmtTime(j.last_heartbeat_ms)}`));
      }
      root.appendChild(g);
    }
    host.appendChild(root);
  }

  function freshnessText(t) {
    /* "MISSED: 12.3 s > 5.0 s target" / "fresh: 0 ms ≤ 30.0 s" / "" without a target nor lag */
    const target = t.freshness_target_s, lag = t.freshness_lag_s;
    if ((target === null || target === undefined) && !lag) return "";
    const lagMs = Math.round((lag || 0) * 1000);
    if (target === null || target === undefined) return `freshness: ${fmtMs(lagMs)} behind (no target)`;
    return t.freshness_missed ? `MISSED: ${fmtMs(lagMs)} > ${fmtMs(Math.round(target * 1000))} target`
      : `fresh: ${fmtMs(lagMs)} ≤ ${fmtMs(Math.round(target * 1000))}`;
  }

  function renderFreshness(data) {
    const host = $("tsb-freshness");
    if (!host) return;
    host.textContent = "";
    const names = Object.keys(data.tables).sort();
    const t = el("table", { class: "tsb", id: "tsb-freshness-table", "data-missed": data.missed.join(",") });
    const head = el("tr");
    for (const h of ["table", "target", "lag", "status", "committed barrier", "bottleneck job"]) head.appendChild(el("th", {}, h));
    t.appendChild(head);
    for (const name of names) {
      const f = data.tables[name];
      const tr = el("tr", { "data-table": name, "data-missed": f.missed ? "true" : "false",
        "data-lag-s": f.lag_s, "data-target-s": f.target_s === null ? "" : f.target_s, "data-bottleneck": f.bottleneck || "" });
      tr.appendChild(el("td", { class: "l" }, name));
      tr.appendChild(el("td", {}, f.target_s === null ? "–" : fmtMs(Math.round(f.target_s * 1000))));
      tr.appendChild(el("td", {}, fmtMs(Math.round(f.lag_s * 1000))));
      const st = el("td", { class: "l" }, f.missed ? "MISSED" : (f.target_s === null ? "no target" : "ok"));
      if (f.missed) st.classList.add("bottleneck");
      tr.appendChild(st);
      tr.appendChild(el("td", {}, f.committed_barrier === null ? "none" : "#" + f.committed_barrier));
      tr.appendChild(el("td", { class: "l" }, f.bottleneck || "–"));
      t.appendChild(tr);
    }
    host.appendChild(el("p", { class: "tsb-summary", id: "tsb-freshness-summary" },
      (data.missed.length ? `${data.missed.length} table(s) miss their freshness target: ${data.missed.join(", ")}`
        : "No table misses its freshness target") +
      (data.newest_barrier === null ? "" : ` · newest barrier #${data.newest_barrier}, generated ` +
        `${fmtMs(Math.round(data.newest_barrier_age_s * 1000))} ago`)));
    host.appendChild(t);
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
    const left = el("div");
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
    const right = el("div");
    right.appendChild(el("h3", {}, "Consistent version per level (this table alone)"));
    const c = el("table", { class: "tsb", id: "tsb-consistent" });
    const ch = el("tr");
    for (const h of ["level", "barrier", "Delta version", "state"]) ch.appendChild(el("th", {}, h));
    c.appendChild(ch);
    for (const [level, v] of Object.entries(data.consistent || {})) {
      const tr = el("tr", { "data-level": level });
      tr.appendChild(el("td", { class: "l" }, level));
      if (v.error) {
        tr.appendChild(el("td", { class: "l pending", colspan: 3 }, v.error));
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
    drawGraph(topo);
    const sel = $("tsb-table-detail").getAttribute("data-table") || CFG.table;
    if (sel) selectTable(sel, document.querySelector(`[data-node="table:${CSS.escape(sel)}"]`));
  }

  /* ---------------------------------------------------------------- delays */
  function lineChart(host, barriers, series, opts) {
    /* series: [{key, label, color, values: [ms|null per barrier], marks: [bool per barrier]}] */
    host.textContent = "";
    const W = Math.max(760, Math.min(1300, 80 + barriers.length * 28)), H = 300, L = 70, R = 210, T = 16, B = 40;
    const pw = W - L - R, ph = H - T - B;
    let max = 1;
    for (const s of series) for (const v of s.values) if (v !== null && v > max) max = v;
    const n = barriers.length;
    const band = pw / Math.max(1, n);
    const xOf = (i) => L + band * i + band / 2;
    const yOf = (v) => T + ph - (v / max) * ph;
    const root = svg("svg", { id: opts.id, width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img" });
    for (let k = 0; k <= 4; k++) {
      const v = (max * k) / 4, y = yOf(v);
      root.appendChild(svg("line", { class: "grid", x1: L, x2: L + pw, y1: y, y2: y }));
      root.appendChild(svg("text", { x: L - 6, y: y + 4, "text-anchor": "end", class: "sub" }, fmtMs(Math.round(v))));
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
    series.forEach((s, si) => {
      const y = T + 10 + si * 20;
      root.appendChild(svg("rect", { x: L + pw + 16, y: y - 9, width: 14, height: 10, fill: s.color }));
      root.appendChild(svg("text", { x: L + pw + 36, y: y, "data-legend": s.key }, s.label));
    });
    host.appendChild(root);
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
    for (const tb of tables) h2.appendChild(el("th", { "data-table": tb }, tb));
    for (const j of jobs) h2.appendChild(el("th", { "data-job": j }, j));
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
      const [delays, freshness] = await Promise.all([
        api("/delays" + qs({ topology: CFG.topology, limit: CFG.limit || 50, before })),
        api("/freshness" + qs({ topology: CFG.topology })),
      ]);
      renderFreshness(freshness);
      renderDelays(delays);
    } catch (err) {
      showError(String(err.message || err));
      $("tsb-chart-tables").textContent = "";
    }
  }

  function load() { return CFG.page === "delays" ? loadDelays() : loadLineage(); }
  setupChrome();
  load().finally(() => document.body.setAttribute("data-loaded", "true"));
})();
