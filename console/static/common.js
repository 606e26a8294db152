// Shared by the console's scripts (loaded first): the page's state, DOM and
// formatting helpers, the server-sent-events reader and the API key.
"use strict";


const $ = (id) => document.getElementById(id);
const HISTORY = 300; // seconds of ticks kept, as the server keeps them
const REQUESTS = 50;

const state = {
  key: sessionStorage.getItem("tandem-key") || "",
  hello: null,
  fleet: null,
  ticks: [],
  // live counts the requests since the last tick, so that a decision shows at
  // once rather than at the end of its second.
  live: { local: 0, remote: 0, fallback: 0, requests: 0, tokens: 0, expected: 0, found: 0, reasons: {} },
  requests: [],
  conversation: [],
};

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) if (c != null) e.append(c);
  return e;
}

function authHeaders(extra) {
  const h = Object.assign({}, extra);
  if (state.key) h.Authorization = "Bearer " + state.key;
  return h;
}

function fmtMs(v) {
  if (v == null || Number.isNaN(v)) return "–";
  if (v === 0) return "0";
  if (v < 1) return v.toFixed(2) + " ms";
  if (v < 1000) return v.toFixed(v < 10 ? 1 : 0) + " ms";
  return (v / 1000).toFixed(2) + " s";
}

function fmtNum(v) {
  return v == null ? "–" : Number(v).toLocaleString("en-US", { maximumFractionDigits: 2 });
}

function pill(text, cls) {
  return el("span", { class: "pill " + (cls || text), text });
}

// readSSE calls onEvent(name, data) for each server-sent event of a fetch
// response, until the stream ends. (EventSource cannot send an API key.)
async function readSSE(resp, onEvent) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) onEvent(name, data.join("\n"));
    }
  }
}

// ---- API key -------------------------------------------------------------

let keyWaiters = [];

// needKey shows the key dialog and resolves once the user has given one.
function needKey(message) {
  const dialog = $("key-dialog");
  $("key-error").textContent = message || "";
  $("key-button").hidden = false;
  if (!dialog.open) dialog.showModal();
  return new Promise((resolve) => keyWaiters.push(resolve));
}

$("key-form").addEventListener("submit", () => {
  state.key = $("key-input").value.trim();
  sessionStorage.setItem("tandem-key", state.key);
  const waiters = keyWaiters;
  keyWaiters = [];
  waiters.forEach((w) => w());
});
$("key-button").addEventListener("click", () => needKey(""));
