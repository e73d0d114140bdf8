// The Isthmus clusterset view. Plain DOM and SVG, no framework, no build step.
// Data: one server-sent-events stream (api/events): a snapshot, then deltas. Nothing is polled;
// a one-second timer only re-ages heartbeats on screen. Object names are user data: always set as
// text, never as HTML.
"use strict";

const SECTIONS = ["clusters", "services", "mcs", "pools", "egress"];
const state = {
  view: { clusters: {}, services: {}, mcs: {}, pools: {}, egress: {} },
  clockOffset: 0, // server time - browser time, ms
  tab: "overview",
  filter: { namespace: "", cluster: "", q: "" },
  selected: null,
  live: false,
};

// --- tiny DOM helpers --------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function svg(tag, attrs, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const now = () => Date.now() + state.clockOffset;

function age(ts) {
  if (!ts) return "never";
  const s = Math.max(0, Math.floor((now() - Date.parse(ts)) / 1000));
  if (s >= 86400) return `${Math.floor(s / 86400)}d`;
  if (s >= 3600) return `${Math.floor(s / 3600)}h`;
  if (s >= 60) return `${Math.floor(s / 60)}m`;
  return `${s}s`;
}

// --- health (the same rule as isthmus.ui.model.cluster_health) ----------------------------------

function health(c) {
  if (c.error) return "unreachable";
  if (!c.synced) return "unknown";
  if (c.problems && c.problems.length) return "unhealthy";
  if (c.role !== "broker" && c.brokerWatched) {
    if (!c.heartbeat) return "unhealthy";
    if ((now() - Date.parse(c.heartbeat)) / 1000 > (c.staleAfter || 30)) return "unhealthy";
  }
  return "healthy";
}

function healthReasons(c) {
  const out = [];
  if (c.error) out.push(c.error);
  out.push(...(c.problems || []));
  if (c.role !== "broker" && c.brokerWatched && !c.error) {
    if (!c.heartbeat) out.push("no heartbeat from its agent on the broker");
    else if ((now() - Date.parse(c.heartbeat)) / 1000 > (c.staleAfter || 30))
      out.push(`last heartbeat ${age(c.heartbeat)} ago (stale after ${c.staleAfter}s)`);
  }
  return out;
}

// --- filters -----------------------------------------------------------------------------------

function matches(item, clusters) {
  const f = state.filter;
  if (f.namespace && item.namespace && item.namespace !== f.namespace) return false;
  if (f.namespace && !item.namespace && item.kind !== undefined) return false;
  if (f.cluster && !clusters.includes(f.cluster)) return false;
  if (f.q) {
    const text = JSON.stringify(item).toLowerCase();
    if (!text.includes(f.q.toLowerCase())) return false;
  }
  return true;
}

function filtered(section, clustersOf) {
  return Object.entries(state.view[section] || {})
    .filter(([, item]) => matches(item, clustersOf(item)))
    .sort(([a], [b]) => a.localeCompare(b));
}

function refreshFilterChoices() {
  const nsSel = document.getElementById("filter-namespace");
  const clSel = document.getElementById("filter-cluster");
  const namespaces = new Set();
  for (const s of ["services", "mcs", "egress"])
    for (const item of Object.values(state.view[s] || {})) if (item.namespace) namespaces.add(item.namespace);
  fillSelect(nsSel, "all namespaces", [...namespaces].sort(), state.filter.namespace);
  fillSelect(clSel, "all clusters", Object.keys(state.view.clusters).sort(), state.filter.cluster);
}

function fillSelect(sel, allLabel, values, current) {
  const want = ["", ...values].join("\n");
  if (sel.dataset.values === want) return;
  sel.dataset.values = want;
  sel.replaceChildren(h("option", { value: "" }, allLabel), ...values.map((v) => h("option", { value: v }, v)));
  sel.value = values.includes(current) ? current : "";
}

// --- views -------------------------------------------------------------------------------------

function render() {
  refreshFilterChoices();
  const content = document.getElementById("content");
  const views = { overview, services, mcs, pools, egress };
  content.replaceChildren(views[state.tab]());
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.tab === state.tab);
}

function select(ref) {
  if (!ref) return;
  state.selected = ref;
  showDetails(ref);
}

function overview() {
  const clusters = filtered("clusters", (c) => [c.name]);
  const wrap = h("div", {});
  wrap.append(graph());
  wrap.append(clusters.length ? h("div", { class: "cards", id: "clusters" }, clusters.map(([, c]) => clusterCard(c)))
    : h("div", { class: "empty" }, "No clusters yet."));
  return wrap;
}

function clusterCard(c) {
  const hl = health(c);
  const reasons = healthReasons(c);
  return h("div", { class: `card ${hl}`, "data-cluster": c.name, onclick: () => select(c.ref) },
    h("h4", {}, h("span", {}, c.name, c.role === "broker" ? " (broker)" : ""),
      h("span", { class: `badge ${hl}`, "data-health": hl }, hl)),
    c.server ? h("div", { class: "kv mono" }, c.server) : null,
    c.watched ? null : h("div", { class: "kv" }, "not watched (no context for it): the broker's view only"),
    c.role !== "broker" && !c.brokerWatched ? h("div", { class: "kv" }, "no broker watched: membership and heartbeat unknown") : null,
    c.role !== "broker" && c.brokerWatched ? [
      h("div", { class: "kv" }, "joined ", h("b", {}, c.joined ? "yes" : "no"),
        " · heartbeat ", h("b", { class: "age", "data-since": c.heartbeat || "" }, c.heartbeat ? `${age(c.heartbeat)} ago` : "never")),
      h("div", { class: "kv" }, "CIDR ", h("b", { class: "mono" }, (c.cidrs || []).join(", ") || "-")),
    ] : null,
    reasons.map((r) => h("div", { class: "problem" }, r)),
    Object.entries(c.kindErrors || {}).filter(([, e]) => !e.startsWith("not served"))
      .map(([k, e]) => h("div", { class: "problem" }, `${k}: ${e}`)),
    h("div", { class: "parts" }, (c.parts || []).map((p) =>
      h("span", { class: `part ${p.ok ? "" : "down"}`, "data-part": p.name,
        title: `${p.name}: ${p.ready}/${p.replicas} ready, ${p.restarts} restart${p.restarts === 1 ? "" : "s"}`,
        onclick: (e) => { e.stopPropagation(); select(p.ref); } },
        p.name.replace(/^isthmus-/, ""), ` ${p.ready}/${p.replicas} `,
        h("span", { class: `restarts${p.restarts ? " some" : ""}`, "data-restarts": p.restarts }, `↻${p.restarts}`)))));
}

function graph() {
  const clusters = Object.values(state.view.clusters).sort((a, b) => a.name.localeCompare(b.name));
  const members = clusters.filter((c) => c.role !== "broker");
  const broker = clusters.find((c) => c.role === "broker");
  const W = 900, H = 360, cx = W / 2, cy = H / 2, R = Math.min(W, H) / 2 - 50;
  const pos = {};
  members.forEach((c, i) => {
    const a = -Math.PI / 2 + (2 * Math.PI * i) / Math.max(1, members.length);
    pos[c.name] = [cx + R * 1.6 * Math.cos(a), cy + R * Math.sin(a)];
  });
  if (broker) pos[broker.name] = [cx, cy];
  const pairs = {};
  for (const [key, s] of filtered("services", (s) => s.clusters)) {
    const conflict = s.conflicts.length > 0;
    for (const from of Object.keys(s.exporters))
      for (const to of Object.keys(s.importers)) {
        if (from === to || !pos[from] || !pos[to]) continue;
        const k = `${from}>${to}`;
        pairs[k] = pairs[k] || { from, to, services: [], conflicts: [] };
        pairs[k].services.push(key);
        if (conflict) pairs[k].conflicts.push(key);
      }
  }
  const colour = { healthy: "#1f9d55", unhealthy: "#d68a00", unreachable: "#d64545", unknown: "#8a94a6" };
  // Labels go where they cover no other label, no cluster and no arrow: from just off the middle of
  // their curve, out along the side it bends to (a→b and b→a bend apart) before the inside, step by
  // step. Without this, a→b's and b→a's labels printed over each other, over the broker in the
  // middle, or across an arrow. Every curve is laid out first, so a label also keeps off the arrows
  // drawn after it; where no spot clears every arrow, it keeps clear of its own.
  const radius = (name) => (name === broker?.name ? 30 : 26);
  const taken = Object.entries(pos).map(([name, [x, y]]) => {
    const r = radius(name) + 2;
    return { x: x - r, y: y - r, w: 2 * r, h: 2 * r };
  });
  const overlaps = (b) => taken.some((o) => b.x < o.x + o.w && o.x < b.x + b.w && b.y < o.y + o.h && o.y < b.y + b.h);
  const crosses = (b, points) => points.some(([x, y]) => b.x - 4 < x && x < b.x + b.w + 4 && b.y - 4 < y && y < b.y + b.h + 4);
  const curves = Object.values(pairs).sort((a, b) => `${a.from}>${a.to}`.localeCompare(`${b.from}>${b.to}`)).map((p) => {
    const [x1, y1] = pos[p.from], [x2, y2] = pos[p.to];
    // Curve each direction to its own side so a→b and b→a do not overlap.
    const mx = (x1 + x2) / 2 + (y2 - y1) * 0.15, my = (y1 + y2) / 2 - (x2 - x1) * 0.15;
    // End the curve at the target's rim (radius + a gap) so the arrowhead shows.
    const dx = x2 - mx, dy = y2 - my, d = Math.hypot(dx, dy) || 1, r = radius(p.to) + 4;
    const ex = x2 - (dx / d) * r, ey = y2 - (dy / d) * r;
    const points = Array.from({ length: 41 }, (_, i) => {
      const u = i / 40, v = 1 - u;
      return [v * v * x1 + 2 * u * v * mx + u * u * ex, v * v * y1 + 2 * u * v * my + u * u * ey];
    });
    return { p, x1, y1, mx, my, ex, ey, points };
  });
  const placeLabel = (text, { x1, y1, mx, my, ex, ey, points }) => {
    const w = text.length * 7 + 6, lh = 15;
    let nx = mx - (x1 + ex) / 2, ny = my - (y1 + ey) / 2;
    const n = Math.hypot(nx, ny) || 1;
    [nx, ny] = n > 0.5 ? [nx / n, ny / n] : [0, -1];
    const qx = (x1 + 2 * mx + ex) / 4, qy = (y1 + 2 * my + ey) / 4;
    const t0 = Math.abs(nx) * w / 2 + Math.abs(ny) * lh / 2 + 3;  // the box's half-extent along the normal
    const at = (dir, t) => ({ x: qx + dir * nx * t - w / 2, y: qy + dir * ny * t - lh / 2, w, h: lh });
    const search = (clear) => {
      for (let t = t0; t <= 300; t += 4) {
        for (const dir of [1, -1]) {
          const b = at(dir, t);
          if (!overlaps(b) && clear(b)) return b;
        }
      }
      return null;
    };
    const box = search((b) => curves.every((c) => !crosses(b, c.points))) || search((b) => !crosses(b, points)) || at(1, t0);
    taken.push(box);
    return [box.x + w / 2, box.y + lh / 2 + 4];
  };
  const edges = curves.map((c) => {
    const { p, x1, y1, mx, my, ex, ey } = c;
    const bad = p.conflicts.length;
    const text = bad ? `${p.services.length} (${bad} in conflict)` : String(p.services.length);
    const [lx, ly] = placeLabel(text, c);
    return svg("g", { class: "edge-group", "data-edge": `${p.from}>${p.to}` },
      svg("path", { class: `edge${bad ? " conflict" : ""}`, d: `M${x1},${y1} Q${mx},${my} ${ex},${ey}`,
        "stroke-width": Math.min(6, 1 + p.services.length), "marker-end": bad ? "url(#arrow-bad)" : "url(#arrow)" },
        svg("title", {}, `${p.from} → ${p.to}: ${p.services.join(", ")}${bad ? ` (in conflict: ${p.conflicts.join(", ")})` : ""}`)),
      svg("text", { class: "edge-label", x: lx, y: ly }, text));
  });
  const brokerLinks = broker ? members.map((c) => {
    const [x, y] = pos[c.name];
    return svg("line", { class: "broker-link", x1: cx, y1: cy, x2: x, y2: y });
  }) : [];
  const nodes = clusters.filter((c) => pos[c.name]).map((c) => {
    const [x, y] = pos[c.name];
    const hl = health(c);
    return svg("g", { class: "node", "data-node": c.name, onclick: () => setFilter("cluster", state.filter.cluster === c.name ? "" : c.name) },
      svg("circle", { cx: x, cy: y, r: c.role === "broker" ? 30 : 26, fill: colour[hl] },
        svg("title", {}, `${c.name}: ${hl}${healthReasons(c).length ? " — " + healthReasons(c).join("; ") : ""}`)),
      svg("text", { x, y: y + 5, fill: "#fff" }, c.name));
  });
  return h("div", { class: "graph" },
    svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "clusterset graph" },
      svg("defs", {}, [["arrow", "#9fb3d9"], ["arrow-bad", "#d64545"]].map(([id, fill]) =>
        svg("marker", { id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 5, markerHeight: 5,
          markerUnits: "strokeWidth", orient: "auto" }, svg("path", { d: "M0,0 L10,5 L0,10 z", fill })))),
      brokerLinks, edges, nodes),
    h("div", { class: "legend" }, "Arrows: services exported by one cluster and imported by another (count). ",
      "Red: in conflict. Click a cluster to filter by it."));
}

function table(headers, rows, empty) {
  if (!rows.length) return h("div", { class: "empty" }, empty);
  return h("table", {}, h("thead", {}, h("tr", {}, headers.map((t) => h("th", {}, t)))), h("tbody", {}, rows));
}

function link(text, ref) {
  return h("span", { class: "link", onclick: (e) => { e.stopPropagation(); select(ref); } }, text);
}

function badge(b) {
  if (!b) return h("span", { class: "badge" }, "-");
  return h("span", { class: `badge ${b.level || ""}`, title: b.title || null, "data-badge": b.text }, b.text);
}

function condBadge(conds, type, goodStatus) {
  const c = (conds || []).find((x) => x.type === type);
  if (!c) return h("span", { class: "badge" }, "-");
  const ok = c.status === goodStatus;
  return h("span", { class: `badge ${ok ? "ok" : "warn"}`, title: c.message }, `${type} ${c.status}`);
}

function services() {
  const rows = filtered("services", (s) => s.clusters).map(([key, s]) => {
    const endpoints = Object.entries(s.importers).map(([c, imp]) =>
      h("div", { "data-importer": c }, link(c, imp.ref), " ", condBadge(imp.ready ? [imp.ready] : [], "Ready", "True"),
        imp.ready && imp.ready.status !== "True" ? ` ${imp.ready.reason}` : "", ": ",
        Object.entries(imp.endpoints).map(([src, a]) => `${src} ${a.length}`).join(", ") || "none"));
    return h("tr", { class: "row", "data-service": key, onclick: () => select(s.ref) },
      h("td", {}, s.namespace), h("td", {}, h("b", {}, s.name)),
      h("td", { class: "mono" }, s.vip.join(", ") || "-"), h("td", { class: "mono" }, s.ports.join(" ") || "-"),
      h("td", {}, Object.entries(s.exporters).map(([c, e]) => h("div", { "data-exporter": c }, link(c, e.ref), " ",
        badge(e.badge)))),
      h("td", {}, endpoints.length ? endpoints : "-"),
      h("td", { class: "conflicts" }, s.conflicts.map((c) => h("div", { class: "problem" }, `${c.cluster}: ${c.message}`)),
        Object.entries(s.exporters).flatMap(([c, e]) => e.problems.filter((p) => !p.startsWith("conflict"))
          .map((p) => h("div", { class: "problem" }, `${c}: ${p}`)))));
  });
  return table(["Namespace", "Service", "VIP", "Ports", "Exporters", "Importers: endpoints by source", "Conflicts"],
    rows, "No exported or imported services.");
}

function mcs() {
  const rows = filtered("mcs", (m) => [m.cluster]).map(([key, m]) =>
    h("tr", { class: "row", "data-mcs": key, onclick: () => select(m.ref) },
      h("td", {}, m.cluster), h("td", {}, m.namespace), h("td", {}, h("b", {}, m.name)), h("td", {}, m.types.join(", ")),
      h("td", {}, m.providers), h("td", {}, m.consumers), h("td", { class: "mono" }, m.address || "-"),
      h("td", {}, condBadge(m.conditions, "Ready", "True"),
        m.conditions.filter((c) => c.status !== "True" && c.message).map((c) => h("div", { class: "problem" }, c.message)))));
  return table(["Cluster", "Namespace", "Name", "Types", "Providers", "Consumers", "Load balancer", "Status"], rows,
    "No MultiClusterServices.");
}

function pools() {
  const rows = filtered("pools", (p) => [p.cluster]).map(([key, p]) =>
    h("tr", { class: "row", "data-pool": key, onclick: () => select(p.ref) },
      h("td", {}, p.cluster), h("td", {}, h("b", {}, p.name)),
      h("td", { class: "role", title: `dklb role: ${p.roleRaw || "(default)"}`, "data-role": p.roleRaw }, p.role),
      h("td", {}, p.frontends.map((f) => h("div", { class: "mono" },
        `${f.name} :${f.port}/${f.protocol} → ${f.backend || "-"}`, f.addresses.length ? ` (${f.addresses.join(", ")})` : ""))),
      h("td", {}, p.backends.map((b) => h("div", { class: "mono" }, `${b.name}: ${b.servers.join(", ") || "no servers"}`))),
      h("td", {}, p.instances.map((i) => h("div", {},
        h("span", { class: `badge ${i.state === "Running" ? "ok" : i.state === "Failed" ? "bad" : "warn"}` }, i.state),
        ` #${i.slot} pid ${i.pid || "-"} · ${i.restarts || 0} restarts`, i.statsPort ? ` · stats :${i.statsPort}` : "",
        i.message ? h("div", { class: "problem" }, i.message) : null))),
      h("td", {}, p.ready || "-")));
  return table(["Cluster", "Pool", "Role", "Frontends", "Backends", "Instances", "Ready"], rows,
    "No load-balancer pools.");
}

function egress() {
  const rows = filtered("egress", (e) => [e.cluster]).map(([key, e]) =>
    h("tr", { class: "row", "data-egress": key, onclick: () => select(e.ref) },
      h("td", {}, e.cluster), h("td", {}, e.kind), h("td", {}, e.namespace || "-"), h("td", {}, h("b", {}, e.name)),
      h("td", { class: "mono" }, e.sourceIP || "-"), h("td", {}, e.detail || ""),
      h("td", { class: "state" }, badge(e.badge),
        e.state && !e.state.startsWith("Ready") && e.state !== e.badge?.text ? h("span", { class: "kv" }, ` ${e.state}`) : null,
        (e.sources || []).map((s) => h("div", { class: "kv" }, `${s.service} ← ${s.sourceIP || "?"} (${s.endpoints ?? 0} pods)`)),
        e.conditions.filter((c) => c.status !== "True" && c.message).map((c) => h("div", { class: "problem" }, c.message)))));
  return table(["Cluster", "Kind", "Namespace", "Name", "Source IP", "Detail", "State"], rows,
    "No egress objects (SourceIPClasses, claims, ExternalServices).");
}

// --- details panel -----------------------------------------------------------------------------

async function showDetails(ref) {
  const panel = document.getElementById("details");
  const title = `${ref.kind} ${ref.namespace ? ref.namespace + "/" : ""}${ref.name} — ${ref.cluster}`;
  document.getElementById("details-title").textContent = title;
  const body = document.getElementById("details-body");
  body.replaceChildren(h("div", { class: "kv" }, "loading…"));
  panel.hidden = false;
  const q = new URLSearchParams({ cluster: ref.cluster, kind: ref.kind, name: ref.name });
  if (ref.namespace) q.set("namespace", ref.namespace);
  let data;
  try {
    const r = await fetch(`api/object?${q}`);
    if (!r.ok) throw new Error(await r.text());
    data = await r.json();
  } catch (err) {
    body.replaceChildren(h("div", { class: "problem" }, String(err.message || err)));
    return;
  }
  if (state.selected !== ref) return; // another object was clicked meanwhile
  body.replaceChildren(...[
    h("h3", {}, "Conditions"),
    data.conditions.length ? h("table", {}, h("tbody", {}, data.conditions.map((c) => h("tr", {},
      h("td", {}, c.type), h("td", {}, c.status), h("td", {}, c.reason), h("td", { class: "condition-message" }, c.message)))))
      : h("div", { class: "kv" }, "none"),
    (data.related || []).length ? [
      h("h3", {}, "Conditions of its exports"),
      h("table", { class: "related" }, h("tbody", {}, data.related.flatMap((r) => [
        h("tr", {}, h("td", { colspan: 4 }, link(`${r.ref.kind} in ${r.ref.cluster}`, r.ref), " ", badge(r.badge))),
        ...(r.conditions.length ? r.conditions : [{ type: "none", status: "", reason: "", message: "" }]).map((c) =>
          h("tr", {}, h("td", {}, c.type), h("td", {}, c.status), h("td", {}, c.reason),
            h("td", { class: "condition-message" }, c.message)))]))),
    ] : null,
    h("h3", {}, "Events"),
    data.eventsError ? h("div", { class: "problem" }, data.eventsError) : null,
    data.events.length ? h("table", {}, h("tbody", {}, data.events.map((e) => h("tr", {},
      h("td", {}, e.type), h("td", {}, e.reason), h("td", {}, e.message), h("td", { class: "kv" }, `×${e.count}`, e.last ? ` ${age(e.last)} ago` : "")))))
      : data.eventsError ? null : h("div", { class: "kv" }, "none"),
    h("h3", {}, "YAML"),
    h("pre", { class: "yaml" }, data.yaml),
  ].flat().filter((el) => el)); // replaceChildren would print a null as "null"
}

// --- live data ---------------------------------------------------------------------------------

function setLive(on, text) {
  state.live = on;
  const el = document.getElementById("live");
  el.className = `live ${on ? "on" : "off"}`;
  el.textContent = text || (on ? "live" : "reconnecting…");
}

let pending = false;
function schedule() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => { pending = false; render(); });
}

function connect() {
  const es = new EventSource("api/events");
  es.addEventListener("snapshot", (ev) => {
    const data = JSON.parse(ev.data);
    state.clockOffset = Date.parse(data.serverTime) - Date.now();
    state.view = data.view;
    for (const s of SECTIONS) state.view[s] = state.view[s] || {};
    setLive(true);
    schedule();
  });
  es.addEventListener("delta", (ev) => {
    const data = JSON.parse(ev.data);
    state.clockOffset = Date.parse(data.serverTime) - Date.now();
    for (const [s, items] of Object.entries(data.delta.set || {})) Object.assign(state.view[s], items);
    for (const [s, ids] of Object.entries(data.delta.del || {})) for (const id of ids) delete state.view[s][id];
    schedule();
  });
  es.onopen = () => setLive(true);
  es.onerror = () => setLive(false); // EventSource reconnects by itself and gets a fresh snapshot
}

function setFilter(name, value) {
  state.filter[name] = value;
  const id = { namespace: "filter-namespace", cluster: "filter-cluster", q: "search" }[name];
  document.getElementById(id).value = value;
  schedule();
}

function main() {
  for (const b of document.querySelectorAll("#tabs button"))
    b.addEventListener("click", () => { state.tab = b.dataset.tab; location.hash = state.tab; schedule(); });
  document.getElementById("filter-namespace").addEventListener("change", (e) => setFilter("namespace", e.target.value));
  document.getElementById("filter-cluster").addEventListener("change", (e) => setFilter("cluster", e.target.value));
  document.getElementById("search").addEventListener("input", (e) => setFilter("q", e.target.value.trim()));
  document.getElementById("details-close").addEventListener("click", () => {
    state.selected = null;
    document.getElementById("details").hidden = true;
  });
  const tab = location.hash.slice(1);
  if (["overview", "services", "mcs", "pools", "egress"].includes(tab)) state.tab = tab;
  connect();
  // Heartbeats age by the clock, not by events: re-render the overview each second.
  setInterval(() => { if (state.tab === "overview") schedule(); }, 1000);
  render();
}

document.addEventListener("DOMContentLoaded", main);
