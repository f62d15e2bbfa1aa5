// The console: hash routes (#/, #/run/PLURAL/NS/NAME, #/new, #/chat), one live event stream
// for all of them, and every write made by the API as the signed-in user.

import { ApiError, call, subscribe, token } from "./api.js";
import { age, append, clear, cost, h } from "./dom.js";
import { markdown } from "./markdown.js";

const main = document.getElementById("main");
const state = { me: null, onRun: null, stop: null, draft: "" };

function runPath(row) {
  const plural = row.kind === "Conversation" ? "conversations" : "investigations";
  return `${plural}/${row.namespace}/${row.name}`;
}

function show(...children) {
  clear(main);
  append(main, children);
}

function failure(error) {
  return h("p", { class: "error", role: "alert" }, error instanceof Error ? error.message : String(error));
}

// -- sign-in -------------------------------------------------------------------------------------

function signIn(reason) {
  show(h("section", { class: "card signin" },
    h("h2", {}, "Sign in"),
    reason ? h("p", { class: "error" }, reason) : null,
    h("p", {}, "Paste a Kubernetes bearer token (",
      h("code", {}, "kubectl create token NAME"), ") or a Lestrade API key. It stays in this tab only."),
    h("form", { id: "signin", onsubmit: (e) => {
      e.preventDefault();
      token.set(e.target.elements.token.value);
      start();
    } },
      h("textarea", { name: "token", id: "token", rows: 4, required: true, autocomplete: "off" }),
      h("button", { type: "submit" }, "Sign in"))));
}

async function start() {
  try {
    state.me = await call("GET", "/api/whoami");
  } catch (error) {
    if (error instanceof ApiError && (error.status === 401 || error.status === 403)) {
      token.clear();
      return signIn(error.status === 403 ? error.message : null);
    }
    return show(failure(error));
  }
  document.getElementById("who").textContent = state.me.user ? `signed in as ${state.me.user}` : "authentication off";
  document.getElementById("signout").hidden = !token.get();
  state.stop?.();
  state.stop = subscribe("/api/console/events",
    (name, row) => { if (name === "run" || name === "deleted") state.onRun?.(name, row); },
    () => state.onOpen?.(),
    (live) => document.getElementById("live").classList.toggle("on", live));
  route();
}

document.getElementById("signout").addEventListener("click", () => {
  token.clear();
  state.stop?.();
  location.hash = "#/";
  location.reload();
});

// -- the list --------------------------------------------------------------------------------------

function phaseBadge(phase) {
  return h("span", { class: `phase ${String(phase).toLowerCase()}` }, phase);
}

function listRow(row) {
  const pending = row.pendingApprovals.filter((p) => !(p.toolCallId in row.decisions)).length;
  return h("tr", { dataset: { key: runPath(row), created: row.created || "" } },
    h("td", {}, row.kind === "Conversation" ? "chat" : "inv"),
    h("td", {}, row.namespace),
    h("td", {}, h("a", { href: `#/run/${runPath(row)}` }, row.name)),
    h("td", { class: "title" }, row.title),
    h("td", {}, phaseBadge(row.phase), pending ? h("span", { class: "waiting" }, ` ${pending} waiting`) : null),
    h("td", {}, age(row.created)),
    h("td", { class: "num" }, String(row.toolCallCount)),
    h("td", { class: "num" }, String(row.usage.totalTokens)),
    h("td", { class: "num" }, cost(row.usage)));
}

async function listView() {
  const body = h("tbody");
  const load = async () => {
    const data = await call("GET", "/api/console/runs");
    clear(body);
    append(body, data.runs.map(listRow));
  };
  show(h("section", {},
    h("div", { class: "bar" }, h("h2", {}, "Investigations and conversations"),
      h("a", { class: "button", href: "#/new" }, "New investigation"),
      h("a", { class: "button", href: "#/chat" }, "New chat")),
    h("table", { id: "runs" },
      h("thead", {}, h("tr", {}, ["Kind", "Namespace", "Name", "Title", "Phase", "Age", "Tools", "Tokens", "Cost"].map((t) => h("th", {}, t)))),
      body)));
  state.onOpen = () => load().catch(() => {});
  state.onRun = (name, row) => {
    const old = body.querySelector(`tr[data-key="${CSS.escape(runPath(row))}"]`);
    if (name === "deleted") return old?.remove();
    const fresh = listRow(row);
    if (old) old.replaceWith(fresh);
    else body.prepend(fresh);
  };
  await load();
}

// -- one run -----------------------------------------------------------------------------------------

function params(value) {
  return h("pre", { class: "params" }, JSON.stringify(value, null, 2));
}

// The outcome of the latest decision per run, kept across re-renders: the page re-renders on
// every live update (and the section goes once nothing waits), which must not wipe the answer.
const decisionNotes = new Map();

function approvals(detail, path, refresh) {
  const { summary, mayDecide } = detail;
  const waiting = summary.pendingApprovals.filter((p) => !(p.toolCallId in summary.decisions));
  const kept = decisionNotes.get(path);
  const note = h("p", { class: kept ? kept.className : "note" }, kept ? kept.text : "");
  if (kept?.className.includes("error")) note.setAttribute("role", "alert");
  if (!waiting.length) return kept ? h("section", { class: "card approvals", id: "approvals" }, note) : null;
  const show = (className, text) => {
    decisionNotes.set(path, { className, text });
    note.className = className;
    note.textContent = text;
  };
  const decide = async (call_id, approved, reasonInput, buttons) => {
    buttons.forEach((b) => { b.disabled = true; });
    note.textContent = "";
    try {
      const result = await call("POST", `/api/console/runs/${path}/decisions`, {
        decisions: [{ id: call_id, approved, reason: reasonInput.value || null }],
      });
      show("note ok", `${approved ? "Approved" : "Denied"} ${call_id} as ${result.by || "the API"}; the run resumes.`);
      refresh();
    } catch (error) {
      note.setAttribute("role", "alert");
      show("note error", `Refused: ${error.message}`);
      buttons.forEach((b) => { b.disabled = false; });
    }
  };
  return h("section", { class: "card approvals", id: "approvals" },
    h("h3", {}, `Waiting for approval (${waiting.length})`),
    mayDecide ? null : h("p", { class: "muted" }, "Your account may not decide on these calls; the cluster will refuse."),
    waiting.map((p) => {
      const reason = h("input", { type: "text", placeholder: "reason (optional)", class: "reason" });
      const approve = h("button", { type: "button", class: "approve", dataset: { call: p.toolCallId } }, "Approve");
      const deny = h("button", { type: "button", class: "deny", dataset: { call: p.toolCallId } }, "Deny");
      approve.addEventListener("click", () => decide(p.toolCallId, true, reason, [approve, deny]));
      deny.addEventListener("click", () => decide(p.toolCallId, false, reason, [approve, deny]));
      return h("div", { class: "pending", dataset: { call: p.toolCallId } },
        h("div", {}, h("strong", {}, p.toolName), " ", h("span", { class: "muted" }, p.description || "")),
        params(p.params), h("div", { class: "actions" }, reason, approve, deny));
    }),
    note);
}

function timelineItem(item) {
  switch (item.kind) {
    case "turn": return h("div", { class: "turn" }, `Turn ${item.index + 1}`);
    case "user": return h("div", { class: "msg user" }, h("div", { class: "who" }, "you"), h("div", { class: "text" }, item.text));
    case "assistant": return h("div", { class: "msg assistant" }, h("div", { class: "who" }, "model"), markdown(item.text));
    case "tool_call": return h("details", { class: `tool ${item.status}`, dataset: { call: item.id } },
      h("summary", {}, h("code", {}, item.name), " ", h("span", { class: "muted" }, item.description || JSON.stringify(item.params)),
        " ", h("span", { class: "status" }, item.status)),
      params(item.params),
      item.output !== null && item.output !== undefined ? h("pre", { class: "output" }, item.output) : h("p", { class: "muted" }, "no output yet"));
    case "approval": return h("div", { class: "event" }, `waiting for approval: ${item.pending.map((p) => p.toolCallId).join(", ")}`);
    case "decision": return h("div", { class: "event" }, `${item.approved ? "✔ approved" : "✘ denied"} ${item.id}${item.reason ? `: ${item.reason}` : ""}`);
    case "tokens": return h("div", { class: "event tokens" }, `tokens +${item.totalTokens} (prompt ${item.promptTokens}, completion ${item.completionTokens}) $${item.cost.toFixed(6)}`);
    case "compaction": return h("div", { class: "event" }, `history compacted to ${item.messages} messages`);
    case "answer": return h("div", { class: "msg answer" }, h("div", { class: "who" }, "answer"), markdown(item.text));
    case "error": return h("div", { class: "error" }, `Failed (${item.reason}): ${item.message}`);
    default: return null;
  }
}

// A finding's evidence link: opens that tool call in the timeline, with its output.
function openCall(id) {
  const call = [...main.querySelectorAll("#timeline details.tool")].find((d) => d.dataset.call === id);
  if (!call) return;
  call.open = true;
  call.scrollIntoView({ block: "center" });
}

function renderRun(detail, path, refresh) {
  const s = detail.summary;
  const conversation = s.kind === "Conversation";
  const named = Object.entries(s.sections || {}).filter(([, text]) => text);
  const sections = named.length
    ? h("details", { class: "card sections", id: "sections" }, h("summary", {}, `Sections (${named.length})`),
      named.map(([title, text]) => h("section", { class: "section" }, h("h4", {}, title), markdown(text))))
    : null;
  const findings = (s.findings || []).length
    ? h("section", { class: "card findings", id: "findings" },
      h("h3", {}, `Findings (${s.groundedFindings || ""} grounded)`),
      s.findings.map((f) => h("div", { class: `finding ${f.grounded ? "grounded" : "ungrounded"}` },
        h("div", { class: "muted" }, f.section), markdown(f.text),
        h("div", { class: "evidence" }, f.grounded ? "evidence: " : `⚠ ${f.problem}${f.evidence.length ? " — cited: " : ""}`,
          f.evidence.map((id) => h("a", { href: `#call-${id}`, class: "cite", dataset: { call: id },
            onclick: (e) => { e.preventDefault(); openCall(id); } }, id))))))
    : null;
  const askForm = conversation ? h("form", { id: "ask", class: "card", onsubmit: async (e) => {
    e.preventDefault();
    const field = e.target.elements.ask;
    const note = e.target.querySelector(".note");
    try {
      await call("POST", `/api/console/runs/${path}/turns`, { ask: field.value });
      state.draft = "";
      main.querySelector("#ask textarea").value = "";
      refresh();
    } catch (error) {
      note.textContent = `Refused: ${error.message}`;
    }
  } }, h("textarea", { name: "ask", rows: 2, required: true, placeholder: "Ask a follow-up question",
    oninput: (e) => { state.draft = e.target.value; } }),
    h("button", { type: "submit" }, "Ask"), h("p", { class: "note error" })) : null;
  return [
    h("div", { class: "bar" }, h("h2", { id: "run-title" }, s.title || s.name), phaseBadge(s.phase)),
    h("p", { class: "meta" }, `${s.kind} ${s.namespace}/${s.name} · model ${s.model || "default"} · ${s.steps} steps · `,
      h("span", { id: "tokens" }, `${s.usage.totalTokens} tokens`), ` · ${cost(s.usage)}`,
      s.message ? h("span", { class: "muted" }, ` · ${s.message}`) : null),
    approvals(detail, path, refresh),
    !conversation && s.answer ? h("section", { class: "card analysis", id: "analysis" }, h("h3", {}, "Analysis"), markdown(s.answer)) : null,
    !conversation ? findings : null,
    !conversation ? sections : null,
    h("section", { class: "timeline", id: "timeline" }, h("h3", {}, conversation ? "Conversation" : "Timeline"),
      detail.timeline.map(timelineItem)),
    askForm,
  ];
}

async function runView(path) {
  state.draft = "";
  let version = null;
  let busy = null;
  const refresh = async () => {
    if (busy) return busy;
    busy = (async () => {
      try {
        const detail = await call("GET", `/api/console/runs/${path}`);
        if (detail.summary.resourceVersion !== version || !main.querySelector("#timeline")) {
          version = detail.summary.resourceVersion;
          const open = new Set([...main.querySelectorAll("details[open]")].map((d) => d.dataset.call));
          show(renderRun(detail, path, refresh));
          main.querySelectorAll("details").forEach((d) => { if (open.has(d.dataset.call)) d.open = true; });
          const ask = main.querySelector("#ask textarea");
          if (ask && state.draft) ask.value = state.draft;  // what the person was typing survives
        }
      } catch (error) {
        show(failure(error));
      } finally {
        busy = null;
      }
    })();
    return busy;
  };
  state.onOpen = refresh;
  state.onRun = (name, row) => {
    if (runPath(row) === path && row.resourceVersion !== version) refresh().then(() => {
      if (version !== row.resourceVersion) refresh();
    });
  };
  await refresh();
}

// -- starting runs ------------------------------------------------------------------------------------

function field(label, input) {
  return h("label", {}, h("span", {}, label), input);
}

function modelSelect(models) {
  return h("select", { name: "model" }, h("option", { value: "" }, "default"), models.map((m) => h("option", { value: m }, m)));
}

async function newView() {
  const { models, namespace } = await call("GET", "/api/console/runs");
  const note = h("p", { class: "note error" });
  show(h("form", { id: "new-investigation", class: "card form", onsubmit: async (e) => {
    e.preventDefault();
    const f = e.target.elements;
    const subject = f.subjectName.value ? { kind: f.subjectKind.value || "Pod", name: f.subjectName.value, namespace: f.subjectNamespace.value || f.namespace.value } : null;
    try {
      const created = await call("POST", "/api/console/investigations", {
        namespace: f.namespace.value || null, title: f.title.value, description: f.description.value || null,
        question: f.question.value || null, subject, model: f.model.value || null, enable_tool_approval: f.approvals.checked,
      });
      location.hash = `#/run/${runPath(created)}`;
    } catch (error) {
      note.textContent = error.message;
    }
  } },
    h("h2", {}, "New investigation"),
    field("Title", h("input", { name: "title", required: true, placeholder: "KubePodCrashLooping on shop/web-1" })),
    field("Description", h("textarea", { name: "description", rows: 3 })),
    field("Question", h("input", { name: "question" })),
    h("div", { class: "row" },
      field("Subject kind", h("input", { name: "subjectKind", placeholder: "Pod" })),
      field("Subject name", h("input", { name: "subjectName" })),
      field("Subject namespace", h("input", { name: "subjectNamespace" }))),
    h("div", { class: "row" },
      field("Namespace", h("input", { name: "namespace", value: namespace })),
      field("Model", modelSelect(models))),
    h("label", { class: "check" }, h("input", { type: "checkbox", name: "approvals", checked: true }), " Pause for approval before actions"),
    h("button", { type: "submit" }, "Start investigation"), note));
}

async function chatView() {
  const { models, namespace } = await call("GET", "/api/console/runs");
  const note = h("p", { class: "note error" });
  show(h("form", { id: "new-chat", class: "card form", onsubmit: async (e) => {
    e.preventDefault();
    const f = e.target.elements;
    try {
      const created = await call("POST", "/api/console/conversations", {
        ask: f.ask.value, namespace: f.namespace.value || null, model: f.model.value || null,
        enable_tool_approval: f.approvals.checked,
      });
      location.hash = `#/run/${runPath(created)}`;
    } catch (error) {
      note.textContent = error.message;
    }
  } },
    h("h2", {}, "New chat"),
    field("Question", h("textarea", { name: "ask", rows: 3, required: true, placeholder: "Why is web-1 restarting?" })),
    h("div", { class: "row" },
      field("Namespace", h("input", { name: "namespace", value: namespace })),
      field("Model", modelSelect(models))),
    h("label", { class: "check" }, h("input", { type: "checkbox", name: "approvals", checked: true }), " Pause for approval before actions"),
    h("button", { type: "submit" }, "Ask"), note));
}

// -- routing --------------------------------------------------------------------------------------------

async function route() {
  if (!state.me) return;
  state.onRun = null;
  state.onOpen = null;
  const hash = location.hash.replace(/^#\/?/, "");
  const parts = hash.split("/").map(decodeURIComponent);
  try {
    if (parts[0] === "run" && parts.length === 4) await runView(parts.slice(1).map(encodeURIComponent).join("/"));
    else if (parts[0] === "new") await newView();
    else if (parts[0] === "chat") await chatView();
    else await listView();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return signIn("Your token is no longer accepted.");
    show(failure(error));
  }
}

window.addEventListener("hashchange", route);
start();
