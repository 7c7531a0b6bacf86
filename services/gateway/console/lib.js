// Shared pieces of the console: DOM building, the HTTP API, errors, times and badges.
// Everything the API returns is put into the page as text (never as HTML).

const TOKEN_KEY = "agentmesh.token";
const ADMIN_KEY = "agentmesh.adminToken";

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
  setToken: (t) => localStorage.setItem(TOKEN_KEY, t),
  adminToken: () => sessionStorage.getItem(ADMIN_KEY) || "",
  setAdminToken: (t) => (t ? sessionStorage.setItem(ADMIN_KEY, t) : sessionStorage.removeItem(ADMIN_KEY)),
  signOut: () => {
    localStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(ADMIN_KEY);
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
    err.requestId ? h("div", { class: "muted small" }, "request id ", h("code", {}, err.requestId)) : null,
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

// A listing's table: its header cells, and the tbody the view fills.
export function table(id, columns, body) {
  return h("div", { class: "table-wrap" },
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

export function mono(text) {
  return h("code", { class: "id", title: text }, text);
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
    errorSlot, table(id, columns, body), more));
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

// A stored message (history, audit) as a chat bubble or a tool card.
export function messageView(m, { audit = false } = {}) {
  const hidden = m.metadata?.hiddenFromUser;
  const meta = h(
    "div",
    { class: "msg-meta" },
    h("span", { class: "role" }, m.role),
    m.kind ? h("span", {}, m.kind) : null,
    m.createdAt ? h("time", { datetime: m.createdAt, title: m.createdAt }, when(m.createdAt)) : null,
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
  const text = typeof m.content === "string"
    ? m.content
    : Array.isArray(m.content) ? m.content.filter((p) => p.type === "text").map((p) => p.text).join("") : "";
  return h(
    "div",
    { class: cls, "data-message-id": m.id },
    meta,
    text ? h("div", { class: "bubble" }, text) : null,
    (m.toolCalls ?? []).map((c) =>
      h(
        "div",
        { class: "tool-card" },
        h("div", { class: "tool-title" }, "calls ", h("strong", {}, c.function?.name), " ", mono(c.id)),
        h("pre", { class: "code" }, pretty(c.function?.arguments ?? "")),
      ),
    ),
  );
}
