// Audit (admin): every message and refused tool call of one owner, hidden ones included and
// marked; filters by origin, executor, profile, thread and time.
import { api, badge, browserZone, claims, clear, empty, guarded, h, mono, moreButton, session, table, when } from "./lib.js";

function select(id, options) {
  return h("select", { id }, h("option", { value: "" }, "any"), options.map((o) => h("option", { value: o }, o)));
}

function text(m) {
  if (typeof m.content === "string") return m.content;
  if (Array.isArray(m.content)) return m.content.filter((p) => p.type === "text").map((p) => p.text).join("");
  if (m.toolCalls?.length) return m.toolCalls.map((c) => `${c.function?.name}(${c.function?.arguments ?? ""})`).join(", ");
  return "";
}

export async function render(root) {
  const mine = claims(session.token());
  // The signed-in token when it has the admin scope, else the admin token given here (else the
  // signed-in one, and the API answers its 403).
  const adminToken = () => (mine?.admin ? session.token() : session.adminToken() || session.token());
  const tokenInput = h("input", { id: "admin-token", type: "password", placeholder: "an admin token (make token ADMIN=1)", autocomplete: "off", value: session.adminToken() });
  const owner = h("input", { id: "audit-owner", value: mine?.sub ?? "", required: true, spellcheck: "false" });
  const origin = select("audit-origin", ["chat", "automation"]);
  const executor = select("audit-executor", ["worker", "memory"]);
  const profile = h("input", { id: "audit-profile", placeholder: "e.g. automation_memory_default", spellcheck: "false" });
  const thread = h("input", { id: "audit-thread", placeholder: "a thread id", spellcheck: "false" });
  const start = h("input", { id: "audit-start", type: "datetime-local" });
  const end = h("input", { id: "audit-end", type: "datetime-local" });
  const errorSlot = h("div", { id: "audit-error" });
  const rows = h("tbody", {});
  const denials = h("tbody", {});
  const more = h("div", { class: "more" });
  const counts = h("p", { class: "muted small", id: "audit-counts" });
  const results = h("div", { id: "audit-results", hidden: true });
  const label = (l, c) => h("label", { class: "field" }, h("span", { class: "field-label" }, l), c);
  const form = h("form", { class: "card filters", id: "audit-form" },
    mine?.admin ? null : label("Admin token", tokenInput),
    h("div", { class: "grid4" },
      label("Owner", owner), label("Origin", origin), label("Executor", executor), label("Profile", profile),
      label("Thread", thread), label(`From (your zone, ${browserZone()})`, start), label(`Until (your zone, ${browserZone()})`, end),
      h("div", { class: "field end" }, h("button", { class: "btn primary", type: "submit", id: "audit-search" }, "Search"))));
  clear(
    root,
    h("section", { class: "page" },
      h("div", { class: "page-head" }, h("h1", {}, "Audit"),
        h("p", { class: "muted" }, "Everything stored for an owner, including what history hides. Needs the admin scope.")),
      form, errorSlot, counts,
      results),
  );
  clear(results,
      h("h2", {}, "Messages"),
      table("audit-messages", [`Time (${browserZone()})`, "Thread", "Role / kind", "Content", "Origin · executor · profile", "Visibility"], rows, "Messages"),
      h("h2", {}, "Refused tool calls"),
      table("audit-denials", [`Time (${browserZone()})`, "Thread", "Tool", "Reason", "Origin · executor · profile", "Arguments sha256"], denials, "Refused tool calls"),
      more);
  let shown = { messages: 0, denials: 0 };
  const query = (token) => ({
    owner_id: owner.value.trim(),
    origin: origin.value,
    executor: executor.value,
    execution_profile_name: profile.value.trim(),
    thread_id: thread.value.trim(),
    start_time: start.value ? new Date(start.value).toISOString() : "",
    end_time: end.value ? new Date(end.value).toISOString() : "",
    page_size: 100,
    page_token: token,
  });
  const load = async (token, filters) => {
    const page = await guarded(errorSlot, async () => {
      const given = session.adminToken();
      try {
        return await api("GET", "/api/v1/admin/audit", { query: filters, token: adminToken() });
      } catch (err) {
        if (err.status === 403 && !given) session.denyAudit();
        throw err;
      } finally {
        window.dispatchEvent(new Event("agentmesh:roles"));
      }
    });
    if (!page) return;
    results.hidden = false;
    if (!token) {
      clear(rows);
      clear(denials);
      shown = { messages: 0, denials: 0 };
    }
    for (const m of page.messages) {
      const hidden = m.metadata?.hiddenFromUser;
      const md = m.metadata ?? {};
      rows.append(h("tr", { class: hidden ? "is-hidden" : "", "data-message-id": m.id },
        h("td", {}, when(m.createdAt)),
        h("td", {}, mono(m.threadId ?? ""), h("div", { class: "muted small" }, mono(m.runId ?? ""))),
        h("td", {}, m.role, h("div", { class: "muted small" }, m.kind ?? "")),
        h("td", { class: "content" }, text(m) || "—", m.error ? h("div", { class: "error-inline" }, m.error) : null),
        h("td", {}, `${md.origin ?? "—"} · ${md.executor ?? "—"}`, h("div", { class: "muted small" }, md.executionProfileName ?? "")),
        h("td", {}, hidden ? badge("hidden", "hidden") : badge("visible", "visible"), h("div", { class: "muted small" }, `mask ${m.visibilityMask ?? "?"}`))));
    }
    for (const d of page.toolDenials) {
      denials.append(h("tr", {},
        h("td", {}, when(d.createTime)),
        h("td", {}, mono(d.threadId), h("div", { class: "muted small" }, mono(d.runId))),
        h("td", {}, h("code", {}, d.toolName)),
        h("td", {}, badge(d.reason ?? "?", "failed")),
        h("td", {}, `${d.origin ?? "—"} · ${d.executor ?? "—"}`, h("div", { class: "muted small" }, d.executionProfileName ?? "")),
        h("td", {}, h("code", { class: "id", title: d.argumentsSha256 }, `${d.argumentsSha256.slice(0, 16)}…`))));
    }
    shown.messages += page.messages.length;
    shown.denials += page.toolDenials.length;
    counts.textContent = `${shown.messages} messages (${rows.querySelectorAll(".is-hidden").length} hidden), ${shown.denials} refused tool calls`;
    if (!shown.messages) clear(rows, h("tr", {}, h("td", { colspan: 6 }, empty("No messages match."))));
    if (!shown.denials) clear(denials, h("tr", {}, h("td", { colspan: 6 }, empty("None."))));
    clear(more, moreButton(page.nextPageToken, (t) => load(t, { ...filters, page_token: t })));
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    session.setAdminToken(tokenInput.value.trim());
    load(undefined, query(undefined));
  });
  if (mine?.admin || session.adminToken()) await load(undefined, query(undefined));
}
