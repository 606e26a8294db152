// The chat: it talks to the OpenAI API like any client, streaming, and shows with
// each reply how its prompt was prefilled and where it ran.
"use strict";

function addMessage(role, text) {
  $("chat-empty").hidden = true;
  const bubble = el("div", { class: "bubble", text });
  const msg = el("div", { class: "msg " + role }, bubble);
  $("messages").append(msg);
  msg.scrollIntoView({ block: "end" });
  return msg;
}

function metaLine(info, stats) {
  const m = el("div", { class: "meta" });
  if (info) {
    const p = pill(info.prefill_path || "unknown", info.prefill_path);
    p.title = info.prefill_detail || "";
    m.append(p, el("span", { text: info.prefill_reason || "" }));
    const where = el("span", { title: info.route_reason || "" }, "decode ", el("b", { text: info.decode_worker || "?" }));
    if (info.prefill_worker) where.append(" ← prefill ", el("b", { text: info.prefill_worker }));
    m.append(where);
  }
  if (stats) {
    if (stats.ttft) m.append(el("span", {}, "TTFT ", el("b", { text: fmtMs(stats.ttft) })));
    if (stats.tps) m.append(el("span", {}, el("b", { text: stats.tps.toFixed(1) }), " tok/s"));
    if (stats.usage) {
      const u = stats.usage;
      const cached = (u.prompt_tokens_details && u.prompt_tokens_details.cached_tokens) || 0;
      m.append(el("span", {}, "cached ", el("b", { text: cached + " / " + u.prompt_tokens }), " prompt tokens"));
      m.append(el("span", {}, el("b", { text: String(u.completion_tokens) }), " tokens out"));
    }
  }
  return m;
}

async function send(text) {
  state.conversation.push({ role: "user", content: text });
  addMessage("user", text);
  const msg = addMessage("assistant", "");
  msg.classList.add("streaming");
  const bubble = msg.querySelector(".bubble");
  let chunks = 0, info = null, usage = null, first = 0;
  const start = performance.now();
  const body = {
    messages: state.conversation, stream: true, stream_options: { include_usage: true },
    max_tokens: Number($("max-tokens").value) || 96, temperature: Number($("temperature").value),
  };
  try {
    let resp;
    for (;;) {
      resp = await fetch("/v1/chat/completions", {
        method: "POST", headers: authHeaders({ "Content-Type": "application/json" }), body: JSON.stringify(body),
      });
      if (resp.status !== 401) break;
      await needKey(state.key ? "That key was refused." : "");
    }
    if (!resp.ok) {
      const e = await resp.json().catch(() => ({}));
      throw new Error((e.error && e.error.message) || "HTTP " + resp.status);
    }
    await readSSE(resp, (_, data) => {
      if (data === "[DONE]") return;
      const c = JSON.parse(data);
      if (c.error) throw new Error(c.error.message);
      if (c.tandem) {
        info = c.tandem;
        msg.dataset.path = info.prefill_path || "unknown";
        msg.append(metaLine(info));
      }
      if (c.usage) usage = c.usage;
      for (const ch of c.choices || []) {
        const d = ch.delta && ch.delta.content;
        if (!d) continue;
        if (!first) first = performance.now();
        bubble.textContent += d;
        msg.dataset.chunks = String(++chunks);
      }
      $("messages").scrollTop = $("messages").scrollHeight;
    });
    const end = performance.now();
    const tps = usage && first && end > first ? (usage.completion_tokens - 1) / ((end - first) / 1000) : 0;
    msg.querySelector(".meta")?.remove();
    msg.append(metaLine(info, { ttft: first ? first - start : 0, tps: tps > 0 ? tps : 0, usage }));
    state.conversation.push({ role: "assistant", content: bubble.textContent });
    msg.dataset.done = "true";
  } catch (e) {
    msg.classList.add("failed");
    bubble.textContent = (bubble.textContent ? bubble.textContent + "\n\n" : "") + "Error: " + e.message;
    state.conversation.pop();
    msg.dataset.done = "error";
  } finally {
    msg.classList.remove("streaming");
  }
}

$("chat-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const input = $("chat-input");
  const text = input.value.trim();
  if (!text) return;
  input.value = "";
  $("chat-send").disabled = true;
  try {
    await send(text);
  } finally {
    $("chat-send").disabled = false;
    input.focus();
  }
});

$("chat-input").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) {
    ev.preventDefault();
    $("chat-form").requestSubmit();
  }
});

$("chat-clear").addEventListener("click", () => {
  state.conversation = [];
  $("messages").replaceChildren($("chat-empty"));
  $("chat-empty").hidden = false;
});
