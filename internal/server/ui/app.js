// keel's cloud view: logs in against /identity/v3/auth/tokens (the token
// stays in this page's memory), then reads /keel/v1/ui/events, a stream of
// server-sent events carrying the cloud's state whenever it changes, and
// draws it. The server decides what the caller may see (an admin: every
// host, instance and move; anyone else: their project's instances and
// moves, no host names).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const CLASSES = ["VCPU", "MEMORY_MB", "DISK_GB"];
const LABEL = { VCPU: "vCPU", MEMORY_MB: "RAM", DISK_GB: "disk" };

let token = null;
let abort = null;
let state = null;
// colourBy is what the grid's tiles are coloured by: "claims" (the largest
// of a host's classes' used / capacity) or "measured" (its CPU as the
// agent last measured it).
let colourBy = "claims";
let selected = null; // host name shown in the detail panel
let hovered = null;

const $ = (id) => document.getElementById(id);

// h builds an element: h("div", {class: "x", style: {width: "3px"}}, child, "text").
function h(tag, attrs, ...kids) {
  const svg = tag.startsWith("svg:");
  const el = svg ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "style") Object.assign(el.style, v);
    else if (k === "text") el.textContent = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v);
  }
  for (const c of kids.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// colour is a host cell's colour for its fill (the largest of its
// classes' used / capacity): green through yellow to red; the test
// computes the same.
function colour(fill) {
  const f = Math.max(0, Math.min(1, fill));
  return `hsl(${Math.round(120 * (1 - f))}, 65%, 46%)`;
}

const pct = (x) => `${Math.round(x * 100)}%`;
const gib = (b) => (b / 2 ** 30).toFixed(1);
function amount(rc, n) {
  if (rc === "MEMORY_MB") return `${(n / 1024).toFixed(n % 1024 ? 1 : 0)} GiB`;
  if (rc === "DISK_GB") return `${n} GB`;
  return String(n);
}

// ---- login ---------------------------------------------------------------

async function login(ev) {
  ev.preventDefault();
  $("loginerr").textContent = "";
  const user = $("user").value.trim();
  const project = $("project").value.trim();
  const auth = {
    identity: { methods: ["password"], password: { user: { name: user, domain: { id: "default" }, password: $("password").value } } },
  };
  if (project) auth.scope = { project: { name: project, domain: { id: "default" } } };
  let res;
  try {
    res = await fetch("/identity/v3/auth/tokens", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ auth }),
    });
  } catch (e) {
    $("loginerr").textContent = `Cannot reach the server: ${e.message}`;
    return;
  }
  if (res.status !== 201) {
    let msg = `Login refused (${res.status}).`;
    try { msg = (await res.json()).error.message || msg; } catch (_) { /* keep msg */ }
    $("loginerr").textContent = msg;
    return;
  }
  token = res.headers.get("X-Subject-Token");
  const body = await res.json();
  $("password").value = "";
  const t = body.token || {};
  const roles = (t.roles || []).map((r) => r.name);
  $("whoami").textContent = `${t.user ? t.user.name : user} in project ${t.project ? t.project.name : "?"}${roles.includes("admin") ? " (admin)" : ""}`;
  $("login").hidden = true;
  $("who").hidden = false;
  stream();
}

function logout(msg) {
  token = null;
  state = null;
  if (abort) abort.abort();
  $("admin").hidden = true;
  $("member").hidden = true;
  $("who").hidden = true;
  $("login").hidden = false;
  $("loginerr").textContent = msg || "";
  $("user").focus();
}

// ---- the stream ----------------------------------------------------------

function setLive(on, text) {
  const el = $("live");
  el.classList.toggle("off", !on);
  el.textContent = text || (on ? "live" : "reconnecting…");
}

// stream reads the event stream until logout, reconnecting with a growing
// pause (EventSource cannot send the token header, so fetch reads it).
async function stream() {
  let pause = 250;
  while (token) {
    abort = new AbortController();
    try {
      const res = await fetch("/keel/v1/ui/events", { headers: { "X-Auth-Token": token }, signal: abort.signal, cache: "no-store" });
      if (res.status === 401) { logout("Your session ended; log in again."); return; }
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      setLive(true);
      pause = 250;
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (onEvent(block) === "expired") { logout("Your token expired; log in again."); return; }
        }
      }
    } catch (e) {
      if (!token) return;
    }
    if (!token) return;
    setLive(false);
    await new Promise((r) => setTimeout(r, pause));
    pause = Math.min(pause * 2, 5000);
  }
}

function onEvent(block) {
  let event = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) continue;
    const c = line.indexOf(":");
    const field = c < 0 ? line : line.slice(0, c);
    const value = c < 0 ? "" : line.slice(c + 1).replace(/^ /, "");
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
  }
  if (event === "expired") return "expired";
  if (!data.length) return event;
  const part = JSON.parse(data.join("\n"));
  if (event === "hello") {
    state = { ...part, hosts: [], imbalance: null, instances: [], moves: [], plans: [], time: null };
  } else if (state && (event === "hosts" || event === "instances" || event === "moves" || event === "plans")) {
    Object.assign(state, part);
    if (event === "instances") byHost = null;
    scheduleRender();
  }
  return event;
}

// scheduleRender draws at most once a frame, however many parts arrive.
let pending = false;
function scheduleRender() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => { pending = false; if (state) render(); });
}

// instancesOn groups the instances by host (they come sorted by host,
// largest share first).
let byHost = null;
function instancesOn(host) {
  if (!byHost) {
    byHost = {};
    for (const i of state.instances || []) (byHost[i.host] = byHost[i.host] || []).push(i);
  }
  return byHost[host] || [];
}

// ---- drawing -------------------------------------------------------------

function render() {
  const s = state;
  $("foot").textContent = s.time ? `updated ${new Date(s.time).toLocaleTimeString()}` : "";
  if (s.admin) {
    $("member").hidden = true;
    $("admin").hidden = false;
    renderImbalance(s);
    renderGrid(s);
    renderDetail(s);
    renderPlans(s);
    renderMoves(s);
  } else {
    $("admin").hidden = true;
    $("member").hidden = false;
    renderMember(s);
  }
}

function card(k, v, sub, id) {
  return h("div", { class: "card", "data-card": id }, h("div", { class: "k", text: k }), h("div", { class: "v", text: v }), h("div", { class: "s", text: sub || "" }));
}

function renderImbalance(s) {
  const im = s.imbalance || { cv: {} };
  const cards = [];
  for (const rc of CLASSES) {
    const v = im.cv[rc] || 0;
    cards.push(card(`imbalance ${LABEL[rc]}`, v.toFixed(2), "coefficient of variation", `cv-${rc}`));
  }
  // The same on what the guests really use: the hosts' measured CPU.
  cards.push(card("imbalance measured CPU", im.measured_cpu_cv == null ? "–" : im.measured_cpu_cv.toFixed(2),
    `${im.measured_hosts || 0} of ${im.enabled_hosts || 0} hosts measured`, "cv-measured"));
  cards.push(card("most loaded", im.most_loaded ? im.most_loaded.host : "–",
    im.most_loaded ? `${pct(im.most_loaded.fill)} ${LABEL[im.most_loaded.class] || ""}` : "", "most"));
  cards.push(card("least loaded", im.least_loaded ? im.least_loaded.host : "–",
    im.least_loaded ? `${pct(im.least_loaded.fill)} ${LABEL[im.least_loaded.class] || ""}` : "", "least"));
  cards.push(card("empty hosts", `${im.empty_hosts || 0} / ${im.enabled_hosts || 0}`, "of the enabled hosts", "empty"));
  cards.push(card("largest free slot", im.largest_free_flavor || "none",
    im.largest_free_flavor ? `fits on ${im.largest_free_flavor_hosts} host${im.largest_free_flavor_hosts === 1 ? "" : "s"}` : "no flavor fits anywhere", "slot"));
  $("imbalance").replaceChildren(...cards);
}

// layout places n cells in the grid's width; cells shrink as hosts grow.
// Past 2,000 hosts they are sized to fill about 760 px of height, so that
// 10,000 hosts still fit one screen (7 px cells in an 855 px grid).
function layout(n, width) {
  let size = n <= 12 ? 116 : n <= 40 ? 78 : n <= 150 ? 46 : n <= 500 ? 26 : 16;
  if (n > 2000) size = Math.max(4, Math.min(16, Math.floor(Math.sqrt((width * 760) / n)) - 1));
  const gap = size >= 46 ? 6 : size >= 16 ? 2 : 1;
  const cols = Math.max(1, Math.min(n, Math.floor((width + gap) / (size + gap))));
  const rows = Math.ceil(n / cols);
  return { size, gap, cols, rows, height: rows * (size + gap) - gap + 40 };
}

function hostState(hs) {
  const st = [];
  st.push(hs.enabled ? "enabled" : "disabled");
  st.push(hs.up ? "up" : "down");
  if (hs.draining) st.push("draining");
  if (hs.drained) st.push("drained");
  return st;
}

// tileValue is what a host's tile shows under colourBy: its fill by the
// claims, or its measured CPU (null when it has none within max_age).
function tileValue(hs) {
  if (colourBy !== "measured") return hs.fill;
  return hs.measured ? hs.measured.cpu_percent : null;
}

function setColourBy(by) {
  colourBy = by;
  for (const b of document.querySelectorAll("#colourby button")) b.setAttribute("aria-pressed", String(b.dataset.by === by));
  $("legendhi").textContent = by === "measured" ? "100% of CPUs busy (measured)" : "100% of capacity";
  if (state) render();
}

// cells keeps each host's drawn cell with the key it was drawn from, so a
// redraw builds only the cells whose host changed (at 10,000 hosts a full
// rebuild took the browser a second or two at load 15).
let cells = new Map();
// gridOrder names the hosts in the order the grid last drew them, and
// gridMoves the move arrows it drew, so a redraw of the same hosts in the
// same layout swaps only the changed cells in place.
let gridOrder = [];
let gridMoves = [];

// wireGrid handles the cells' hover and click once on the grid, not with
// three handlers per cell.
function wireGrid(svg) {
  if (svg.dataset.wired) return;
  svg.dataset.wired = "1";
  const hostOf = (e) => {
    const g = e.target.closest && e.target.closest("g.host");
    return g ? g.dataset.host : null;
  };
  svg.addEventListener("mouseover", (e) => {
    const name = hostOf(e);
    if (name !== hovered) { hovered = name; renderDetail(state); }
  });
  svg.addEventListener("mouseleave", () => {
    if (hovered !== null) { hovered = null; renderDetail(state); }
  });
  svg.addEventListener("click", (e) => {
    const name = hostOf(e);
    if (name === null) return;
    selected = selected === name ? null : name;
    render();
  });
}

function renderGrid(s) {
  const svg = $("grid");
  wireGrid(svg);
  const hosts = s.hosts || [];
  $("hostcount").textContent = `${hosts.length}`;
  svg.dataset.by = colourBy;
  const width = svg.clientWidth || 800;
  const L = layout(Math.max(hosts.length, 1), width);
  svg.setAttribute("viewBox", `0 0 ${width} ${L.height}`);
  svg.setAttribute("height", L.height);
  const defs = h("svg:defs", {},
    h("svg:pattern", { id: "hatch", width: 8, height: 8, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" },
      h("svg:rect", { width: 3, height: 8, fill: "rgba(255,255,255,.55)" })),
    h("svg:marker", { id: "head", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 6, markerHeight: 6, orient: "auto-start-reverse" },
      h("svg:path", { d: "M0,0 L10,5 L0,10 z", fill: "context-stroke" })));
  const pos = {};
  const next = new Map();
  const swaps = [];
  const drawn = hosts.map((hs, i) => {
    const x = (i % L.cols) * (L.size + L.gap);
    const y = Math.floor(i / L.cols) * (L.size + L.gap) + 20;
    pos[hs.name] = { x: x + L.size / 2, y: y + L.size / 2 };
    const empty = hs.fill === 0;
    const v = tileValue(hs);
    const measured = colourBy === "measured";
    // Measured: an unmeasured host is grey, an idle one green (its guests,
    // if any, use nothing); by claims an empty host is grey.
    const fillColour = !hs.up ? "#39424d" : (measured ? v == null : empty) ? "#d9e0e6" : colour(v);
    const cls = ["host", ...hostState(hs)];
    if (empty) cls.push("empty");
    if (measured && v == null) cls.push("unmeasured");
    if (hs.name === selected) cls.push("sel");
    const label = measured ? (v == null ? "CPU unmeasured" : `${pct(v)} CPU busy`) : `${pct(hs.fill)} ${LABEL[hs.fill_class] || ""}`;
    const key = [x, y, L.size, fillColour, cls.join(" "), hs.fill, v, label, hs.zone, hs.instances, hs.drain_plan].join("|");
    const old = cells.get(hs.name);
    if (old && old.key === key) {
      next.set(hs.name, old);
      return old.g;
    }
    if (old) swaps.push([old.g, null]);
    const g = h("svg:g", {
      class: cls.join(" "), "data-host": hs.name, "data-fill": hs.fill.toFixed(4),
      "data-value": v == null ? "unavailable" : v.toFixed(4), "data-colour": v == null ? "unavailable" : colour(v),
    },
    h("svg:title", { text: `${hs.name}: ${label} · ${hostState(hs).join(", ")}` }),
    h("svg:rect", { class: "cell", x, y, width: L.size, height: L.size, rx: L.size >= 46 ? 5 : 2, fill: fillColour }));
    if (!hs.enabled) g.append(h("svg:rect", { x, y, width: L.size, height: L.size, rx: L.size >= 46 ? 5 : 2, fill: "url(#hatch)" }));
    if (hs.draining || hs.drained) {
      g.append(h("svg:rect", { class: hs.draining ? "drainframe" : "drainframe drained", x: x + 2, y: y + 2, width: L.size - 4, height: L.size - 4, rx: 4,
        fill: "none", stroke: "#2f6fd6", "stroke-width": 4, "stroke-dasharray": hs.draining ? null : "6 4" }));
    }
    if (L.size >= 46) {
      g.append(h("svg:text", { x: x + 8, y: y + 18, text: hs.name }));
      g.append(h("svg:text", { class: "small", x: x + 8, y: y + 34, text: label }));
      if (L.size >= 78) {
        const plan = hs.drain_plan ? ` (plan ${hs.drain_plan})` : "";
        const tag = !hs.up ? "down" : hs.draining ? `draining${plan}` : hs.drained ? `drained${plan}` : !hs.enabled ? "disabled" : `${hs.instances} VM${hs.instances === 1 ? "" : "s"}`;
        g.append(h("svg:text", { class: "small", x: x + 8, y: y + L.size - 10, text: tag }));
      }
    }
    next.set(hs.name, { key, g });
    if (old) swaps[swaps.length - 1][1] = g;
    return g;
  });
  const sameOrder = gridOrder.length === hosts.length && hosts.every((hs, i) => gridOrder[i] === hs.name) &&
    svg.dataset.layout === `${L.size} ${L.cols}`;
  cells = next;
  // Past a handful of moves the arrows lose their labels (the table below
  // has them) and thin out, so the grid stays readable.
  const shown = (s.moves || []).filter((m) => pos[m.source] && pos[m.dest]);
  const busy = shown.length > 8 || L.size < 46;
  const moves = shown.map((m) => arrow(m, pos[m.source], pos[m.dest], L.size, busy));
  if (sameOrder) {
    for (const [was, now] of swaps) was.replaceWith(now);
    for (const m of gridMoves) m.remove();
    svg.append(...moves);
  } else {
    svg.replaceChildren(defs, ...drawn, ...moves);
    gridOrder = hosts.map((hs) => hs.name);
    svg.dataset.layout = `${L.size} ${L.cols}`;
  }
  gridMoves = moves;
}

function moveClass(m) {
  if (!m.finished) return "move";
  return m.status === "completed" ? "move done" : "move failed";
}

function progress(m) {
  return m.memory_total_bytes > 0 ? Math.min(1, m.memory_processed_bytes / m.memory_total_bytes) : 0;
}

function arrow(m, a, b, size, busy) {
  const dx = b.x - a.x, dy = b.y - a.y;
  const len = Math.hypot(dx, dy) || 1;
  const ux = dx / len, uy = dy / len;
  const r = size * 0.2;
  const sx = a.x + ux * r, sy = a.y + uy * r, ex = b.x - ux * r, ey = b.y - uy * r;
  // Bend to the left of the direction so opposite moves do not overlap.
  const bend = Math.min(70, len * 0.35);
  const cx = (sx + ex) / 2 - uy * bend, cy = (sy + ey) / 2 + ux * bend;
  const g = h("svg:g", { class: moveClass(m) + (busy ? " busy" : ""), "data-move": m.id, "data-source": m.source, "data-dest": m.dest, "data-status": m.status, "data-progress": progress(m).toFixed(3) },
    h("svg:path", { d: `M${sx},${sy} Q${cx},${cy} ${ex},${ey}`, "marker-end": "url(#head)" }),
    busy ? h("svg:title", { text: `${m.instance_name || m.id}: ${m.source} → ${m.dest}, ${m.finished ? m.status : pct(progress(m))}` })
      : h("svg:text", { x: 0.25 * sx + 0.5 * cx + 0.25 * ex, y: 0.25 * sy + 0.5 * cy + 0.25 * ey + 4, "text-anchor": "middle", text: m.finished ? `${m.instance_name || m.id}: ${m.status}` : `${m.instance_name || m.id} ${pct(progress(m))}` }));
  if (m.finished) g.setAttribute("opacity", Math.max(0.1, 1 - m.finished_ago_seconds / 2).toFixed(2));
  return g;
}

function bar(parts, title) {
  return h("div", { class: "bar", title }, parts.map((p) => h("span", { class: p.cls, title: p.title, style: { left: `${p.left * 100}%`, width: `${p.width * 100}%`, background: p.bg } })));
}

// measuredRows shows a host's measured CPU beside its vCPU claims: what
// the guests really use, as the agent last measured it (its age when
// older than a minute); "unavailable" when the host reports none.
function measuredRows(m) {
  const label = h("span", { text: "CPU busy (measured)" });
  if (!m) return [h("div", { class: "row", "data-measured": "none" }, label, h("b", { text: "unavailable" }))];
  const age = m.age_seconds > 60 ? ` · ${Math.round(m.age_seconds)} s old` : "";
  return [
    h("div", { class: "row", "data-measured": m.cpu_percent.toFixed(4) }, label, h("b", { text: `${pct(m.cpu_percent)} of its CPUs${age}` })),
    bar([{ cls: "used", left: 0, width: Math.min(1, m.cpu_percent), bg: colour(m.cpu_percent) }], `measured at ${m.measured_at}: what the guests use, beside what they claim`),
  ];
}

function renderDetail(s) {
  // Hovered, else clicked, else the most loaded host.
  const name = hovered || selected || (s && s.imbalance && s.imbalance.most_loaded && s.imbalance.most_loaded.host);
  const hs = s && (s.hosts || []).find((x) => x.name === name);
  const el = $("detail");
  if (!hs) {
    el.replaceChildren(h("p", { class: "muted", text: "Hover or click a host for its numbers and instances." }));
    return;
  }
  const kids = [h("h3", { text: hs.name }), h("div", { class: "state", text: `${hostState(hs).join(" · ")} · zone ${hs.zone}${hs.disabled_reason ? ` · ${hs.disabled_reason}` : ""}` })];
  for (const rc of CLASSES) {
    const r = hs.resources[rc];
    if (!r) continue;
    const f = r.capacity > 0 ? r.used / r.capacity : 0;
    kids.push(h("div", { class: "row" }, h("span", { text: LABEL[rc] }), h("b", { text: `${amount(rc, r.used)} of ${amount(rc, r.capacity)} (${pct(f)})` })));
    kids.push(bar([{ cls: "used", left: 0, width: Math.min(1, f), bg: colour(f) }], `total ${r.total}, reserved ${r.reserved}, ratio ${r.allocation_ratio}`));
    if (rc === "VCPU") kids.push(...measuredRows(hs.measured));
  }
  const rc = hs.fill_class || "VCPU";
  const cap = (hs.resources[rc] || {}).capacity || 1;
  const field = { VCPU: "vcpus", MEMORY_MB: "ram_mb", DISK_GB: "disk_gb" }[rc];
  const list = instancesOn(hs.name);
  let left = 0;
  const segs = list.map((inst, i) => {
    const w = inst[field] / cap;
    const p = { cls: "seg", left, width: w, bg: `hsl(${(i * 47) % 360}, 45%, 55%)`, title: `${inst.name} (${inst.flavor})` };
    left += w;
    return p;
  });
  kids.push(h("div", { class: "row" }, h("span", { text: `instances by ${LABEL[rc]}` }), h("b", { text: `${list.length}` })));
  kids.push(bar(segs, `instances, largest first, as shares of ${LABEL[rc]}`));
  list.slice(0, 30).forEach((inst, i) => kids.push(h("div", { class: "inst" },
    h("i", { style: { background: `hsl(${(i * 47) % 360}, 45%, 55%)` } }),
    h("span", { text: `${inst.name} · ${inst.flavor} · ${inst.status}` }))));
  if (list.length > 30) kids.push(h("div", { class: "inst muted", text: `… and ${list.length - 30} more` }));
  el.replaceChildren(...kids);
}

function eta(m) {
  if (m.finished) return m.error ? m.error : "";
  if (m.eta_seconds === undefined || m.eta_seconds === null) return "…";
  return `${Math.max(0, m.eta_seconds).toFixed(m.eta_seconds < 10 ? 1 : 0)} s`;
}

function moveRow(m, hosts) {
  const p = progress(m);
  const tr = h("tr", { class: m.finished ? "finished" : "", "data-move": m.id },
    h("td", { text: m.id }),
    h("td", { text: m.instance_name || m.instance_uuid }),
    h("td", { text: m.plan ? `${m.kind} (plan ${m.plan})` : m.kind }),
    hosts ? h("td", { text: `${m.source || "?"} → ${m.dest || "…"}` }) : null,
    h("td", {}, h("span", { class: `status ${m.status}`, text: m.phase && !m.finished ? `${m.status} · ${m.phase}` : m.status })),
    h("td", {}, h("span", { class: "pbar" }, h("span", { style: { width: `${p * 100}%` } })),
      m.memory_total_bytes ? `${gib(m.memory_processed_bytes)} / ${gib(m.memory_total_bytes)} GiB, ${gib(m.memory_remaining_bytes)} left` : ""),
    h("td", { text: eta(m) }));
  if (m.finished) tr.style.opacity = Math.max(0.15, 1 - m.finished_ago_seconds / 2).toFixed(2);
  return tr;
}

function renderMoves(s) {
  const moves = s.moves || [];
  const inflight = moves.filter((m) => !m.finished).length;
  $("movecount").textContent = `${inflight} in flight${moves.length > inflight ? `, ${moves.length - inflight} just finished` : ""}`;
  const body = $("moves").tBodies[0];
  if (!moves.length) {
    body.replaceChildren(h("tr", {}, h("td", { colspan: 7, class: "muted", text: "No moves in flight." })));
    return;
  }
  body.replaceChildren(...moves.map((m) => moveRow(m, true)));
}

// ---- plans ---------------------------------------------------------------

function seconds(x) {
  if (x === undefined || x === null) return "…";
  if (x >= 90) return `${Math.round(x / 60)} min`;
  return `${Math.max(0, x).toFixed(x < 10 ? 1 : 0)} s`;
}

function planRow(p) {
  const g = p.progress || {};
  const total = g.total || 0;
  const ended = g.done + g.failed + g.skipped + g.cancelled;
  const parts = [`${g.done} done`, `${g.running} running`, `${g.left} left`];
  if (g.failed) parts.push(`${g.failed} failed`);
  if (g.skipped) parts.push(`${g.skipped} skipped`);
  if (g.cancelled) parts.push(`${g.cancelled} cancelled`);
  const live = p.state === "running" || p.state === "approved";
  const took = p.finished && p.started ? (new Date(p.finished) - new Date(p.started)) / 1000 : null;
  const eta = live ? (g.left + g.running === 0 ? "" : seconds(p.eta_seconds)) : took !== null ? `took ${seconds(took)}` : "";
  const what = p.purpose === "drain" || p.purpose === "evacuate-all" ? (p.hosts || []).join(", ") : p.reason || "";
  return h("tr", { class: live ? "" : "ended", "data-plan": p.id, "data-state": p.state, "data-done": g.done, "data-running": g.running, "data-left": g.left, "data-total": total },
    h("td", { text: p.id }),
    h("td", { text: p.purpose }),
    h("td", { text: what }),
    h("td", {}, h("span", { class: `status plan-${p.state}`, text: p.state })),
    h("td", {},
      h("span", { class: "pbar plan" },
        h("span", { class: "done", style: { width: `${total ? (100 * ended) / total : 0}%` } }),
        h("span", { class: "run", style: { width: `${total ? (100 * g.running) / total : 0}%` } })),
      h("span", { class: "counts", text: `${parts.join(" · ")} of ${total}` })),
    h("td", { text: g.bytes_copied ? `${gib(g.bytes_copied)} GiB${g.bytes_left ? `, ${gib(g.bytes_left)} left` : ""}` : "" }),
    h("td", { text: (p.running || []).slice(0, 4).join(", ") + ((p.running || []).length > 4 ? ", …" : "") }),
    h("td", { text: eta }));
}

function renderPlans(s) {
  const plans = s.plans || [];
  const live = plans.filter((p) => p.state === "running" || p.state === "approved").length;
  $("plancount").textContent = plans.length ? `${live} running${plans.length > live ? `, ${plans.length - live} other` : ""}` : "";
  const body = $("plans").tBodies[0];
  if (!plans.length) {
    body.replaceChildren(h("tr", {}, h("td", { colspan: 8, class: "muted", text: "No drain, rebalance or evacuation plans." })));
    return;
  }
  body.replaceChildren(...plans.map(planRow));
}

function renderMember(s) {
  const ins = s.instances || [];
  $("mycount").textContent = `${ins.length}`;
  const moving = Object.fromEntries((s.moves || []).filter((m) => !m.finished).map((m) => [m.instance_uuid, m]));
  const body = $("myinstances").tBodies[0];
  if (!ins.length) {
    body.replaceChildren(h("tr", {}, h("td", { colspan: 7, class: "muted", text: "No instances in this project." })));
    return;
  }
  body.replaceChildren(...ins.map((i) => {
    const m = moving[i.uuid];
    return h("tr", { "data-instance": i.uuid },
      h("td", { text: i.name }),
      h("td", {}, h("span", { class: `status ${i.status}`, text: i.status })),
      h("td", { text: i.flavor }), h("td", { text: i.vcpus }), h("td", { text: `${(i.ram_mb / 1024).toFixed(1)} GiB` }), h("td", { text: `${i.disk_gb} GB` }),
      h("td", {}, m ? [h("span", { class: "pbar" }, h("span", { style: { width: `${progress(m) * 100}%` } })), `${pct(progress(m))} ${eta(m)}`] : ""));
  }));
}

window.addEventListener("resize", () => { if (state && state.admin) renderGrid(state); });
document.addEventListener("DOMContentLoaded", () => {
  $("loginform").addEventListener("submit", login);
  $("logout").addEventListener("click", () => logout(""));
  for (const b of document.querySelectorAll("#colourby button")) b.addEventListener("click", () => setColourBy(b.dataset.by));
  $("user").focus();
});
