// eru console: a single-page app over the console's JSON API, updated live by server-sent events.
// Front-end library: htm + preact (standalone build of htm 3.1.1, vendored; see docs/console.md).
import { html, render, useState, useEffect, useRef, useCallback } from "./vendor/htm-preact-standalone-3.1.1.module.js";

// ---------- live events ----------
const listeners = new Map();
function on(type, fn) {
  if (!listeners.has(type)) listeners.set(type, new Set());
  listeners.get(type).add(fn);
  return () => listeners.get(type).delete(fn);
}
function emit(type, data) {
  for (const fn of listeners.get(type) || []) fn(data);
}
let liveState = "connecting";
function connect() {
  const source = new EventSource("/api/stream");
  for (const type of ["hello", "condition", "usage", "container", "deploy", "eviction", "resync"]) {
    source.addEventListener(type, (e) => emit(type, JSON.parse(e.data)));
  }
  source.addEventListener("hello", () => { liveState = "live"; emit("live", liveState); });
  source.onerror = () => { liveState = "reconnecting"; emit("live", liveState); };
}

// ---------- helpers ----------
// A long value (a 120 KB image stored before eru limited them) shows its first 60 characters and its length; the
// whole value is in the tooltip (docs/cli.md "Limits").
function clip(text, keep = 60) {
  const value = text == null ? "" : String(text);
  if (value.length <= keep + 20) return value;
  return html`<span title=${value.slice(0, 2000)}>${value.slice(0, keep)}… (${value.length.toLocaleString("en")} characters)</span>`;
}
async function api(path, options) {
  const response = await fetch(path, { credentials: "same-origin", ...(options || {}) });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error((body.error && body.error.message) || `${response.status} ${response.statusText}`);
  return body;
}
function useDebounced(fn, ms) {
  const timer = useRef(null);
  const latest = useRef(fn);
  latest.current = fn;
  useEffect(() => () => clearTimeout(timer.current), []);
  return useCallback(() => {
    clearTimeout(timer.current);
    timer.current = setTimeout(() => latest.current(), ms);
  }, [ms]);
}
function useLoad(load, deps) {
  // Only the newest request's answer is shown: an older, slower answer (the filter as it was two keys ago) is dropped.
  const [state, setState] = useState({ data: null, error: null });
  const sequence = useRef(0);
  const reload = useCallback(() => {
    const mine = ++sequence.current;
    load().then(
      (data) => mine === sequence.current && setState({ data, error: null }),
      (error) => mine === sequence.current && setState((s) => ({ data: s.data, error: error.message })),
    );
  }, deps);
  useEffect(reload, [reload]);
  return [state, reload];
}
const GiB = 1024 ** 3;
function bytes(n) {
  if (n === null || n === undefined) return "–";
  if (n === 0) return "0";
  if (n >= GiB) return `${(n / GiB).toFixed(n % GiB ? 1 : 0)} GiB`;
  if (n >= 1024 ** 2) return `${Math.round(n / 1024 ** 2)} MiB`;
  return `${n} B`;
}
function num(x, digits = 2) {
  if (x === null || x === undefined || x === "") return "–";
  const v = Number(x);
  return Number.isInteger(v) ? String(v) : v.toFixed(digits).replace(/0+$/, "").replace(/\.$/, "");
}
function ago(iso) {
  if (!iso) return "never";
  const seconds = Math.max(0, (Date.now() - new Date(iso).getTime()) / 1000);
  if (seconds < 60) return `${Math.round(seconds)} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  return `${Math.round(seconds / 3600)} h ago`;
}
function clock(t) {
  const d = typeof t === "number" ? new Date(t * 1000) : new Date(t);
  return isNaN(d) ? "–" : d.toLocaleTimeString([], { hour12: false });
}
const pct = (x) => (x === null || x === undefined ? "–" : `${num(x, 1)}%`);
function short(id) {
  return id && id.length > 14 ? `…${id.slice(-8)}` : id;
}
function hue(id) {
  // FNV-1a over the whole id, spread by the golden angle: ids that share a prefix (UUIDv7) still differ in colour
  let h = 2166136261;
  for (const c of id || "") h = Math.imul(h ^ c.charCodeAt(0), 16777619) >>> 0;
  return Math.round((h % 1000) * 137.508) % 360;
}
const colour = (id) => `hsl(${hue(id)}, 65%, ${52 + (hue(id + "l") % 3) * 6}%)`;
// Tableau 10: containers of one node get distinct colours (by id order); more than ten fall back to the id's hue
const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#bab0ac"];
function palette(card) {
  const ids = [...new Set(card.cores.flatMap((core) => core.holders.map((h) => h.id)))].sort();
  const index = new Map(ids.map((id, i) => [id, i]));
  return (id) => (index.get(id) < PALETTE.length ? PALETTE[index.get(id)] : colour(id));
}
function value(key, v) {
  if (v === null || v === undefined) return "–";
  if (typeof v === "object") return JSON.stringify(v);
  if (typeof v !== "number") return String(v);
  return key.includes("memory") && !key.endsWith("_bound") ? bytes(v) : num(v);
}
const kv = (o) => Object.entries(o || {}).map(([k, v]) => `${k}=${value(k, v)}`).join("  ");
const Badge = ({ kind, children }) => html`<span class="badge ${kind || ""}">${children}</span>`;
const Empty = ({ children }) => html`<div class="empty">${children}</div>`;
const Err = ({ error }) => (error ? html`<div class="error" role="alert">${error}</div>` : null);

function Pager({ offset, limit, total, onChange }) {
  const last = Math.max(0, total - 1);
  return html`<div class="pager">
    <button disabled=${offset <= 0} onClick=${() => onChange(Math.max(0, offset - limit))}>‹ prev</button>
    <span>${total ? `${offset + 1}–${Math.min(offset + limit, total)} of ${total}` : "0 of 0"}</span>
    <button disabled=${offset + limit > last} onClick=${() => onChange(offset + limit)}>next ›</button>
  </div>`;
}

// ---------- Cluster ----------
function Band({ label, percent, reserved, bands, detail }) {
  // bands: [[from, to, cls, name]] in percent of capacity; percent: current usage; reserved: allocated share
  const known = percent !== null && percent !== undefined;
  return html`<div class="meter">
    <div class="meter-label"><span>${label}</span><span>${detail}</span></div>
    <div class="bar" title=${bands.map((b) => `${b[3]} ≥ ${b[0]}%`).join(", ")}>
      ${bands.map((b) => html`<div class="band ${b[2]}" style=${{ left: `${b[0]}%`, width: `${b[1] - b[0]}%` }}></div>`)}
      ${reserved ? html`<div class="reserved" style=${{ width: `${Math.min(100, reserved)}%` }}></div>` : null}
      ${known ? html`<div class="fill" style=${{ width: `${Math.min(100, percent)}%` }}></div>` : null}
      ${bands.map((b) => html`<div class="tick ${b[2]}" style=${{ left: `${b[0]}%` }}></div>`)}
    </div>
    <div class="meter-legend">${known ? `${num(percent, 1)}% used` : "no usage sample yet"}${reserved ? ` · ${num(reserved, 1)}% reserved` : ""}${bands.length
      ? html` · ${bands.map((b) => html`<span class="key ${b[2]}">${b[3]} ${b[0]}%</span> `)}` : " · no watermarks reported"}</div>
  </div>`;
}

function cpuBands(w) {
  if (w.cpu_forbid === undefined) return [];
  return [[w.cpu_forbid, w.cpu_suppress, "forbid", "forbid"], [w.cpu_suppress, w.cpu_evict, "suppress", "suppress"],
    [w.cpu_evict, 100, "evict", "evict"]].filter((b) => b[1] >= b[0]);
}
function memoryBands(w) {
  if (w.memory_forbid === undefined) return [];
  return [[w.memory_forbid, w.memory_evict, "forbid", "forbid"], [w.memory_evict, 100, "evict", "evict"]];
}

function CoreMap({ card, colourOf }) {
  return html`<div class="cores" aria-label="cores of ${card.name}">
    ${card.cores.map((core) => html`<div class="core" data-core=${core.core}
        title=${`core ${core.core}: ${core.holders.map((h) => `${short(h.id)} ${h.pieces}/${core.pieces}`).join(", ") || "free"}`}>
      ${core.holders.map((h) => html`<div class="piece ${h.whole ? "whole" : "fragment"}" data-container=${h.id}
          style=${{ width: `${(100 * h.pieces) / core.pieces}%`, background: colourOf(h.id) }}></div>`)}
      <span class="core-id">${core.core}</span>
    </div>`)}
  </div>`;
}

function Holders({ card, colourOf }) {
  const seen = new Map();
  for (const core of card.cores) for (const h of core.holders) {
    const entry = seen.get(h.id) || { ...h, cores: [] };
    entry.cores.push(h.whole ? core.core : `${core.core}:${h.pieces}`);
    seen.set(h.id, entry);
  }
  const items = [...seen.values()];
  if (!items.length && !card.shared.length) return html`<div class="muted small">no containers</div>`;
  return html`<ul class="holders">
    ${items.map((h) => html`<li data-container=${h.id}><i style=${{ background: colourOf(h.id) }}></i>
      <b>${h.workload || "?"}</b> <span class="muted">${short(h.id)} · ${h.class}</span> <span class="cores-of">${h.cores.join(" ")}</span></li>`)}
    ${card.shared.map((c) => html`<li data-container=${c.id}><i class="shared"></i><b>${c.workload || "?"}</b>
      <span class="muted">${short(c.id)} · ${c.class}</span> <span class="cores-of">shared ${num(c.cpu)} cores</span></li>`)}
  </ul>`;
}

function NodeCard({ card }) {
  const c = card.condition;
  const health = card.state === "up" ? "ok" : "bad";
  const memPercent = card.usage.memory_percent;
  const colourOf = palette(card);
  return html`<article class="card node" data-node=${card.name}>
    <header>
      <h3>${card.name}</h3>
      <div class="badges">
        <${Badge} kind="muted">${card.pod}<//>
        <${Badge} kind=${health}>${card.state}<//>
        ${card.cordoned ? html`<${Badge} kind="warn">cordoned<//>` : null}
        ${c.state === "unknown" ? null : html`<${Badge} kind=${c.state === "normal" ? "ok" : "warn"}>${c.state}<//>`}
      </div>
    </header>
    <div class="facts"><span>${num(card.cpu.bound)} / ${num(card.cpu.capacity)} cores bound</span>
      ${card.cpu.requested === null || card.cpu.requested === undefined ? null
        : html`<span>${num(card.cpu.requested)} cores requested${card.cpu.requested > card.cpu.capacity ? " (oversold)" : ""}</span>`}
      <span>${card.containers} container${card.containers === 1 ? "" : "s"}</span>
      <span class="muted">heartbeat ${ago(card.heartbeat_at)}</span></div>
    <${CoreMap} card=${card} colourOf=${colourOf} />
    <${Holders} card=${card} colourOf=${colourOf} />
    <${Band} label="CPU" percent=${card.usage.cpu_percent} bands=${cpuBands(card.watermarks)}
      reserved=${card.cpu.capacity ? (100 * card.cpu.reserved) / card.cpu.capacity : 0}
      detail=${c.forbid_cpu ? "forbid-schedule on" : card.usage.cpu_used === undefined ? "" : `${num(card.usage.cpu_used)} cores used`} />
    <${Band} label="Memory" percent=${memPercent} bands=${memoryBands(card.watermarks)}
      reserved=${card.memory.capacity ? (100 * card.memory.reserved) / card.memory.capacity : 0}
      detail=${`${c.forbid_memory ? "forbid-schedule on · " : ""}${bytes(card.memory.reserved)} / ${bytes(card.memory.capacity)} reserved`} />
    <div class="batch">${c.state === "unknown" ? "reclaimed for batch: not reported (no condition from the eviction service yet)"
      : html`reclaimed for batch: <b>${num(c.batch_cpu_capacity)}</b> cores, <b>${bytes(c.batch_memory_capacity)}</b>`}
      ${c.batch_cpu_allowed !== null && c.batch_cpu_allowed !== undefined ? html` · batch suppressed to <b>${num(c.batch_cpu_allowed)}</b> cores` : null}
      ${c.evicting.length ? html` · evicting ${c.evicting.length}` : null}</div>
  </article>`;
}

// A node's newest eviction condition patched into its card in place (what views.node_card computes on the server).
function withCondition(card, n) {
  const condition = {
    state: n.state || "normal", forbid_cpu: !!n.forbid_schedule_cpu, forbid_memory: !!n.forbid_schedule_memory,
    batch_cpu_allowed: n.batch_cpu_allowed, batch_cpu_capacity: n.batch_cpu_capacity,
    batch_memory_capacity: n.batch_memory_capacity, evicting: n.evicting || [],
  };
  const usage = { ...card.usage };
  for (const key of ["cpu_percent", "memory_percent"]) if (usage[key] === undefined && n[key] !== null && n[key] !== undefined) usage[key] = n[key];
  return { ...card, condition, usage, watermarks: n.watermarks || card.watermarks };
}

function Cluster() {
  const [typed, setTyped] = useState("");
  const [query, setQuery] = useState("");
  const applyFilter = useDebounced(() => { setQuery(typed); setOffset(0); }, 250);
  useEffect(applyFilter, [typed]);
  const [offset, setOffset] = useState(0);
  const limit = 24;
  const [state, reload] = useLoad(() => api(`/api/nodes?q=${encodeURIComponent(query)}&offset=${offset}&limit=${limit}`), [query, offset]);
  const [cards, setCards] = useState(null);
  useEffect(() => { if (state.data) setCards(state.data.cards); }, [state.data]);
  const refetch = useDebounced(reload, 300);
  useEffect(() => {
    const offs = [
      on("container", (e) => { if (!cards || cards.some((c) => c.name === e.node)) refetch(); }),
      on("resync", refetch),
      on("usage", (changed) => setCards((cs) => cs && cs.map((c) => (changed[c.name] ? { ...c, usage: { ...c.usage, ...changed[c.name] } } : c)))),
      on("condition", (e) => setCards((cs) => cs && cs.map((c) => (c.name === e.node ? withCondition(c, e.condition) : c)))),
    ];
    return () => offs.forEach((off) => off());
  }, [cards, refetch]);
  const data = state.data;
  return html`<section>
    <div class="toolbar">
      <input type="search" placeholder="filter nodes: name, pod, down, cordoned, forbid …" value=${typed}
        aria-label="filter nodes" onInput=${(e) => setTyped(e.target.value)} />
      ${data ? html`<${Pager} offset=${data.offset} limit=${limit} total=${data.matched} onChange=${setOffset} />` : null}
    </div>
    ${data ? html`<div class="summary">${data.total} nodes: ${Object.entries(data.states).map(([k, v]) => `${v} ${k}`).join(", ")}</div>` : null}
    <${Err} error=${state.error} />
    ${!data ? html`<p class="loading">loading nodes …</p>` : !cards || !cards.length ? html`<${Empty}>no node matches<//>`
      : html`<div class="grid">${cards.map((card) => html`<${NodeCard} key=${card.name} card=${card} />`)}</div>`}
  </section>`;
}

// ---------- Deploys ----------
function Progress({ done, failed, total }) {
  const t = Math.max(total, 1);
  return html`<div class="progress" title="${done} running, ${failed} failed of ${total}">
    <div class="done" style=${{ width: `${(100 * done) / t}%` }}></div>
    <div class="failed" style=${{ width: `${(100 * failed) / t}%` }}></div>
    <span>${done}/${total}</span></div>`;
}
const statusKind = (s) => ({ completed: "ok", failed: "bad", partial: "warn", waiting: "muted", planned: "info" }[s] || "info");

function Deploys() {
  const [query, setQuery] = useState("");
  const [cursor, setCursor] = useState(null); // null: the newest page; else the next_cursor of the page before
  const [state, reload] = useLoad(() => api(`/api/deploys?limit=200${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`), [cursor]);
  const refetch = useDebounced(reload, 400);
  useEffect(() => { const offs = [on("deploy", refetch), on("container", refetch), on("resync", refetch)]; return () => offs.forEach((o) => o()); }, [refetch]);
  const rows = ((state.data && state.data.deploys) || []).filter((d) =>
    !query || `${d.id} ${d.workload} ${d.pod} ${d.tenant} ${d.status} ${d.image}`.toLowerCase().includes(query.toLowerCase()));
  return html`<section>
    <div class="toolbar"><input type="search" placeholder="filter deploys: id, workload, pod, tenant, status …" value=${query}
      aria-label="filter deploys" onInput=${(e) => setQuery(e.target.value)} /></div>
    <${Err} error=${state.error} />
    ${!state.data ? html`<p class="loading">loading deploys …</p>` : !rows.length ? html`<${Empty}>no deploys yet<//>` : html`
    <div class="table-wrap"><table class="deploys">
      <thead><tr><th>deploy</th><th>workload</th><th class="wide-only">pod / tenant</th><th class="wide-only">class</th><th>status</th>
        <th>progress</th><th class="wide-only">created</th></tr></thead>
      <tbody>${rows.map((d) => html`<tr data-deploy=${d.id}>
        <td><a class="mono nowrap" href="#/deploys/${d.id}" title=${d.id}><span class="wide-only">${d.id.slice(0, 8)}</span>…${d.id.slice(-6)}</a></td>
        <td>${clip(d.workload)}<div class="muted small">${clip(d.image)}</div></td>
        <td class="wide-only">${clip(d.pod)}<div class="muted small">${clip(d.tenant)}</div></td><td class="wide-only">${d.class}</td>
        <td><${Badge} kind=${statusKind(d.status)}>${d.status}<//>${d.error ? html`<div class="muted small">${d.error}</div>` : null}</td>
        <td><${Progress} done=${d.running} failed=${d.failed} total=${Math.max(d.count, d.placed)} /></td>
        <td class="muted wide-only">${ago(d.created_at)}</td></tr>`)}</tbody></table></div>`}
    <div class="pager">
      <button disabled=${!cursor} onClick=${() => setCursor(null)}>‹ newest</button>
      <button disabled=${!(state.data && state.data.next_cursor)} onClick=${() => setCursor(state.data.next_cursor)}>older ›</button>
    </div>
  </section>`;
}

function ReplayButton({ decisionId }) {
  const [result, setResult] = useState(null);
  const [busy, setBusy] = useState(false);
  const run = () => {
    setBusy(true);
    api(`/api/replay/${encodeURIComponent(decisionId)}`, { method: "POST" })
      .then((r) => setResult(r), (e) => setResult({ error: e.message }))
      .finally(() => setBusy(false));
  };
  return html`<span class="replay">
    <button class="primary" onClick=${run} disabled=${busy}>${busy ? "replaying …" : "Replay"}</button>
    ${result && result.error ? html`<span class="error inline">${result.error}</span>` : null}
    ${result && !result.error ? html`<span class="verdict ${result.same ? "same" : "differs"}" data-verdict=${result.same ? "same" : "differs"}>
      ${result.same ? "same" : "differs"}</span>
      ${result.differences.length ? html`<ul class="diffs">${result.differences.map((d) => html`<li>${d}</li>`)}</ul>` : null}` : null}
  </span>`;
}

function Decision({ decision }) {
  if (!decision) return html`<${Empty}>no decision recorded for this deploy<//>`;
  return html`<div>
    <div class="facts"><span>decision <code>${decision.id}</code></span><span>mode ${decision.mode}</span><span>count ${decision.count}</span>
      <${ReplayButton} decisionId=${decision.id} /></div>
    ${decision.error ? html`<div class="error">${decision.error.code}: ${decision.error.message}</div>` : null}
    <h4>placed</h4>
    ${decision.placed.length ? html`<div class="table-wrap"><table><thead><tr><th>node</th><th>instances</th><th>room (instances)</th></tr></thead>
      <tbody>${decision.placed.map((p) => html`<tr><td class="nowrap">${p.node}</td><td>${p.instances}</td><td>${p.capacity}</td></tr>`)}</tbody></table></div>`
      : html`<${Empty}>nothing placed<//>`}
    <h4>not chosen (${decision.not_chosen_total}${Object.keys(decision.not_chosen_counts || {}).length ? ": " + Object.entries(decision.not_chosen_counts).map(([r, c]) => `${c} ${r}`).join(", ") : ""})</h4>
    ${decision.not_chosen.length ? html`<div class="table-wrap"><table><thead><tr><th>node</th><th>room (instances)</th><th>reason</th><th>why not</th><th>numbers</th></tr></thead>
      <tbody>${decision.not_chosen.map((n) => html`<tr data-not-chosen=${n.node}><td class="nowrap">${n.node}</td><td>${n.capacity === null || n.capacity === undefined ? "-" : n.capacity}</td>
        <td class="nowrap">${n.reason || ""}</td><td>${n.why}</td><td class="small mono">${kv(n.numbers)}</td></tr>`)}</tbody></table></div>` : html`<${Empty}>every node was used<//>`}
  </div>`;
}

function DeployPage({ id }) {
  const [state, reload] = useLoad(() => api(`/api/deploys/${encodeURIComponent(id)}`), [id]);
  const refetch = useDebounced(reload, 400);
  useEffect(() => {
    const offs = [on("deploy", (e) => e.deploy_id === id && refetch()), on("container", (e) => e.deploy_id === id && refetch())];
    return () => offs.forEach((o) => o());
  }, [id, refetch]);
  const data = state.data;
  if (!data) return html`<section><${Err} error=${state.error} />${state.error ? null : html`<p class="loading">loading …</p>`}</section>`;
  const d = data.deploy;
  const w = (d.request && d.request.workload) || {};
  const r = w.resources || {};
  return html`<section class="deploy-page">
    <p><a href="#/deploys">‹ all deploys</a></p>
    <h2>deploy <code>${d.id}</code> <${Badge} kind=${statusKind(d.status)}>${d.status}<//></h2>
    <${Err} error=${state.error} />
    <div class="card"><h3>request</h3>
      <div class="facts"><span>${clip(w.name)} · ${clip(w.image)}</span><span>pod ${d.pod}</span><span>tenant ${d.tenant}</span>
        <span>${d.request.count} × ${num(r.cpu_request)} cores${r.cpu_bind ? " (bound)" : ""}, ${typeof r.memory_request === "number" ? bytes(r.memory_request) : r.memory_request} memory</span>
        <span>mode ${d.request.mode}</span><span>class ${w.priority_class}</span></div>
      <details><summary>the whole request</summary><pre>${JSON.stringify(d.request, null, 2)}</pre></details></div>
    <div class="card"><h3>decision</h3><${Decision} decision=${data.decision} /></div>
    <div class="card"><h3>containers (${data.containers.length})</h3>
      ${data.containers.length ? html`<div class="table-wrap"><table><thead><tr><th>container</th><th>node</th><th>state</th><th>health</th><th>cores</th><th>memory</th></tr></thead>
      <tbody>${data.containers.map((c) => html`<tr data-container=${c.id}><td title=${c.id}>${short(c.id)}</td><td>${c.node}</td>
        <td><${Badge} kind=${c.state === "running" ? "ok" : c.state === "failed" ? "bad" : "info"}>${c.state}<//></td>
        <td>${c.health ? html`<${Badge} kind=${c.health === "healthy" ? "ok" : c.health === "unhealthy" ? "bad" : "info"}>${c.health}<//>` : html`<span class="muted">-</span>`}</td>
        <td class="mono">${Object.entries((c.allocation && c.allocation.cpu_map) || {}).map(([k, v]) => (v >= 100 ? k : `${k}:${v}`)).join(" ") || "shared"}</td>
        <td>${bytes(c.allocation && c.allocation.memory)}</td></tr>`)}</tbody></table></div>` : html`<${Empty}>no containers<//>`}</div>
    <div class="card"><h3>events (${data.events.length})</h3>
      <ol class="events">${data.events.map((e) => html`<li><span class="muted mono">${clock(e.time)}</span><b>${e.type}</b><span class="muted">${e.source}</span><details><summary>${e.subject}</summary><pre>${JSON.stringify(e.body, null, 2)}</pre></details></li>`)}</ol></div>
  </section>`;
}

// ---------- Evictions ----------
function Evictions() {
  const [state] = useLoad(() => api("/api/evictions"), []);
  const [live, setLive] = useState([]);
  useEffect(() => on("eviction", (e) => setLive((l) => [e, ...l].slice(0, 500))), []);
  const seen = new Set();
  const rows = [...live, ...((state.data && state.data.evictions) || [])].filter((e) => !seen.has(e.decision_id) && seen.add(e.decision_id));
  return html`<section>
    <${Err} error=${state.error} />
    ${!state.data ? html`<p class="loading">loading …</p>` : !rows.length ? html`<${Empty}>no eviction or suppression in the last hour<//>` : html`
    <div class="grid wide">${rows.map((e) => html`<article class="card eviction" data-decision=${e.decision_id} data-node=${e.node}>
      <header><h3>${e.node}</h3><div class="badges"><${Badge} kind=${e.kind === "evict" ? "bad" : "warn"}>${e.kind}<//>
        <span class="muted">${clock(e.time)}</span></div></header>
      <div class="facts"><span>reason <b>${e.reason}</b></span>${e.batch_cpu_allowed !== null && e.batch_cpu_allowed !== undefined ? html`<span>batch allowed ${num(e.batch_cpu_allowed)} cores</span>` : null}</div>
      ${e.victims.length ? html`<div class="table-wrap"><table><thead><tr><th>victim</th><th>reason</th><th>release</th><th>priority</th></tr></thead>
        <tbody>${e.victims.map((v) => html`<tr><td title=${v.container_id}>${short(v.container_id)}</td><td>${v.reason}</td>
          <td>${v.reason === "memory" ? bytes(v.release) : `${num(v.release)} cores`}</td><td>${v.priority}</td></tr>`)}</tbody></table></div>` : null}
      <div class="table-wrap"><table class="rates"><thead><tr><th></th><th>newest</th><th>window</th><th>line</th></tr></thead><tbody>
        <tr><td>satisfaction</td><td><b>${pct(e.newest.satisfaction_percent)}</b></td><td>${pct(e.cpu.window_satisfaction_percent)}</td>
          <td class="muted">${num(e.thresholds.satisfaction_lower)}–${num(e.thresholds.satisfaction_upper)}%</td></tr>
        <tr><td>node CPU</td><td><b>${pct(e.newest.node_cpu_percent)}</b></td><td>${pct(e.cpu.window_node_cpu_percent)}</td>
          <td class="muted">evict ≥ ${num(e.thresholds.cpu_evict)}%</td></tr>
        <tr><td>batch utilisation</td><td><b>${pct(e.newest.batch_util_percent)}</b></td><td>${pct(e.cpu.window_batch_util_percent)}</td>
          <td class="muted">≥ ${num(e.thresholds.batch_util_threshold)}%</td></tr>
        <tr><td>node memory</td><td><b>${pct(e.newest.node_memory_percent)}</b></td><td>–</td>
          <td class="muted">evict ≥ ${num(e.thresholds.memory_evict)}%</td></tr>
      </tbody></table></div>
      <div class="facts small"><span>window ${num(e.window.seconds)} s, ${e.window.samples} sample${e.window.samples === 1 ? "" : "s"}</span>
        ${e.window.first ? html`<span class="muted">${clock(e.window.first)} – ${clock(e.window.last)}</span>` : null}
        ${e.memory.release_bytes ? html`<span>memory to release ${bytes(e.memory.release_bytes)}</span>` : null}
        ${e.cpu.release_cores ? html`<span>CPU to release ${num(e.cpu.release_cores)} cores</span>` : null}</div>
      <div class="facts">${e.kind === "evict" ? html`<${ReplayButton} decisionId=${e.decision_id} />` : null}
        <a class="explain" href=${`#/evictions/${encodeURIComponent(e.decision_id)}`}>explain</a></div>
    </article>`)}</div>`}
  </section>`;
}

function ExplainPage({ id }) {
  const [state] = useLoad(() => api(`/api/explain/${encodeURIComponent(id)}`), [id]);
  const d = state.data;
  if (!d) return html`<section><${Err} error=${state.error} />${state.error ? null : html`<p class="loading">loading …</p>`}</section>`;
  const w = d.window;
  const n = w.newest || {};
  return html`<section class="explain-page" data-decision=${d.decision_id}>
    <p><a href="#/evictions">‹ all evictions</a></p>
    <h2>eviction decision <code>${d.decision_id}</code> <${Badge} kind=${d.event_kind === "evict" ? "bad" : "warn"}>${d.event_kind}<//></h2>
    <div class="card"><h3>node ${w.node}: ${d.action}</h3>
      <div class="facts"><span>window ${num(w.seconds)} s, ${w.samples} of ${num(w.expected)} samples${w.covered ? "" : " (not covered)"}</span>
        <span>cool-down left: cpu ${num(w.backoff.cpu_cooldown_left_seconds)} s, memory ${num(w.backoff.memory_cooldown_left_seconds)} s</span>
        ${d.same ? null : html`<span class="error inline">the recorded victims differ from the recomputed ones</span>`}</div>
      <div class="table-wrap"><table class="rates"><thead><tr><th></th><th>newest</th><th>window</th></tr></thead><tbody>
        <tr><td>node CPU</td><td>${pct(n.node_cpu_percent)}</td><td>${pct(w.window_node_cpu_percent)}</td></tr>
        <tr><td>satisfaction</td><td>${pct(n.satisfaction_percent)}</td><td>${pct(w.window_satisfaction_percent)}</td></tr>
        <tr><td>batch utilisation</td><td>${pct(n.batch_util_percent)}</td><td>${pct(w.window_batch_util_percent)}</td></tr>
        <tr><td>node memory</td><td>${pct(n.node_memory_percent)}</td><td>–</td></tr></tbody></table></div>
      <div class="facts small mono">${kv(w.watermarks)}</div></div>
    <div class="card"><h3>batch containers considered (${d.containers.length})</h3>
      ${d.containers.length ? html`<div class="table-wrap"><table><thead><tr><th>container</th><th>workload</th><th>priority</th><th>satisfaction</th>
        <th>work lost</th><th>budget left</th><th>chosen</th><th>why</th></tr></thead>
      <tbody>${d.containers.map((c) => html`<tr data-container=${c.id}><td title=${c.id}>${short(c.id)}</td><td>${c.workload || "–"}</td>
        <td>${c.priority}</td><td>${pct(c.satisfaction_percent)}</td><td>${num(c.work_lost)} CPU-s</td>
        <td>${c.budget_left === null ? "–" : c.budget_left}</td><td>${c.chosen ? html`<${Badge} kind="bad">chosen<//>` : "no"}</td>
        <td class="small">${c.why}</td></tr>`)}</tbody></table></div>` : html`<${Empty}>no batch container in the newest sample<//>`}</div>
  </section>`;
}

// ---------- Tenants ----------
function Tenants() {
  const [state, reload] = useLoad(() => api("/api/tenants"), []);
  const refetch = useDebounced(reload, 800);
  useEffect(() => { const offs = [on("deploy", refetch), on("container", refetch)]; return () => offs.forEach((o) => o()); }, [refetch]);
  const rows = (state.data && state.data.rows) || [];
  return html`<section>
    <${Err} error=${state.error} />
    ${state.data ? html`<div class="summary">capacity: ${state.data.message}</div>` : null}
    ${!state.data ? html`<p class="loading">loading …</p>` : !rows.length ? html`<${Empty}>no tenants<//>` : html`
    <div class="table-wrap"><table class="tenants"><thead><tr><th>tenant</th><th>weight</th><th>quota</th><th>limit</th><th>holds</th>
      <th>dominant share</th><th>waiting</th></tr></thead>
      <tbody>${rows.map((t) => html`<tr data-tenant=${t.name}><td><b>${t.name}</b></td><td>${num(t.weight)}</td>
        <td class="mono small">${kv(t.quota) || "–"}</td><td class="mono small">${kv(t.limit) || "–"}</td>
        <td class="mono small">${t.allocated && Object.keys(t.allocated).length ? kv(t.allocated) : "nothing"}
          <div class="muted">${t.allocations || 0} containers</div></td>
        <td><div class="share"><div style=${{ width: `${Math.min(100, 100 * (t.dominant_share || 0))}%` }}></div></div>
          ${num(t.dominant_share, 3)} <span class="muted">${t.dominant_resource || ""}</span></td>
        <td>${t.waiting ? html`<${Badge} kind="warn">${t.waiting}<//>` : "0"}</td></tr>`)}</tbody></table></div>`}
    ${(state.data && state.data.warnings || []).map((w) => html`<div class="muted small">${w}</div>`)}
  </section>`;
}

// ---------- Services ----------
function Services() {
  const [state, reload] = useLoad(() => api("/api/services"), []);
  useEffect(() => { const timer = setInterval(reload, 5000); return () => clearInterval(timer); }, [reload]);
  const data = state.data;
  return html`<section>
    <${Err} error=${state.error} />
    ${!data ? html`<p class="loading">asking the services …</p>` : html`
    <div class="card"><h3>services</h3><div class="table-wrap"><table class="services"><thead><tr><th>service</th><th>health</th><th>replicas</th><th>restarts</th></tr></thead>
      <tbody>${data.services.map((s) => html`<tr data-service=${s.service}><td><b>${s.service}</b></td>
        <td><${Badge} kind=${s.health === "ready" ? "ok" : s.health === "missing" ? "bad" : "warn"}>${s.health}<//>
          ${s.reasons.map((r) => html`<div class="muted small">${r}</div>`)}</td>
        <td>${s.replicas.length ? s.replicas.map((r) => html`<div class="replica"><span class="mono">${r.replica}</span><span>${r.version}</span>
          <${Badge} kind=${r.ready ? "ok" : "warn"}>${r.ready ? "ready" : "starting"}<//><span class="muted small">${r.load}</span>
          ${r.metrics_url ? html`<a class="small" href=${r.metrics_url} target="_blank" rel="noopener">metrics</a>` : null}</div>`)
          : html`<span class="muted">no replica answered $SRV.STATS</span>`}</td>
        <td>${s.restarts === null ? html`<span class="muted" title="this stack does not report restart counts">not reported</span>` : s.restarts}</td></tr>`)}
      </tbody></table></div></div>
    <div class="card"><h3>consumer backlog</h3>
    ${data.consumers === null ? html`<${Empty}>this account cannot read the consumers<//>` : data.consumers.length
      ? html`<div class="table-wrap"><table><thead><tr><th>consumer</th><th>stream</th><th>state</th><th>pending</th><th>in flight</th>
        <th>redelivered</th><th>oldest unacked</th><th>dead-lettered (1 min)</th></tr></thead>
      <tbody>${data.consumers.map((c) => html`<tr data-consumer=${c.name}><td class="mono">${c.name}</td><td>${c.stream}</td>
        <td><${Badge} kind=${c.state === "ok" ? "ok" : "warn"}>${c.state}<//>${c.reasons.map((r) => html`<div class="muted small">${r}</div>`)}</td>
        <td>${c.pending}</td><td>${c.ack_pending}</td><td>${c.redelivered}</td>
        <td>${c.oldest_unacked_seconds === null ? "–" : `${num(c.oldest_unacked_seconds, 1)} s`}</td><td>${c.dead_lettered_recently}</td></tr>`)}</tbody></table></div>`
      : html`<${Empty}>no durable consumers<//>`}</div>
    <div class="card"><h3>dead letters</h3>
    ${data.dead_letters === null ? html`<${Empty}>this stack has no dead-letter stream<//>` : data.dead_letters.total === 0
      ? html`<${Empty}>no dead letters<//>` : html`<div class="table-wrap"><table><thead><tr><th>subject</th><th>messages</th></tr></thead>
      <tbody>${Object.entries(data.dead_letters.subjects).map(([s, n]) => html`<tr><td class="mono">${s}</td><td>${n}</td></tr>`)}</tbody></table></div>`}</div>`}
  </section>`;
}

// ---------- shell ----------
const PAGES = [["cluster", "Cluster"], ["deploys", "Deploys"], ["evictions", "Evictions"], ["tenants", "Tenants"], ["services", "Services"]];
function route() {
  const parts = (location.hash || "#/cluster").replace(/^#\/?/, "").split("/");
  return { page: parts[0] || "cluster", id: parts[1] ? decodeURIComponent(parts[1]) : null };
}

function App() {
  const [where, setWhere] = useState(route());
  const [live, setLive] = useState(liveState);
  useEffect(() => { const f = () => setWhere(route()); addEventListener("hashchange", f); return () => removeEventListener("hashchange", f); }, []);
  useEffect(() => { const off = on("live", setLive); setLive(liveState); return off; }, []);
  let body;
  if (where.page === "deploys" && where.id) body = html`<${DeployPage} id=${where.id} />`;
  else if (where.page === "deploys") body = html`<${Deploys} />`;
  else if (where.page === "evictions" && where.id) body = html`<${ExplainPage} id=${where.id} />`;
  else if (where.page === "evictions") body = html`<${Evictions} />`;
  else if (where.page === "tenants") body = html`<${Tenants} />`;
  else if (where.page === "services") body = html`<${Services} />`;
  else body = html`<${Cluster} />`;
  return html`<div class="shell">
    <header class="top">
      <a class="logo" href="#/cluster"><img src="/static/favicon.svg" alt="" width="22" height="22" />eru</a>
      <nav>${PAGES.map(([key, label]) => html`<a href="#/${key}" class=${where.page === key ? "active" : ""} data-page=${key}>${label}</a>`)}</nav>
      <span class="live state-${live}" data-live=${live} title="live updates from the bus">${live}</span>
    </header>
    <main data-page=${where.page}>${body}</main>
  </div>`;
}

connect();
const root = document.getElementById("app");
root.textContent = "";
render(html`<${App} />`, root);
