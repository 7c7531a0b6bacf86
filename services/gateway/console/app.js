// The console's shell: sign-in (a bearer token), navigation, and the views.
import { api, claims, clear, errorBox, h, mayAudit, session } from "./lib.js";
import * as audit from "./audit.js";
import * as automation from "./automation.js";
import * as chat from "./chat.js";
import * as memories from "./memories.js";
import * as threads from "./threads.js";

const VIEWS = { chat, threads, memories, automation, audit };
const root = document.getElementById("view");
const nav = document.getElementById("nav");
const who = document.getElementById("who");

// `make run` prints <gateway>/#token=<jwt>: the fragment never reaches a server; keep the
// token and take it out of the address bar (and of the browser's history).
function takeTokenFromUrl() {
  const match = location.hash.match(/^#token=([^&]+)/);
  if (!match) return false;
  session.setToken(decodeURIComponent(match[1]));
  history.replaceState(null, "", `${location.pathname}#/chat`);
  return true;
}

function signIn(problem) {
  nav.hidden = true;
  clear(who);
  const input = h("textarea", {
    id: "token-input",
    class: "token-input",
    rows: 4,
    placeholder: "eyJhbGciOiJIUzI1NiIs…",
    spellcheck: "false",
    autocomplete: "off",
  });
  const slot = h("div", {});
  if (problem) slot.append(errorBox(problem));
  const form = h(
    "form",
    { class: "card signin" },
    h("h1", {}, "Sign in"),
    h("p", { class: "muted" }, "Paste a bearer token. For development, ", h("code", {}, "make token SUB=alice"),
      " or ", h("code", {}, "agentmesh token --sub alice"), " prints one; ", h("code", {}, "make run"),
      " prints a link that signs in the development user."),
    h("label", { for: "token-input" }, "Token"),
    input,
    slot,
    h("div", { class: "actions" }, h("button", { class: "btn primary", type: "submit", id: "sign-in" }, "Sign in")),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = input.value.trim();
    clear(slot);
    try {
      await api("GET", "/api/v1/agent/threads", { query: { page_size: 1 }, token });
    } catch (err) {
      slot.append(errorBox(err));
      return;
    }
    session.setToken(token);
    if (!location.hash.startsWith("#/")) location.hash = "#/chat";
    start();
  });
  clear(root, h("div", { class: "center" }, form));
}

function showWho() {
  const c = claims(session.token());
  const signOut = h("button", { class: "btn ghost small", type: "button", id: "sign-out" }, "Sign out");
  signOut.addEventListener("click", () => {
    session.signOut();
    signIn();
  });
  clear(
    who,
    h("span", { class: "owner", title: "the token's subject: everything you see is theirs" }, c?.sub ?? "?"),
    c?.admin ? h("span", { class: "badge badge-admin" }, "admin") : null,
    signOut,
  );
}

let cleanup = null;

async function route() {
  if (!session.token()) return signIn();
  const [name, ...rest] = location.hash.replace(/^#\/?/, "").split("/");
  const view = VIEWS[name] ? name : "chat";
  for (const a of nav.querySelectorAll("a")) a.classList.toggle("active", a.dataset.view === view);
  if (cleanup) cleanup();
  cleanup = null;
  clear(root);
  const params = rest.map((p) => decodeURIComponent(p));
  try {
    cleanup = (await VIEWS[view].render(root, params, { onUnauthenticated: signIn })) ?? null;
  } catch (err) {
    if (err?.status === 401) return signIn(err);
    clear(root, errorBox(err));
  }
}

// The Audit tab only for whom it can answer (the page stays at #/audit, to give an admin token).
function showTabs() {
  nav.querySelector('[data-view="audit"]').hidden = !mayAudit();
}

function start() {
  nav.hidden = false;
  showTabs();
  showWho();
  route();
}

window.addEventListener("agentmesh:roles", showTabs);

takeTokenFromUrl();
window.addEventListener("hashchange", () => (takeTokenFromUrl() ? start() : route()));
if (session.token()) {
  if (!location.hash.startsWith("#/")) history.replaceState(null, "", `${location.pathname}#/chat`);
  start();
} else {
  signIn();
}
