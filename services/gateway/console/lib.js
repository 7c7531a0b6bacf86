// Shared pieces of the console: DOM building, the HTTP API, errors, times and badges.
// Everything the API returns is put into the page as text (never as HTML), except a reply's
// Markdown, which markdown() renders to sanitized nodes.
import { DOMPurify, Marked } from "./vendor/markdown.js";

const TOKEN_KEY = "agentmesh.token";
const ADMIN_KEY = "agentmesh.adminToken";
const AUDIT_DENIED_KEY = "agentmesh.auditDenied";

// ---- DOM ---------------------------------------------------------------------------------------

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "value") el.value = value;
    else if (key === "checked") el.checked = Boolean(value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  put(el, children);
  return el;
}

export function put(el, children) {
  for (const child of [children].flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el, ...children) {
  el.replaceChildren();
  return put(el, children);
}

// ---- the token ---------------------------------------------------------------------------------

export const session = {
  token: () => localStorage.getItem(TOKEN_KEY) || "",
  setToken: (t) => {
    localStorage.setItem(TOKEN_KEY, t);
    sessionStorage.removeItem(AUDIT_DENIED_KEY);
  },
  adminToken: () => sessionStorage.getItem(ADMIN_KEY) || "",
  setAdminToken: (t) => (t ? sessionStorage.setItem(ADMIN_KEY, t) : sessionStorage.removeItem(ADMIN_KEY)),
  // The audit answered the signed-in token 403: it has no admin scope.
  denyAudit: () => sessionStorage.setItem(AUDIT_DENIED_KEY, "1"),
  signOut: () => {
    localStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(ADMIN_KEY);
    sessionStorage.removeItem(AUDIT_DENIED_KEY);
  },
};

// The token's claims, read for display only (the gateway is the one that checks them).
export function claims(token) {
  try {
    const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const json = new TextDecoder().decode(Uint8Array.from(atob(part), (c) => c.charCodeAt(0)));
    const c = JSON.parse(json);
    const scope = Array.isArray(c.scope) ? c.scope : String(c.scope ?? "").split(" ");
    return { sub: String(c.sub ?? ""), exp: Number(c.exp ?? 0), admin: scope.includes("admin") };
  } catch {
    return null;
  }
}

// Whether to offer the Audit tab. No API tells a caller's roles: a token's own claims do (the
// admin scope), or an admin token given on the Audit page; a credential the console cannot read
// (an API key) is offered it until the audit first answers it 403.
export function mayAudit() {
  if (session.adminToken()) return true;
  const c = claims(session.token());
  return c ? c.admin : sessionStorage.getItem(AUDIT_DENIED_KEY) !== "1";
}

// ---- the API -----------------------------------------------------------------------------------

// An error as the API gave it: status, code, message, details (fields), request id and the
// extra keys some errors carry (reason, runId, activeRunId, state, ...).
export class ApiError extends Error {
  constructor(status, body, requestId) {
    const e = body && typeof body.error === "object" && body.error ? body.error : {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.code = e.code || (status ? `HTTP_${status}` : "UNREACHABLE");
    this.details = Array.isArray(e.details) ? e.details : [];
    this.requestId = e.requestId || requestId || "";
    this.extra = Object.fromEntries(
      Object.entries(e).filter(([k]) => !["code", "message", "details", "requestId"].includes(k)),
    );
  }
}

export const pathId = (id) => encodeURIComponent(id);

export async function api(method, path, { query, body, headers, token } = {}) {
  const url = new URL(path, location.origin);
  for (const [key, value] of Object.entries(query ?? {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, String(value));
  }
  const init = { method, headers: { Authorization: `Bearer ${token ?? session.token()}`, ...headers } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(url, init);
  } catch (err) {
    throw new ApiError(0, { error: { code: "UNREACHABLE", message: `the gateway did not answer (${err.message})` } });
  }
  const text = await resp.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!resp.ok) throw new ApiError(resp.status, data ?? {}, resp.headers.get("x-request-id"));
  return data;
}

// An error box that shows the error exactly as the API answered it.
export function errorBox(err) {
  if (!(err instanceof ApiError)) {
    return h("div", { class: "error", role: "alert" }, h("strong", {}, "Error"), " ", String(err?.message ?? err));
  }
  const head = err.status ? `${err.status} ${err.code}` : err.code;
  return h(
    "div",
    { class: "error", role: "alert" },
    h("div", { class: "error-head" }, h("strong", {}, head), " ", h("span", {}, err.message)),
    err.details.length
      ? h("ul", { class: "error-details" }, err.details.map((d) => h("li", {}, h("code", {}, d.field), " ", d.description)))
      : null,
    Object.keys(err.extra).length
      ? h("div", { class: "error-extra" }, Object.entries(err.extra).map(([k, v]) =>
          h("span", {}, h("code", {}, k), " ", typeof v === "string" ? v : JSON.stringify(v))))
      : null,
    err.requestId ? h("div", { class: "muted small" }, "request id ", mono(err.requestId)) : null,
  );
}

// Runs `work`, showing its error in `slot` (cleared first); returns its result or undefined.
export async function guarded(slot, work) {
  clear(slot);
  try {
    return await work();
  } catch (err) {
    put(slot, errorBox(err));
    return undefined;
  }
}

// A form's labelled field; `name` is the API's field name, so an error's details can mark it.
export function field(label, name, control, hint) {
  control.dataset.field = name;
  return h("label", { class: "field", "data-for": name }, h("span", { class: "field-label" }, label), control,
    hint ? h("span", { class: "muted small" }, hint) : null);
}

// Marks the fields of `form` an API error's details name (clearing earlier marks).
export function markInvalid(form, err) {
  for (const el of form.querySelectorAll(".invalid")) el.classList.remove("invalid");
  if (!(err instanceof ApiError)) return;
  for (const d of err.details) {
    const top = String(d.field).split(/[.[]/)[0];
    const el = form.querySelector(`[data-for="${CSS.escape(d.field)}"]`) ?? form.querySelector(`[data-for="${CSS.escape(top)}"]`);
    el?.classList.add("invalid");
  }
}

// ---- times -------------------------------------------------------------------------------------

export function when(iso, zone) {
  if (!iso) return "—";
  const date = new Date(iso);
  try {
    return new Intl.DateTimeFormat(undefined, {
      dateStyle: "medium",
      timeStyle: "medium",
      ...(zone ? { timeZone: zone } : {}),
    }).format(date);
  } catch {
    return date.toISOString();
  }
}

export function ago(iso) {
  if (!iso) return "";
  const s = Math.round((Date.parse(iso) - Date.now()) / 1000);
  const rtf = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
  const abs = Math.abs(s);
  if (abs < 60) return rtf.format(s, "second");
  if (abs < 3600) return rtf.format(Math.round(s / 60), "minute");
  if (abs < 86400) return rtf.format(Math.round(s / 3600), "hour");
  return rtf.format(Math.round(s / 86400), "day");
}

export function ms(value) {
  if (value === null || value === undefined || Number.isNaN(value)) return "";
  return value < 1000 ? `${Math.round(value)} ms` : `${(value / 1000).toFixed(value < 10000 ? 2 : 1)} s`;
}

export function duration(startIso, endIso) {
  if (!startIso || !endIso) return "";
  return ms(Date.parse(endIso) - Date.parse(startIso));
}

export const browserZone = () => Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";

// ---- small widgets -----------------------------------------------------------------------------

export function badge(text, kind) {
  return h("span", { class: `badge badge-${kind ?? text}` }, text);
}

// A listing's table: its header cells, and the tbody the view fills. Its box scrolls sideways
// on a narrow window, so it takes focus (a keyboard scrolls it) and is named.
export function table(id, columns, body, label = id.replace(/-/g, " ")) {
  return h("div", { class: "table-wrap", tabindex: 0, role: "region", "aria-label": label },
    h("table", { class: "table", id }, h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, c)))), body));
}

export function pretty(text) {
  if (typeof text !== "string") return JSON.stringify(text, null, 2);
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

// An id as people read it: short (its prefix and 8 characters), never wrapped, the whole id
// in its title and behind a copy button.
export function shortId(id) {
  const [, prefix, rest] = String(id).match(/^((?:[a-z]+[-_:])*)(.*)$/is);
  if (rest.length <= 10) return String(id);
  // A prefix too long to be one (a uuid's letters-only group) is not kept whole.
  return prefix.length <= 15 ? `${prefix}${rest.slice(0, 8)}…` : `${String(id).slice(0, 12)}…`;
}

async function copyText(text) {
  // The Clipboard API needs a secure context (https or localhost); elsewhere the old way.
  if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
  const area = h("textarea", { class: "copy-buffer", readonly: true, "aria-hidden": "true" });
  area.value = text;
  document.body.append(area);
  area.select();
  document.execCommand("copy");
  area.remove();
  return undefined;
}

// Two overlapping sheets, drawn inline (no font has to carry the glyph).
function copyIcon() {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  for (const [k, v] of Object.entries({ viewBox: "0 0 16 16", width: 12, height: 12, "aria-hidden": "true", fill: "none", stroke: "currentColor", "stroke-width": 1.5 })) {
    svg.setAttribute(k, String(v));
  }
  for (const [x, y] of [[5, 5], [2, 2]]) {
    const rect = document.createElementNS("http://www.w3.org/2000/svg", "rect");
    for (const [k, v] of Object.entries({ x, y, width: 9, height: 9, rx: 1.5 })) rect.setAttribute(k, String(v));
    svg.append(rect);
  }
  return svg;
}

export function copyButton(text, what = "id") {
  const button = h("button", { class: "copy", type: "button", title: `Copy ${what}`, "aria-label": `Copy ${what} ${text}` }, copyIcon());
  button.addEventListener("click", async (event) => {
    event.preventDefault();
    event.stopPropagation();
    let done = true;
    try {
      await copyText(text);
    } catch {
      done = false;
    }
    button.classList.add(done ? "copied" : "not-copied");
    setTimeout(() => button.classList.remove("copied", "not-copied"), 1500);
  });
  return button;
}

// An id, short, with its copy button; with `href`, the short id is a link there (the button
// beside it, not inside: a button in a link is neither valid nor reachable).
export function mono(id, href) {
  if (!id) return h("span", { class: "muted" }, "—");
  const code = h("code", { class: "id", title: id, "data-id": id }, shortId(id));
  return h("span", { class: "id-chip" }, href ? h("a", { href }, code) : code, copyButton(id));
}

export function newId(prefix) {
  return `${prefix}-${crypto.randomUUID()}`;
}

export function empty(text) {
  return h("p", { class: "empty" }, text);
}

// A "Load more" button for a paged listing: calls `more(token)` (which appends) until no token.
export function moreButton(token, more) {
  if (!token) return null;
  const button = h("button", { class: "btn ghost", type: "button" }, "Load more");
  button.addEventListener("click", async () => {
    button.disabled = true;
    await more(token);
    button.remove();
  });
  return button;
}

// A listing page: a heading, an error slot, a table filled page by page from `path` (its
// `key` list, one `row(item)` each; a "Load more" button while there is a next page).
export async function listing(root, { title, intro, action, id, columns, path, key, row, none }) {
  const errorSlot = h("div", {});
  const body = h("tbody", {});
  const more = h("div", { class: "more" });
  clear(root, h("section", { class: "page" },
    h("div", { class: "page-head" }, h("h1", {}, title), h("p", { class: "muted" }, intro), action ?? null),
    errorSlot, table(id, columns, body, title), more));
  const load = async (token) => {
    const page = await guarded(errorSlot, () => api("GET", path, { query: { page_size: 50, page_token: token } }));
    if (!page) return;
    for (const item of page[key]) body.append(row(item));
    if (!token && !page[key].length) body.append(h("tr", {}, h("td", { colspan: columns.length }, empty(none))));
    clear(more, moreButton(page.nextPageToken, load));
  };
  await load(undefined);
}

// A button that asks once more before it acts (no modal dialog).
export function confirmButton(label, confirmLabel, act, cls = "btn danger") {
  const button = h("button", { class: cls, type: "button" }, label);
  let armed = false;
  button.addEventListener("click", async () => {
    if (!armed) {
      armed = true;
      button.textContent = confirmLabel;
      button.classList.add("armed");
      setTimeout(() => {
        armed = false;
        button.textContent = label;
        button.classList.remove("armed");
      }, 4000);
      return;
    }
    button.disabled = true;
    await act();
    button.disabled = false;
  });
  return button;
}

// ---- messages ----------------------------------------------------------------------------------

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
const escapeHtml = (text) => String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]);

// A reply is Markdown (GitHub's flavour, a newline a line break). HTML written in it is shown
// as the text it is, never as markup; an image is a link to it (the console loads nothing
// from another origin). What marked makes then goes through DOMPurify, kept to the tags
// Markdown makes and no attribute but a link's, as the second wall.
const md = new Marked({
  gfm: true,
  breaks: true,
  renderer: {
    html: ({ text }) => escapeHtml(text),
    image: ({ href, text }) => `<a href="${escapeHtml(href)}">${escapeHtml(text || href)}</a>`,
  },
});
const PURIFY = {
  ALLOWED_TAGS: ["a", "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "del", "code",
    "pre", "blockquote", "ul", "ol", "li", "table", "thead", "tbody", "tr", "th", "td"],
  ALLOWED_ATTR: ["href", "title", "start"],
  ALLOW_DATA_ATTR: false,
  RETURN_DOM_FRAGMENT: true,
};
DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

export function markdown(text) {
  return DOMPurify.sanitize(md.parse(String(text ?? "")).trim(), PURIFY);
}

// A reply's bubble that renders its Markdown as it streams (at most once a frame).
export function replyBubble(text = "") {
  const bubble = h("div", { class: "bubble md" });
  let source = text;
  let pending = 0;
  const draw = () => {
    pending = 0;
    bubble.replaceChildren(markdown(source));
  };
  draw();
  return {
    el: bubble,
    add(delta) {
      source += delta;
      if (!pending) pending = requestAnimationFrame(draw);
    },
    end() {
      if (pending) cancelAnimationFrame(pending);
      draw();
    },
  };
}

function textOf(m) {
  if (typeof m.content === "string") return m.content;
  return Array.isArray(m.content) ? m.content.filter((p) => p.type === "text").map((p) => p.text).join("") : "";
}

// A tool call an assistant message makes: its name, id and arguments (filled as they stream).
export function toolCallView(c) {
  const args = h("pre", { class: "code tool-args" }, pretty(c.function?.arguments ?? ""));
  const el = h("div", { class: "tool-card", "data-tool-call-id": c.id },
    h("div", { class: "tool-title" }, "calls ", h("strong", {}, c.function?.name), " ", mono(c.id)), args);
  return { el, args };
}

// A message, stored (history, audit) or live (the chat builds the same from the stream): a
// chat bubble (a reply's Markdown rendered), its tool calls, or a tool's result. Only the audit
// shows a message's kind: a thread reads the same live and after a reload.
export function messageView(m, { audit = false } = {}) {
  const hidden = m.metadata?.hiddenFromUser;
  const meta = h(
    "div",
    { class: "msg-meta" },
    h("span", { class: "role" }, m.role),
    audit && m.kind ? h("span", {}, m.kind) : null,
    m.createdAt ? h("time", { datetime: m.createdAt, title: m.createdAt }, when(m.createdAt)) : null,
    m.finishedReason === "interrupted" ? badge("stopped", "cancelled") : null,
    audit && hidden ? badge("hidden", "hidden") : null,
    audit && m.visibilityMask !== undefined ? h("span", { title: "visibility mask" }, `mask ${m.visibilityMask}`) : null,
  );
  const cls = `msg msg-${m.role}${hidden ? " is-hidden" : ""}`;
  if (m.role === "tool") {
    return h(
      "div",
      { class: `${cls} tool-card${m.error ? " tool-error" : ""}`, "data-message-id": m.id },
      meta,
      h("div", { class: "tool-title" }, "result of ", mono(m.toolCallId ?? "")),
      h("pre", { class: "code" }, pretty(typeof m.content === "string" ? m.content : JSON.stringify(m.content))),
    );
  }
  const text = textOf(m);
  const body = m.role === "assistant"
    ? (text ? replyBubble(text).el : null)
    : (text ? h("div", { class: "bubble" }, text) : null);
  return h("div", { class: cls, "data-message-id": m.id }, meta, body, (m.toolCalls ?? []).map((c) => toolCallView(c).el));
}
