// tandem's console: one stream of server-sent events (/console/events, see
// docs/CONSOLE.md) drives the fleet, the charts, the recent requests and the policy.
// No framework and no build step; common.js and chat.js load before it.
"use strict";

// ---- the events stream -----------------------------------------------------

function setConn(on, text) {
  $("conn").className = "dot " + (on ? "on" : "off");
  $("conn-text").textContent = text;
}

async function follow() {
  let backoff = 500;
  for (;;) {
    try {
      const resp = await fetch("/console/events", { headers: authHeaders({ Accept: "text/event-stream" }) });
      if (resp.status === 401) {
        setConn(false, "API key needed");
        await needKey(state.key ? "That key was refused." : "");
        continue;
      }
      if (!resp.ok) throw new Error("HTTP " + resp.status);
      setConn(true, "live");
      backoff = 500;
      await readSSE(resp, (name, data) => onEvent(name, JSON.parse(data)));
    } catch (e) {
      // A dropped connection is expected (restarts, sleep): say so and retry.
    }
    setConn(false, "reconnecting");
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(backoff * 2, 5000);
  }
}

function onEvent(name, data) {
  switch (name) {
    case "hello":
      state.hello = data;
      $("version").textContent = data.version || "dev";
      if (data.model) $("model").textContent = data.model;
      renderPolicy();
      if (state.fleet) renderPlanner();
      break;
    case "fleet":
      state.fleet = data;
      renderFleet();
      renderPlanner();
      renderPolicy();
      break;
    case "history":
      state.ticks = data.ticks || [];
      state.requests = (data.requests || []).slice().reverse();
      renderRequests();
      renderTicks();
      break;
    case "tick":
      state.live = { local: 0, remote: 0, fallback: 0, requests: 0, tokens: 0, expected: 0, found: 0, reasons: {} };
      state.ticks.push(data);
      if (state.ticks.length > HISTORY) state.ticks.shift();
      renderTicks();
      break;
    case "request": {
      state.requests.unshift(data);
      if (state.requests.length > REQUESTS) state.requests.pop();
      const l = state.live;
      if (data.path in l) l[data.path]++;
      l.requests++;
      l.tokens += data.completion_tokens;
      l.expected += data.route_cached_tokens;
      l.found += data.decode_cached_tokens;
      const k = data.path + "/" + data.reason;
      l.reasons[k] = (l.reasons[k] || 0) + 1;
      renderRequests(true);
      renderTicks();
      break;
    }
      break;
  }
}

// ---- fleet ---------------------------------------------------------------

function policyText(p) {
  if (!p) return "–";
  if (p.policy === "threshold") return "threshold ≤ " + p.short_prefill_threshold;
  return p.policy;
}

function renderFleet() {
  const f = state.fleet;
  const body = $("fleet-body");
  const banner = $("fleet-banner");
  banner.hidden = f.connected;
  banner.textContent = f.connected ? "" : "Router unreachable — " + (f.error || "connecting") + ". Showing the last fleet known.";
  body.replaceChildren();
  if (!f.workers.length) {
    body.append(el("tr", {}, el("td", { colSpan: 9, class: "empty", text: f.connected ? "The router knows no worker." : "Waiting for the router…" })));
  }
  let used = 0, total = 0;
  for (const w of f.workers) {
    used += w.kv_used_blocks;
    total += w.kv_total_blocks;
    const st = w.draining ? "draining" : "serving";
    const pct = Math.round(w.kv_usage * 100);
    const fill = el("div", { class: "fill" + (pct >= 85 ? " high" : "") });
    fill.style.width = pct + "%";
    const kv = w.reported
      ? el("div", { class: "kvbar" }, el("div", { class: "track" }, fill),
        el("span", { text: pct + "% · " + fmtNum(w.kv_used_blocks) + " / " + fmtNum(w.kv_total_blocks) }))
      : el("span", { class: "empty", text: "no report yet" });
    const stateCell = el("td", {}, pill(st, st));
    if (!w.synced) stateCell.append(" ", pill("resync", "resync"));
    if (w.lending) stateCell.append(" ", pill("lending", "lending"));
    if (w.role) stateCell.append(" ", pill(w.role + " role", "role " + w.role));
    body.append(el("tr", { class: w.draining ? "draining" : "", "data-worker": w.id, "data-state": st, "data-role": w.role || "",
      "data-running": w.running, "data-routed": w.routed, "data-cached": w.cached_blocks },
      el("td", { class: "id" }, w.id + " ", pill(w.mode, "mode"), el("div", { class: "addr", text: w.address })),
      stateCell,
      el("td", { class: "num", text: fmtNum(w.running) }),
      el("td", { class: "num", text: fmtNum(w.waiting) }),
      el("td", { class: "num", text: fmtNum(w.waiting_tokens) }),
      el("td", { class: "kv", "data-used": w.kv_used_blocks }, kv),
      w.no_kv_events
        ? el("td", { class: "num empty", text: "unknown", title: "The engine reports no KV events: the router scores this worker on load alone." })
        : el("td", { class: "num", text: fmtNum(w.cached_blocks) }),
      el("td", { class: "num", text: fmtNum(w.routed) }),
      el("td", { text: w.mode === "prefill" ? "–" : policyText(w.prefill_policy) })));
  }
  const draining = f.workers.filter((w) => w.draining).length;
  $("fleet-summary").textContent = f.workers.length + " workers" + (draining ? ", " + draining + " draining" : "") +
    (total ? " · KV " + Math.round((100 * used) / total) + "% used" : "") + " · index " + fmtNum(f.index_blocks) + " blocks" +
    " · block " + f.block_size + " tokens";
}

// ---- decisions and latency -------------------------------------------------

function windowTicks() {
  const n = (state.hello && state.hello.window_seconds) || 60;
  return state.ticks.slice(-n);
}

function renderTicks() {
  const last = state.ticks[state.ticks.length - 1];
  const win = windowTicks();
  const l = state.live;
  const sum = { local: l.local, remote: l.remote, fallback: l.fallback, requests: l.requests, tokens: l.tokens };
  const reasons = Object.assign({}, l.reasons);
  for (const t of win) {
    sum.local += t.paths.local;
    sum.remote += t.paths.remote;
    sum.fallback += t.paths.fallback;
    sum.requests += t.requests;
    sum.tokens += t.tokens;
    for (const [k, v] of Object.entries(t.reasons)) reasons[k] = (reasons[k] || 0) + v;
  }
  const secs = Math.max(win.length, 1);
  $("n-local").textContent = fmtNum(sum.local);
  $("n-remote").textContent = fmtNum(sum.remote);
  $("n-fallback").textContent = fmtNum(sum.fallback);
  $("rps").textContent = fmtNum(sum.requests / secs);
  $("tps").textContent = fmtNum(sum.tokens / secs);
  const r = $("reasons");
  r.replaceChildren();
  for (const [k, v] of Object.entries(reasons).sort((a, b) => b[1] - a[1]).slice(0, 8)) {
    const [path, why] = k.split("/");
    r.append(el("span", { title: k }, pill(path), " " + (why || "(no reason)") + " ", el("b", { text: String(v) })));
  }
  if (!last) return;
  $("model").textContent = last.model || "…";
  const c = { expected_tokens: last.cache.expected_tokens + l.expected, found_tokens: last.cache.found_tokens + l.found };
  $("cache-check").textContent = c.expected_tokens || c.found_tokens
    ? fmtNum(c.found_tokens) + " of " + fmtNum(c.expected_tokens) + " expected tokens found" +
      (c.expected_tokens ? " (" + Math.round((100 * c.found_tokens) / c.expected_tokens) + "%)" : "")
    : "no cached prefix yet";
  for (const k of ["p50", "p90", "p99"]) {
    $("ttft-" + k).textContent = last.ttft_ms.count ? fmtMs(last.ttft_ms[k]) : "–";
    $("itl-" + k).textContent = last.itl_ms.count ? fmtMs(last.itl_ms[k]) : "–";
  }
  const w = (state.hello && state.hello.window_seconds) || 60;
  $("latency-note").textContent = "Percentiles over the last " + w + " s (" + last.ttft_ms.count +
    " requests), as the frontend measured them: TTFT from arrival to first token, ITL the mean gap between a request's tokens.";
  const rp = state.fleet && state.fleet.router;
  $("gate").textContent = rp
    ? rp.isl_gate
      ? "ISL gating on: prompts with fewer than " + rp.isl_threshold_in_force + " uncached tokens go to workers that prefill locally" +
        (rp.isl_adaptive ? " (adaptive, " + rp.isl_min + "–" + rp.isl_max + ")" : "") + "."
      : "ISL gating off: every decode worker is scored for every request."
    : "";
  drawDecisions();
  drawLatency();
}

// canvas sizes a canvas for the screen's pixel density and returns its context
// and CSS size.
function canvas(id) {
  const c = $(id);
  const dpr = window.devicePixelRatio || 1;
  const w = c.clientWidth, h = c.clientHeight;
  if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
    c.width = Math.round(w * dpr);
    c.height = Math.round(h * dpr);
  }
  const g = c.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  g.font = "11px system-ui, sans-serif";
  return { g, w, h };
}

// frame draws a chart's time axis and returns its plot area.
function frame(g, w, h) {
  const f = { left: 58, top: 6, bottom: h - 16, right: w };
  g.fillStyle = "#6b7785";
  g.textAlign = "left";
  g.fillText("−" + HISTORY / 60 + " min", f.left, h - 2);
  g.textAlign = "right";
  g.fillText("now", w, h - 2);
  return f;
}

// grid draws a horizontal line and its label at each [y, text].
function grid(g, f, lines) {
  g.strokeStyle = "#eef0f3";
  g.fillStyle = "#6b7785";
  g.textAlign = "right";
  for (const [y, text] of lines) {
    g.beginPath();
    g.moveTo(f.left, Math.round(y) + 0.5);
    g.lineTo(f.right, Math.round(y) + 0.5);
    g.stroke();
    g.fillText(text, f.left - 6, y + 4);
  }
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function drawDecisions() {
  const { g, w, h } = canvas("decisions-chart");
  let max = 0;
  for (const t of state.ticks) max = Math.max(max, t.paths.local + t.paths.remote + t.paths.fallback + t.paths.unknown);
  max = niceMax(max);
  const a = frame(g, w, h);
  grid(g, a, [0, 1, 2, 3].map((i) => [a.bottom - ((a.bottom - a.top) * i) / 3, fmtNum((max * i) / 3) + "/s"]));
  const bw = (w - a.left) / HISTORY;
  const scale = (a.bottom - a.top) / max;
  const colors = { local: "#16a34a", remote: "#2563eb", fallback: "#ea580c", unknown: "#9aa5b1" };
  state.ticks.forEach((t, i) => {
    const x = a.left + (HISTORY - state.ticks.length + i) * bw;
    let y = a.bottom;
    for (const k of ["local", "remote", "fallback", "unknown"]) {
      const bh = t.paths[k] * scale;
      if (!bh) continue;
      g.fillStyle = colors[k];
      g.fillRect(x, y - bh, Math.max(bw - 0.5, 1), bh);
      y -= bh;
    }
  });
}

function drawLatency() {
  const { g, w, h } = canvas("latency-chart");
  const series = [
    ["ttft_ms", "p50", "#2563eb"], ["ttft_ms", "p99", "#93c5fd"],
    ["itl_ms", "p50", "#7c3aed"], ["itl_ms", "p99", "#c4b5fd"],
  ];
  // A log scale: TTFT and ITL differ by orders of magnitude.
  let lo = Infinity, hi = 0;
  for (const t of state.ticks) {
    for (const [s, p] of series) {
      if (t[s].count && t[s][p] > 0) {
        lo = Math.min(lo, t[s][p]);
        hi = Math.max(hi, t[s][p]);
      }
    }
  }
  if (!hi) [lo, hi] = [1, 1000];
  const d0 = Math.floor(Math.log10(lo)), d1 = Math.max(Math.ceil(Math.log10(hi)), d0 + 1);
  const a = frame(g, w, h);
  const yOf = (v) => a.bottom - ((Math.log10(Math.max(v, Math.pow(10, d0))) - d0) / (d1 - d0)) * (a.bottom - a.top);
  const lines = [];
  for (let d = d0; d <= d1; d++) {
    const v = Math.pow(10, d);
    lines.push([yOf(v), v >= 1000 ? v / 1000 + " s" : v + " ms"]);
  }
  grid(g, a, lines);
  const step = (w - a.left) / HISTORY;
  for (const [s, p, color] of series) {
    g.strokeStyle = color;
    g.lineWidth = 1.75;
    g.beginPath();
    let pen = false, last = null;
    state.ticks.forEach((t, i) => {
      const v = t[s][p];
      if (!t[s].count) { pen = false; return; }
      const x = a.left + (HISTORY - state.ticks.length + i + 0.5) * step;
      const y = yOf(v);
      if (pen) g.lineTo(x, y); else g.moveTo(x, y);
      pen = true;
      last = [x, y];
    });
    g.stroke();
    if (last) {
      // The newest value as a dot: a lone sample is otherwise invisible.
      g.fillStyle = color;
      g.beginPath();
      g.arc(last[0], last[1], 2.5, 0, 2 * Math.PI);
      g.fill();
    }
  }
  g.lineWidth = 1;
}

// ---- recent requests -------------------------------------------------------

function renderRequests(fresh) {
  const body = $("requests-body");
  body.replaceChildren();
  if (!state.requests.length) {
    body.append(el("tr", {}, el("td", { colSpan: 10, class: "empty", text: "No request yet." })));
    return;
  }
  state.requests.forEach((r, i) => {
    const time = new Date(r.time).toLocaleTimeString([], { hour12: false });
    const cached = (r.route_cached_tokens || 0) + " / " + (r.decode_cached_tokens || 0);
    const workers = (r.decode_worker || "?") + (r.prefill_worker ? " ← " + r.prefill_worker : "");
    body.append(el("tr", { class: fresh && i === 0 ? "fresh" : "", "data-request": r.id, title: "request " + r.id },
      el("td", { text: time }),
      el("td", {}, pill(r.path)),
      el("td", { class: "reason", text: r.reason || "–", title: r.detail || "" }),
      el("td", { text: workers, title: r.route_reason || "" }),
      el("td", { class: "num", text: fmtNum(r.prompt_tokens) }),
      el("td", { class: "num", text: cached }),
      el("td", { class: "num", text: fmtNum(r.completion_tokens) }),
      el("td", { class: "num", text: r.ttft_ms ? fmtMs(r.ttft_ms) : "–" }),
      el("td", { class: "num", text: r.itl_ms ? fmtMs(r.itl_ms) : "–" }),
      el("td", { text: r.finish || "failed" })));
  });
}

// ---- policy ----------------------------------------------------------------

function dl(target, pairs) {
  target.replaceChildren();
  for (const [k, v] of pairs) target.append(el("dt", { text: k }), el("dd", { text: String(v) }));
}

// decodePolicy is the decode workers' policy, and whether they disagree.
function decodePolicy() {
  const ps = ((state.fleet && state.fleet.workers) || []).filter((w) => w.prefill_policy).map((w) => w.prefill_policy);
  const mixed = ps.some((p) => JSON.stringify(p) !== JSON.stringify(ps[0]));
  return { p: ps[0], mixed };
}

function renderPolicy() {
  const rp = state.fleet && state.fleet.router;
  if (rp) {
    dl($("router-policy"), [
      ["prefill_weight", rp.prefill_weight], ["queue_weight", rp.queue_weight], ["temperature", rp.temperature],
      ["isl_gate", rp.isl_gate ? "on" : "off"],
      ["isl_threshold", rp.isl_threshold + (rp.isl_threshold_in_force !== rp.isl_threshold ? " (in force " + rp.isl_threshold_in_force + ")" : "")],
      ["isl_adaptive", rp.isl_adaptive ? "on (" + rp.isl_min + "–" + rp.isl_max + ")" : "off"],
      ["lenders_prefill_first", rp.lenders_prefill_first ? "on" : "off"],
    ]);
  }
  const { p, mixed } = decodePolicy();
  if (p) {
    dl($("decode-policy"), [
      ["policy", p.policy + (mixed ? " (workers differ)" : "")], ["short_prefill_threshold", p.short_prefill_threshold],
      ["itl_weight", p.itl_weight], ["max_prefill_queue_tokens", p.max_prefill_queue_tokens || "none"],
      ["enforce_disagg", p.enforce_disagg ? "on" : "off"],
    ]);
  }
  if (!state.hello) return;
  const writable = state.hello.policy_writable;
  $("policy-edit").hidden = !writable;
  $("policy-note").textContent = writable
    ? "Changes go to Consul KV (tandem/config/router, tandem/config/decode), checked as tandem config set checks them; the services apply them within a second."
    : "Read-only: this deployment keeps no runtime policy. Start the router and workers with --consul to change it live.";
}

function fillPolicyForm() {
  const form = $("policy-form");
  const rp = (state.fleet && state.fleet.router) || {};
  const { p } = decodePolicy();
  const values = Object.assign({}, rp, p || {});
  for (const input of form.querySelectorAll("input, select")) {
    const v = values[input.name];
    if (v === undefined) continue;
    if (input.type === "checkbox") input.checked = !!v;
    else input.value = v;
  }
}

$("policy-edit").addEventListener("click", () => {
  const form = $("policy-form");
  form.hidden = !form.hidden;
  if (!form.hidden) fillPolicyForm();
});

$("policy-form").addEventListener("click", async (ev) => {
  const target = ev.target.dataset && ev.target.dataset.target;
  if (!target) return;
  const value = {};
  for (const input of ev.target.closest("fieldset").querySelectorAll("input, select")) {
    if (input.type === "checkbox") value[input.name] = input.checked;
    else if (input.type === "number") value[input.name] = input.value === "" ? undefined : Number(input.value);
    else value[input.name] = input.value;
  }
  const out = $("policy-result");
  out.className = "form-result";
  out.textContent = "Applying…";
  try {
    const resp = await fetch("/console/policy", {
      method: "POST", headers: authHeaders({ "Content-Type": "application/json" }), body: JSON.stringify({ target, value }),
    });
    const answer = await resp.json().catch(() => ({}));
    if (resp.status === 401) await needKey("That key was refused.");
    if (!resp.ok) throw new Error((answer.error && answer.error.message) || "HTTP " + resp.status);
    out.className = "form-result ok";
    out.textContent = "Written to Consul; " + (target === "router" ? "the router applies" : "the decode workers apply") +
      " it within a second (watch the values above).";
  } catch (e) {
    out.className = "form-result bad";
    out.textContent = e.message;
  }
});

window.addEventListener("resize", () => { drawDecisions(); drawLatency(); });
if (state.key) $("key-button").hidden = false;
renderPolicy();
follow();
