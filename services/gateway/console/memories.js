// Memories: list and search the caller's memories, with their provenance (the run that wrote
// each and the messages it came from) and their change record (who changed what, and why);
// save one, edit one (against the version shown: a newer one is the API's 409), forget one.
import {
  api, badge, clear, confirmButton, empty, errorBox, field, guarded, h, markInvalid, messageView,
  mono, moreButton, pathId, when,
} from "./lib.js";

const KINDS = ["fact", "preference", "dislike", "name", "place"];
// The change record is listed for all of an owner's memories at once, oldest first (the API
// has no per-memory filter): a memory's changes are read from at most this many pages of it.
const CHANGE_PAGES = 20;

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
          mono(run.threadId, `#/threads/${pathId(run.threadId)}`),
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

// One memory's changes, oldest first: read from the owner's change record, page by page.
async function changesOf(memoryId) {
  const mine = [];
  let token;
  for (let pages = 0; pages < CHANGE_PAGES; pages += 1) {
    const page = await api("GET", "/api/v1/memories:changes", { query: { page_size: 1000, page_token: token } });
    mine.push(...page.changes.filter((c) => c.memoryId === memoryId));
    token = page.nextPageToken;
    if (!token) return { changes: mine, complete: true };
  }
  return { changes: mine, complete: false };
}

function actorOf(c) {
  if (c.actor === "api") return h("span", {}, "you, through the API");
  if (c.actor === "run") {
    return h("span", {}, "run ", c.sourceRunId ? mono(c.sourceRunId) : h("span", { class: "muted" }, "(not recorded)"));
  }
  return h("span", {}, c.actor || "—");
}

function changeView(c) {
  return h("li", { class: "change", "data-action": c.action },
    h("div", { class: "change-head" },
      badge(c.action, `change-${c.action}`), " by ", actorOf(c),
      h("span", { class: "muted small" }, ` · ${when(c.createTime)}`),
      c.kind ? badge(c.kind, "kind") : null),
    c.previousContent
      ? h("div", { class: "change-text" }, h("del", { class: "muted" }, c.previousContent), " → ", h("span", { class: "change-content" }, c.content))
      : h("div", { class: "change-text" }, h("span", { class: "change-content" }, c.content)),
    c.reason ? h("div", { class: "small" }, "why: ", h("q", {}, c.reason)) : null,
    (c.sourceMessageIds ?? []).length
      ? h("div", { class: "muted small" }, "from messages ", c.sourceMessageIds.map((id) => [mono(id), " "]))
      : null);
}

// The "Changes" block of a card: closed until asked for (or shown after an edit).
function changeRecord(memoryId) {
  const list = h("ol", { class: "changes" });
  const box = h("details", { class: "change-record" }, h("summary", {}, "Changes"), list);
  const load = async () => {
    clear(list, h("li", { class: "muted small" }, "loading…"));
    try {
      const { changes, complete } = await changesOf(memoryId);
      clear(list, changes.map(changeView),
        changes.length ? null : h("li", { class: "muted small" }, "no change recorded"),
        complete ? null : h("li", { class: "muted small" }, `only the first ${CHANGE_PAGES} pages of your change record were read`));
    } catch (err) {
      clear(list, h("li", {}, errorBox(err)));
    }
  };
  box.addEventListener("toggle", () => { if (box.open) load(); });
  return { el: box, show: () => { if (box.open) load(); else box.open = true; } };
}

// The inline editor: content and kind, sent with the version the card shows.
function editor(m, onSaved, onCancel, onReloaded) {
  const content = h("textarea", { class: "memory-edit-content", rows: 3, maxlength: 2000 });
  content.value = m.content;
  const kind = h("select", { class: "memory-edit-kind" }, KINDS.map((k) => h("option", { value: k }, k)));
  kind.value = m.kind ?? "fact";
  const errorSlot = h("div", { class: "memory-edit-error" });
  const save = h("button", { class: "btn primary small", type: "submit" }, "Save");
  const form = h("form", { class: "memory-edit" },
    field("Content", "content", content),
    field("Kind", "kind", kind, `editing version ${m.version}`),
    errorSlot,
    h("div", { class: "actions" },
      h("button", { class: "btn ghost small", type: "button", onclick: onCancel }, "Cancel"), save));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = { version: m.version };
    if (content.value !== m.content) body.content = content.value;
    if (kind.value !== (m.kind ?? "fact")) body.kind = kind.value;
    if (!("content" in body) && !("kind" in body)) return onCancel();
    save.disabled = true;
    clear(errorSlot);
    try {
      onSaved(await api("PATCH", `/api/v1/memories/${pathId(m.id)}`, { body }));
    } catch (err) {
      errorSlot.append(errorBox(err));
      markInvalid(form, err);
      save.disabled = false;
      if (err.status === 409) {
        // Changed since the page read it (or the new text is another memory's fact): offer
        // the memory as it is now, to edit that.
        const reload = h("button", { class: "btn small", type: "button" }, "Show the current version");
        reload.addEventListener("click", async () => {
          reload.disabled = true;
          const now = await guarded(errorSlot, () => api("GET", `/api/v1/memories/${pathId(m.id)}`));
          if (now) onReloaded(now);
          else reload.disabled = false;
        });
        errorSlot.append(reload);
      }
    }
  });
  setTimeout(() => content.focus());
  return form;
}

function card(m, onForget) {
  const slot = h("div", {});
  const editSlot = h("div", {});
  const record = changeRecord(m.id);
  const edit = h("button", { class: "btn small", type: "button" }, "Edit");
  const el = h(
    "article",
    { class: "card memory", "data-memory-id": m.id, "data-version": m.version },
    h("div", { class: "memory-head" },
      h("p", { class: "memory-content" }, m.content),
      m.kind ? badge(m.kind, "kind") : null),
    h("div", { class: "memory-meta muted small" },
      mono(m.id), ` · version ${m.version} · created ${when(m.createTime)} · updated ${when(m.updateTime)}`,
      typeof m.score === "number" ? ` · relevance ${m.score.toFixed(2)}` : ""),
    provenance(m),
    record.el,
    editSlot,
    slot,
    h("div", { class: "actions" }, edit, confirmButton("Forget", "Forget it for good?", async () => {
      await guarded(slot, async () => {
        await api("DELETE", `/api/v1/memories/${pathId(m.id)}`);
        onForget(el);
      });
    })),
  );
  edit.addEventListener("click", () => {
    edit.hidden = true;
    const replace = (now) => {
      const fresh = card(now, onForget);
      el.replaceWith(fresh);
      fresh.showChanges();
    };
    clear(editSlot, editor(m, replace, () => {
      clear(editSlot);
      edit.hidden = false;
    }, replace));
  });
  el.showChanges = record.show;
  return el;
}

// A new memory of the caller's own, saved as written (no run, no model): the same fact again
// is the API's 200 with it rewritten.
function creator(onSaved) {
  const content = h("input", { id: "memory-new", placeholder: "e.g. I am vegetarian", autocomplete: "off", maxlength: 2000 });
  // No kind: `fact` for a new memory, and an existing one's kind kept (api-endpoints.md).
  const kind = h("select", { id: "memory-new-kind" },
    h("option", { value: "" }, "fact (default)"), KINDS.map((k) => h("option", { value: k }, k)));
  const errorSlot = h("div", { id: "memory-new-error" });
  const form = h("form", { class: "card memory-new", "aria-labelledby": "memory-new-title" },
    h("h2", { id: "memory-new-title" }, "Save a memory directly"),
    h("p", { class: "muted small" }, "Written as you type it, without a run: the assistant recalls it like the ones it saved."),
    h("div", { class: "memory-new-row" },
      field("Memory", "content", content),
      field("Kind", "kind", kind),
      h("div", { class: "field end" }, h("button", { class: "btn", type: "submit", id: "memory-save" }, "Save memory"))),
    errorSlot);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clear(errorSlot);
    try {
      const body = { content: content.value, ...(kind.value ? { kind: kind.value } : {}) };
      onSaved(await api("POST", "/api/v1/memories", { body }));
      content.value = "";
    } catch (err) {
      errorSlot.append(errorBox(err));
      markInvalid(form, err);
    }
  });
  return form;
}

export async function render(root) {
  const errorSlot = h("div", {});
  const list = h("div", { class: "memory-list", id: "memory-list" });
  const more = h("div", { class: "more" });
  const query = h("input", { type: "search", id: "memory-query", placeholder: "words or meaning, e.g. drinks", autocomplete: "off" });
  const form = h("form", { class: "memory-search", role: "search" },
    h("label", { class: "field-label", for: "memory-query" }, "Search your memories"),
    h("div", { class: "searchbar" }, query, h("button", { class: "btn primary", type: "submit" }, "Search")));
  const status = h("p", { class: "muted small", id: "memory-status" });
  clear(
    root,
    h("section", { class: "page" },
      h("div", { class: "page-head" }, h("h1", {}, "Memories"),
        h("p", { class: "muted" }, "What the memory agent saved about you, where each memory came from and how it changed; edit or forget any of it.")),
      creator((m) => {
        list.querySelector(`[data-memory-id="${CSS.escape(m.id)}"]`)?.remove();
        list.querySelector(".empty")?.remove();
        list.prepend(card(m, forget));
      }),
      h("h2", {}, "Your memories"),
      form, status, errorSlot, list, more),
  );
  const forget = (el) => {
    el.remove();
    if (!list.childElementCount) list.append(empty("No memories."));
  };
  const load = async (token) => {
    const q = query.value.trim();
    const page = await guarded(errorSlot, () =>
      api("GET", "/api/v1/memories", { query: q ? { q, page_size: 100 } : { page_size: 50, page_token: token } }));
    if (!page) return;
    if (!token) clear(list);
    for (const m of page.memories) list.append(card(m, forget));
    status.textContent = q ? `${page.memories.length} found for “${q}”` : "";
    if (!list.childElementCount) list.append(empty(q ? "Nothing matches." : "No memories yet: a memory job (Automation) writes them from your chats, or save one above."));
    clear(more, q ? null : moreButton(page.nextPageToken, load));
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    load(undefined);
  });
  await load(undefined);
}
