// Memories: list and search the caller's memories, with their provenance (the run that wrote
// each and the messages it came from); forget one. The gateway has no memory edit endpoint
// (api-endpoints.md), so there is no edit control.
import {
  api, badge, clear, confirmButton, empty, errorBox, guarded, h, messageView, mono, moreButton,
  pathId, when,
} from "./lib.js";

// The source messages of a memory: looked up in the caller's recent chat threads (the API has
// no message-by-id read), newest threads first, until every id is found.
async function findMessages(ids) {
  const wanted = new Set(ids);
  const found = [];
  const page = await api("GET", "/api/v1/agent/threads", { query: { page_size: 100 } });
  const threads = page.threads
    .filter((t) => t.runtimeMode === "chat")
    .sort((a, b) => (b.updateTime ?? "").localeCompare(a.updateTime ?? ""))
    .slice(0, 20);
  for (const t of threads) {
    if (!wanted.size) break;
    const history = await api("GET", `/api/v1/agent/threads/${pathId(t.id)}/history`, { query: { page_size: 1000 } });
    for (const m of history.messages) {
      if (wanted.delete(m.id)) found.push(m);
    }
  }
  return { found, missing: [...wanted] };
}

function provenance(m) {
  const box = h("div", { class: "provenance" });
  const runLine = h("div", { class: "prov-run" });
  if (m.sourceRunId) {
    runLine.append("written by run ", mono(m.sourceRunId), " ");
    api("GET", `/api/v1/agent/runs/${pathId(m.sourceRunId)}`).then(
      (run) => {
        runLine.append(
          badge(run.state), " on ",
          h("a", { href: `#/threads/${pathId(run.threadId)}` }, mono(run.threadId)),
          h("span", { class: "muted" }, ` · ${run.origin ?? ""} · profile ${run.profile?.name ?? "—"} · ${when(run.finishTime ?? run.createTime)}`),
        );
      },
      (err) => runLine.append(h("span", { class: "muted" }, `(run record: ${err.status} ${err.code})`)),
    );
  } else {
    runLine.append(h("span", { class: "muted" }, "no source run recorded"));
  }
  box.append(runLine);
  const ids = m.sourceMessageIds ?? [];
  if (ids.length) {
    const list = h("div", { class: "prov-messages" });
    const show = h("button", { class: "btn ghost small", type: "button" }, `Show ${ids.length} source message${ids.length > 1 ? "s" : ""}`);
    show.addEventListener("click", async () => {
      show.disabled = true;
      try {
        const { found, missing } = await findMessages(ids);
        clear(list, found.map((msg) => messageView(msg)),
          missing.length ? h("div", { class: "muted small" }, "not found in your recent threads: ", missing.map((id) => [mono(id), " "])) : null);
        show.remove();
      } catch (err) {
        clear(list, errorBox(err));
        show.disabled = false;
      }
    });
    box.append(h("div", { class: "prov-ids" }, "from messages ", ids.map((id) => [mono(id), " "]), show), list);
  }
  return box;
}

function card(m, onForget) {
  const slot = h("div", {});
  const el = h(
    "article",
    { class: "card memory", "data-memory-id": m.id },
    h("div", { class: "memory-head" },
      h("p", { class: "memory-content" }, m.content),
      m.kind ? badge(m.kind, "kind") : null),
    h("div", { class: "memory-meta muted small" },
      mono(m.id), ` · version ${m.version} · created ${when(m.createTime)} · updated ${when(m.updateTime)}`),
    provenance(m),
    slot,
    h("div", { class: "actions" }, confirmButton("Forget", "Forget it for good?", async () => {
      await guarded(slot, async () => {
        await api("DELETE", `/api/v1/memories/${pathId(m.id)}`);
        onForget(el);
      });
    })),
  );
  return el;
}

export async function render(root) {
  const errorSlot = h("div", {});
  const list = h("div", { class: "memory-list", id: "memory-list" });
  const more = h("div", { class: "more" });
  const query = h("input", { type: "search", id: "memory-query", placeholder: "Search your memories", autocomplete: "off" });
  const form = h("form", { class: "searchbar" }, query,
    h("button", { class: "btn primary", type: "submit" }, "Search"));
  const status = h("p", { class: "muted small", id: "memory-status" });
  clear(
    root,
    h("section", { class: "page" },
      h("div", { class: "page-head" }, h("h1", {}, "Memories"),
        h("p", { class: "muted" }, "What the memory agent saved about you, where each memory came from, and a way to forget it.")),
      form, status, errorSlot, list, more),
  );
  const forget = (el) => {
    el.remove();
    if (!list.childElementCount) list.append(empty("No memories."));
  };
  const load = async (token) => {
    const q = query.value.trim();
    const page = await guarded(errorSlot, () =>
      api("GET", "/api/v1/memories", { query: q ? { query: q, page_size: 100 } : { page_size: 50, page_token: token } }));
    if (!page) return;
    if (!token) clear(list);
    for (const m of page.memories) list.append(card(m, forget));
    status.textContent = q ? `${page.memories.length} found for “${q}”` : "";
    if (!list.childElementCount) list.append(empty(q ? "Nothing matches." : "No memories yet: a memory job (Automation) writes them from your chats."));
    clear(more, q ? null : moreButton(page.nextPageToken, load));
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    load(undefined);
  });
  await load(undefined);
}
