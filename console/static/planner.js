// The planner's card: the plan the router applies (from the fleet event's
// planner field, docs/CONSOLE.md), why, the operator's pin, and the last
// switches; with Consul, buttons that pin the shape or unpin it through
// POST /console/policy, as tandem config set planner does.
"use strict";

function plannerShape(p) {
  if (!p.prefill_workers) return p.decode_workers + " aggregated, every prompt prefilled where it is decoded";
  return p.prefill_workers + " prefill / " + p.decode_workers + " decode, prompts of " + fmtNum(p.isl_threshold) + "+ uncached tokens prefilled remotely";
}

function pinText(pin) {
  if (!pin) return "pinned";
  if (pin.current) return "pinned where it was";
  return "pinned at " + pin.prefill + " prefilling" + (pin.prefill ? " from " + fmtNum(pin.isl_threshold) + " tokens" : "");
}

function ago(ms) {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 90) return s + " s ago";
  if (s < 5400) return Math.round(s / 60) + " min ago";
  return Math.round(s / 3600) + " h ago";
}

function rolesText(roles) {
  const ids = Object.keys(roles || {}).sort();
  return ids.length ? ids.map((id) => id + " " + roles[id]).join(", ") : "–";
}

function renderPlanner() {
  const p = state.fleet && state.fleet.planner;
  $("planner-card").hidden = !p;
  if (!p) return;
  $("planner-shape").textContent = plannerShape(p);
  const st = $("planner-state");
  st.replaceChildren(p.pinned ? pill(pinText(p.pin), "pinned") : pill("deciding", "serving"));
  st.dataset.pinned = p.pinned ? "true" : "false";
  $("planner-rate").textContent = fmtNum(p.arrival_rate);
  $("planner-capacity").textContent = fmtNum(p.projected_capacity) + " / " + fmtNum(p.best_capacity) + " req/s";
  $("planner-reason").textContent = p.reason;
  $("planner-source").textContent = (p.source === "planner" ? "this router's planner" : "followed from Consul (tandem/planner/plan)") +
    " · decided " + ago(p.decided);
  const body = $("planner-switches-body");
  body.replaceChildren();
  if (!p.switches.length) body.append(el("tr", {}, el("td", { colSpan: 4, class: "empty", text: "No switch yet." })));
  for (const s of p.switches) {
    body.append(el("tr", { "data-switch": s.time },
      el("td", { text: new Date(s.time).toLocaleTimeString([], { hour12: false }) }),
      el("td", { text: rolesText(s.roles) }),
      el("td", { class: "num", text: s.isl_threshold ? fmtNum(s.isl_threshold) : "–" }),
      el("td", { class: "reason", text: (s.pinned ? "[pin] " : "") + s.reason, title: s.reason })));
  }
  const writable = !!(state.hello && state.hello.policy_writable);
  $("planner-pin").hidden = !writable || p.pinned;
  $("planner-unpin").hidden = !writable || !p.pinned;
}

async function setPin(value) {
  const out = $("planner-result");
  out.className = "form-result";
  out.textContent = "Applying…";
  try {
    const resp = await fetch("/console/policy", {
      method: "POST", headers: authHeaders({ "Content-Type": "application/json" }), body: JSON.stringify({ target: "planner", value }),
    });
    const answer = await resp.json().catch(() => ({}));
    if (resp.status === 401) await needKey("That key was refused.");
    if (!resp.ok) throw new Error((answer.error && answer.error.message) || "HTTP " + resp.status);
    out.className = "form-result ok";
    out.textContent = "Written to tandem/config/planner; the planner applies it at its next decision.";
  } catch (e) {
    out.className = "form-result bad";
    out.textContent = e.message;
  }
}

$("planner-pin").addEventListener("click", () => setPin({ pin: { current: true } }));
$("planner-unpin").addEventListener("click", () => setPin({ pin: null }));
