// Threads: the caller's threads; one thread's runs (outcome, usage, profile) and its /history.
import {
  api, badge, clear, duration, empty, guarded, h, listing, messageView, mono, moreButton, pathId,
  session, table, when,
} from "./lib.js";

const FINISHED = new Set(["succeeded", "failed", "cancelled", "interrupted"]);

export async function render(root, params) {
  if (params[0]) return renderThread(root, params[0]);
  return listing(root, {
    title: "Threads",
    intro: "Every thread of yours: chat threads and the threads of your automation jobs.",
    id: "threads-table",
    columns: ["Thread", "Mode", "Messages", "Created", "Updated"],
    path: "/api/v1/agent/threads",
    key: "threads",
    none: "No threads yet: start one in Chat.",
    row: (t) => h("tr", {},
      h("td", {}, mono(t.id, `#/threads/${pathId(t.id)}`)),
      h("td", {}, badge(t.runtimeMode, t.runtimeMode)),
      h("td", { class: "num" }, String(t.messageCount)),
      h("td", {}, when(t.createTime)),
      h("td", {}, when(t.updateTime))),
  });
}

function usageText(u) {
  return `${u.inputTokens} in · ${u.outputTokens} out${u.estimated ? " (est.)" : ""}`;
}

// A run's usage is on its record; a record without it (a run finished before the record
// carried usage) falls back to its RUN_FINISHED event, readable while its events are kept
// (AGENTMESH_EVENT_LOG_RETENTION_SECONDS).
async function usageOf(runId) {
  const resp = await fetch(`/api/v1/agent/runs/${pathId(runId)}/events`, {
    headers: { Authorization: `Bearer ${session.token()}`, Accept: "text/event-stream" },
  });
  if (resp.status === 410) return "events no longer kept";
  if (!resp.ok) return `HTTP ${resp.status}`;
  const text = await resp.text();
  for (const line of text.split("\n").reverse()) {
    if (!line.startsWith("data: ")) continue;
    const event = JSON.parse(line.slice(6));
    if (event.type === "RUN_FINISHED") {
      const u = (event.usage ?? [])[0];
      return u ? usageText(u) : "none reported";
    }
    if (event.type === "RUN_ERROR") return "—";
  }
  return "—";
}

async function renderThread(root, threadId) {
  const errorSlot = h("div", {});
  const runsBody = h("tbody", {});
  const messages = h("div", { class: "messages static", id: "thread-history" });
  const more = h("div", { class: "more" });
  const isChat = !threadId.startsWith("automation:");
  clear(
    root,
    h("section", { class: "page" },
      h("div", { class: "page-head" },
        h("a", { href: "#/threads", class: "back" }, "← Threads"),
        h("h1", {}, "Thread ", mono(threadId)),
        isChat ? h("a", { class: "btn small", href: `#/chat/${pathId(threadId)}` }, "Continue in chat") : null),
      errorSlot,
      h("h2", {}, "Runs"),
      h("p", { class: "muted small" }, "The runs that wrote this thread's visible messages, oldest first."),
      table("runs-table", ["Run", "Outcome", "Origin", "Profile", "Started", "Took", "Usage", "Error"], runsBody, "Runs"),
      h("h2", {}, "History"),
      messages,
      more),
  );
  const runIds = [];
  const load = async (token) => {
    const page = await guarded(errorSlot, () =>
      api("GET", `/api/v1/agent/threads/${pathId(threadId)}/history`, { query: { page_size: 100, page_token: token } }));
    if (!page) return false;
    for (const m of page.messages) {
      messages.append(messageView(m));
      if (m.runId && !runIds.includes(m.runId)) runIds.push(m.runId);
    }
    clear(more, moreButton(page.nextPageToken, async (t) => {
      await load(t);
      await showRuns();
    }));
    if (!token && !page.messages.length) messages.append(empty("No messages in this thread's history."));
    return true;
  };
  const shown = new Set();
  const showRuns = async () => {
    const fresh = runIds.filter((id) => !shown.has(id));
    for (const id of fresh) shown.add(id);
    const records = await Promise.all(fresh.map((id) => api("GET", `/api/v1/agent/runs/${pathId(id)}`).catch((err) => ({ id, loadError: err }))));
    for (const r of records) {
      if (r.loadError) {
        runsBody.append(h("tr", {}, h("td", {}, mono(r.id)), h("td", { colspan: 7 }, r.loadError.message)));
        continue;
      }
      const recorded = (r.usage ?? [])[0];
      const usage = h("td", { class: "usage" }, recorded ? usageText(recorded) : FINISHED.has(r.state) ? "…" : "—");
      const p = r.profile ?? {};
      runsBody.append(h("tr", { "data-run-id": r.id },
        h("td", {}, mono(r.id)),
        h("td", {}, badge(r.state), r.cancelRequested ? h("span", { class: "muted small" }, " cancel asked") : null,
          r.rolledBack ? badge("rolled back", "hidden") : null),
        h("td", {}, r.origin ?? "—"),
        h("td", {}, h("div", {}, p.name ?? "—"), h("div", { class: "muted small" }, `router ${p.enableRouter ? "on" : "off"} · ${p.executor ?? "—"}`)),
        h("td", {}, when(r.startTime ?? r.createTime)),
        h("td", {}, duration(r.startTime, r.finishTime) || "—"),
        usage,
        h("td", {}, r.error ? h("span", { class: "error-inline" }, h("code", {}, r.error.code), " ", r.error.message) : "—")));
      if (!recorded && FINISHED.has(r.state)) usageOf(r.id).then((u) => { usage.textContent = u; }, () => { usage.textContent = "—"; });
    }
    if (!runIds.length && !runsBody.childElementCount) runsBody.append(h("tr", {}, h("td", { colspan: 8 }, empty("No runs."))));
  };
  if (await load(undefined)) await showRuns();
}
