// Chat: a thread's /history, a new run streamed live through @ag-ui/client with its step
// timeline (router, worker, memory; tool calls with arguments and results; timings), and
// Stop, which cancels the run on the server (POST /runs/{id}:cancel).
import { HttpAgent } from "./vendor/ag-ui-client.js";
import {
  api, ApiError, badge, browserZone, clear, empty, errorBox, guarded, h, messageView, mono,
  copyButton, moreButton, ms, newId, pathId, pretty, put, replyBubble, session, shortId, toolCallView, when,
} from "./lib.js";

const now = () => new Date().toISOString();

const EXAMPLES = [
  "What do you remember about me?",
  "Write a Python function that reverses a string, in a code block",
  "Plan a three-day trip to Lisbon, as a list",
];
const STAGES = "Each run goes through the router, which decides which tools the reply may use, then the "
  + "worker, the agent that writes the reply and calls those tools. Memory is what it knows about "
  + "you (facts your memory job or you saved, on the Memories page), recalled into every run.";

// One run's timeline: every stage as a row with its offset and duration (the server's event
// timestamps), drawn as a waterfall against the run's length so far.
class Timeline {
  constructor(list, head, runId) {
    this.list = list;
    this.head = head;
    this.runId = runId;
    this.sentAt = performance.now();
    this.t0 = null;
    this.last = null;
    this.rows = new Map();
    this.ended = false;
    clear(this.list);
    this.state = badge("starting", "running");
    this.summary = h("div", { class: "run-facts" });
    clear(this.head, h("div", { class: "run-id" }, "run ", mono(runId), " ", this.state), this.summary);
  }

  stamp(event) {
    const t = typeof event?.timestamp === "number" ? event.timestamp : Date.now();
    if (this.t0 === null) this.t0 = t;
    this.last = Math.max(this.last ?? t, t);
    return t;
  }

  point(key, kind, label, detail) {
    const e = this.row(key, kind, label, detail);
    e.end = e.start;
    e.point = true;
    return e;
  }

  row(key, kind, label, detail) {
    const bar = h("span", { class: "bar" });
    const time = h("span", { class: "when" });
    const body = h("div", { class: "tl-body" });
    const row = h(
      "li",
      { class: `tl tl-${kind}`, "data-step": key },
      h("div", { class: "tl-line" }, h("span", { class: "tl-label" }, label), detail ?? null, time),
      h("div", { class: "track" }, bar),
      body,
    );
    this.list.append(row);
    const entry = { row, bar, time, body, start: this.last, end: null };
    this.rows.set(key, entry);
    return entry;
  }

  layout() {
    const total = Math.max(1, (this.last ?? 0) - (this.t0 ?? 0));
    for (const e of this.rows.values()) {
      if (e.start === null) continue;
      const end = e.end ?? this.last;
      e.bar.style.marginLeft = `${(100 * (e.start - this.t0)) / total}%`;
      e.bar.style.width = `${Math.max(0.8, (100 * (end - e.start)) / total)}%`;
      const offset = `at +${ms(e.start - this.t0)}`;
      e.time.textContent = e.point ? offset : e.end === null ? `${offset} …` : ms(e.end - e.start);
    }
  }

  started(event) {
    this.stamp(event);
    const latency = performance.now() - this.sentAt;
    this.state.replaceWith((this.state = badge("running")));
    this.point("run", "run", "run started", h("span", { class: "muted", title: "from sending the request to the run's first event" }, `1st event ${ms(latency)}`));
    this.layout();
  }

  stepStarted(event) {
    this.stamp(event);
    this.row(`step:${event.stepName}`, "step", event.stepName, badge("step", "step"));
    this.layout();
  }

  stepFinished(event) {
    const t = this.stamp(event);
    const e = this.rows.get(`step:${event.stepName}`);
    if (e) {
      e.end = t;
      e.row.classList.add("done");
    }
    this.layout();
  }

  textStarted(event) {
    this.stamp(event);
    const e = this.row(`text:${event.messageId}`, "text", "text", h("span", { class: "muted chars" }, ""));
    e.chars = 0;
    this.layout();
  }

  textDelta(event) {
    this.stamp(event);
    const e = this.rows.get(`text:${event.messageId}`);
    if (e) {
      e.chars += event.delta.length;
      e.row.querySelector(".chars").textContent = `${e.chars} characters`;
    }
    this.layout();
  }

  textEnded(event) {
    const t = this.stamp(event);
    const e = this.rows.get(`text:${event.messageId}`);
    if (e) e.end = t;
    this.layout();
  }

  toolStarted(event) {
    this.stamp(event);
    const e = this.row(`tool:${event.toolCallId}`, "tool", event.toolCallName, badge("tool", "tool"));
    e.args = "";
    e.argsEl = h("pre", { class: "code tool-args" });
    e.resultEl = h("pre", { class: "code tool-result" }, "…");
    put(e.body, [h("div", { class: "small muted" }, "arguments"), e.argsEl, h("div", { class: "small muted" }, "result"), e.resultEl]);
    this.layout();
    return e;
  }

  toolArgs(event) {
    this.stamp(event);
    const e = this.rows.get(`tool:${event.toolCallId}`);
    if (e) {
      e.args += event.delta;
      e.argsEl.textContent = e.args;
    }
    this.layout();
  }

  toolEnded(event) {
    this.stamp(event);
    const e = this.rows.get(`tool:${event.toolCallId}`);
    if (e) e.argsEl.textContent = pretty(e.args);
    this.layout();
  }

  toolResult(event) {
    const t = this.stamp(event);
    const e = this.rows.get(`tool:${event.toolCallId}`);
    if (e) {
      e.end = t;
      e.resultEl.textContent = pretty(event.content);
      e.row.classList.add("done");
    }
    this.layout();
  }

  custom(event) {
    this.stamp(event);
    const e = this.point(`custom:${this.rows.size}`, "custom", event.name, null);
    e.body.append(h("pre", { class: "code" }, JSON.stringify(event.value, null, 2)));
    this.layout();
  }

  finished(event) {
    const t = this.stamp(event);
    this.ended = true;
    const outcome = event.outcome?.type ?? "success";
    this.state.replaceWith((this.state = badge(outcome === "success" ? "succeeded" : outcome)));
    const facts = [h("span", {}, "total ", h("strong", {}, ms(t - this.t0)))];
    for (const u of event.usage ?? []) {
      facts.push(h("span", { class: "usage" }, `${u.inputTokens} in · ${u.outputTokens} out tokens`, u.estimated ? " (estimated)" : ""));
    }
    if (event.outcome?.pendingToolCallIds?.length) facts.push(h("span", {}, `pending tool calls: ${event.outcome.pendingToolCallIds.join(", ")}`));
    put(this.summary, facts);
    this.point("end", "end", `run ${outcome}`, null);
    this.layout();
  }

  failed(event) {
    this.stamp(event);
    this.ended = true;
    // OUTCOME_UNKNOWN is the stream lost, not the run (sse-events.md): its record tells.
    const unknown = event.code === "OUTCOME_UNKNOWN";
    this.state.replaceWith((this.state = unknown ? badge("outcome unknown", "pending") : badge("failed")));
    const e = this.point("end", "error", unknown ? "stream lost" : "run failed", h("code", {}, event.code ?? "RUN_ERROR"));
    e.body.append(h("div", { class: "error small" }, event.message));
    this.layout();
  }

  // The POST was answered with an error: what that says about the run (api-endpoints.md,
  // "Did the run start?").
  refused(err) {
    this.ended = true;
    const status = err?.status;
    const unknown = status === 504;
    this.state.replaceWith((this.state = unknown ? badge("outcome unknown", "pending") : badge("not started", "failed")));
    const why = !status
      ? "the request did not reach the gateway: nothing was started"
      : unknown
        ? "it may have started: send it again with the same run id, or read its record"
        : status === 502
          ? "the orchestrator ended it without any event"
          : `HTTP ${status}: the run was not started and nothing of it was stored`;
    this.summary.append(h("span", { class: "muted" }, why));
  }

  record(run) {
    if (!run) return;
    const p = run.profile ?? {};
    put(this.summary, [h("span", {}, "profile ", h("strong", {}, p.name ?? "—")),
      h("span", {}, `router ${p.enableRouter ? "on" : "off"} · ${p.executor ?? "—"}`),
      h("span", {}, "stored as ", badge(run.state))]);
  }
}

export async function render(root, params) {
  let thread = params[0] || null;
  let running = null;

  const threadList = h("nav", { class: "thread-list", id: "chat-threads" });
  // Scrollable, so it takes focus (a keyboard scrolls it) and has a name.
  const messages = h("div", { class: "messages", id: "messages", tabindex: 0, role: "log", "aria-label": "Messages" });
  const errorSlot = h("div", { id: "chat-error" });
  const timeline = h("ol", { class: "timeline", id: "timeline" });
  const runHead = h("div", { class: "run-head", id: "run-head" }, empty("No run yet: send a message and its stages show here as they stream."));
  const title = h("h2", { class: "conv-title" });
  const input = h("textarea", { id: "chat-input", rows: 2, "aria-label": "Message", placeholder: "Message (Enter sends, Shift+Enter a new line)" });
  const profile = h("input", { id: "chat-profile", class: "profile-input", "aria-label": "Profile", placeholder: "profile: chat_default", autocomplete: "off", spellcheck: "false" });
  const send = h("button", { class: "btn primary", id: "send", type: "submit" }, "Send");
  const stop = h("button", { class: "btn danger", id: "stop", type: "button", hidden: true }, "Stop");
  const reload = h("button", { class: "btn ghost small", type: "button", id: "reload-history", title: "GET …/history" }, "Reload history");
  const composer = h("form", { class: "composer" }, input, h("div", { class: "composer-row" }, profile, stop, send));

  clear(
    root,
    h(
      "div",
      { class: "chat-layout" },
      h("aside", { class: "sidebar" },
        h("div", { class: "sidebar-head" }, h("h2", {}, "Conversations"),
          h("a", { class: "btn small", href: "#/chat", id: "new-chat" }, "New chat")),
        threadList),
      h("section", { class: "conversation" },
        h("div", { class: "conv-head" }, title, reload), messages, errorSlot, composer),
      h("aside", { class: "runpanel", "aria-live": "polite" }, h("h2", {}, "Run"), runHead, timeline),
    ),
  );

  const scroll = () => {
    messages.scrollTop = messages.scrollHeight;
  };

  function showTitle() {
    clear(title, thread ? ["Thread ", mono(thread)] : "New conversation");
    reload.hidden = !thread;
  }

  async function loadThreads() {
    const page = await guarded(threadList, () => api("GET", "/api/v1/agent/threads", { query: { page_size: 100 } }));
    if (!page) return;
    const chats = page.threads
      .filter((t) => t.runtimeMode === "chat")
      .sort((a, b) => (b.updateTime ?? "").localeCompare(a.updateTime ?? ""));
    if (!chats.length) threadList.append(empty("No conversations yet."));
    for (const t of chats) {
      const active = t.id === thread;
      threadList.append(
        h("div", { class: active ? "thread active" : "thread" },
          h("a", { href: `#/chat/${pathId(t.id)}`, "aria-current": active ? "page" : null },
            h("code", { class: "id thread-id", title: t.id, "data-id": t.id }, shortId(t.id)),
            h("span", { class: "small thread-facts" }, `${t.messageCount} messages · ${when(t.updateTime)}`)),
          copyButton(t.id)),
      );
    }
  }

  // An empty thread: what to try, and what the run panel's stages are.
  function welcome() {
    return h("div", { class: "welcome", id: "welcome" },
      h("p", { class: "welcome-lead" }, "Say something to start, or try one of these:"),
      h("div", { class: "examples" }, EXAMPLES.map((text) => h("button", {
        class: "btn example", type: "button", onclick: () => {
          input.value = text;
          composer.requestSubmit();
        },
      }, text))),
      h("p", { class: "muted small" }, STAGES));
  }

  async function loadHistory() {
    clear(messages);
    if (!thread) {
      messages.append(welcome());
      return;
    }
    const older = async (token) => {
      const page = await guarded(errorSlot, () =>
        api("GET", `/api/v1/agent/threads/${pathId(thread)}/history`, {
          query: { direction: "backward", page_size: 50, page_token: token },
        }));
      if (!page) return;
      const first = messages.firstChild;
      for (const m of [...page.messages].reverse()) messages.insertBefore(messageView(m), first);
      const more = moreButton(page.nextPageToken, older);
      if (more) messages.insertBefore(h("div", { class: "older" }, more), messages.firstChild);
      if (!token) scroll();
    };
    await older(undefined);
    if (!messages.childElementCount && !errorSlot.childElementCount) messages.append(welcome());
  }

  function setRunning(on) {
    send.hidden = on;
    stop.hidden = !on;
    stop.disabled = false;
    input.disabled = on;
  }

  async function startRun(text) {
    clear(errorSlot);
    if (!thread) {
      thread = newId("t");
      history.replaceState(null, "", `#/chat/${pathId(thread)}`);
      clear(messages);
      showTitle();
    }
    for (const e of messages.querySelectorAll(".empty, .welcome")) e.remove();
    const runId = newId("run");
    const messageId = newId("m");
    messages.append(messageView({ id: messageId, role: "user", content: text, createdAt: now() }));
    scroll();
    const tl = new Timeline(timeline, runHead, runId);
    const agent = new HttpAgent({
      url: "/api/v1/agent/runs",
      headers: { Authorization: `Bearer ${session.token()}`, "X-Timezone": browserZone() },
      threadId: thread,
    });
    agent.messages = [{ id: messageId, role: "user", content: text }];
    const replies = new Map();
    const thoughts = new Map();
    const toolCalls = new Map();
    // The assistant message `id` streams into, made the first time it is named.
    const messageEl = (id) => {
      let el = messages.querySelector(`.msg[data-message-id="${CSS.escape(id)}"]`);
      if (!el) messages.append((el = messageView({ id, role: "assistant", createdAt: now() })));
      return el;
    };
    running = { runId };
    setRunning(true);
    const subscriber = {
      onRunStartedEvent: ({ event }) => tl.started(event),
      onStepStartedEvent: ({ event }) => tl.stepStarted(event),
      onStepFinishedEvent: ({ event }) => tl.stepFinished(event),
      onTextMessageStartEvent: ({ event }) => {
        const reply = replyBubble();
        reply.el.classList.add("streaming");
        messageEl(event.messageId).querySelector(".msg-meta").after(reply.el);
        replies.set(event.messageId, reply);
        tl.textStarted(event);
        scroll();
      },
      onTextMessageContentEvent: ({ event }) => {
        replies.get(event.messageId)?.add(event.delta);
        tl.textDelta(event);
        scroll();
      },
      onTextMessageEndEvent: ({ event }) => {
        const reply = replies.get(event.messageId);
        reply?.end();
        reply?.el.classList.remove("streaming");
        tl.textEnded(event);
        scroll();
      },
      // A tool call goes on the assistant message that makes it, its result in a message of
      // its own: as /history has them.
      onToolCallStartEvent: ({ event }) => {
        tl.toolStarted(event);
        const call = toolCallView({ id: event.toolCallId, function: { name: event.toolCallName, arguments: "" } });
        messageEl(event.parentMessageId ?? event.toolCallId).append(call.el);
        toolCalls.set(event.toolCallId, { args: call.args, text: "" });
        scroll();
      },
      onToolCallArgsEvent: ({ event }) => {
        tl.toolArgs(event);
        const c = toolCalls.get(event.toolCallId);
        if (c) c.args.textContent = c.text += event.delta;
      },
      onToolCallEndEvent: ({ event }) => {
        tl.toolEnded(event);
        const c = toolCalls.get(event.toolCallId);
        if (c) c.args.textContent = pretty(c.text);
      },
      onToolCallResultEvent: ({ event }) => {
        tl.toolResult(event);
        messages.append(messageView({ id: event.messageId, role: "tool", toolCallId: event.toolCallId, content: event.content, createdAt: now() }));
        scroll();
      },
      onReasoningMessageContentEvent: ({ event }) => {
        let el = thoughts.get(`reasoning:${event.messageId}`);
        if (!el) {
          el = h("div", { class: "bubble reasoning" });
          messages.append(h("div", { class: "msg msg-reasoning" }, h("div", { class: "msg-meta" }, h("span", { class: "role" }, "thinking")), el));
          thoughts.set(`reasoning:${event.messageId}`, el);
        }
        el.append(event.delta);
      },
      onCustomEvent: ({ event }) => tl.custom(event),
      onRunFinishedEvent: ({ event }) => {
        tl.finished(event);
        // A stopped run keeps what it streamed (stored as interrupted): say so on its reply.
        if (event.outcome?.type === "cancelled") {
          for (const reply of replies.values()) reply.el.parentElement?.querySelector(".msg-meta")?.append(badge("stopped", "cancelled"));
        }
      },
      onRunErrorEvent: ({ event }) => tl.failed(event),
    };
    const props = profile.value.trim() ? { forwardedProps: { agentmesh: { profile: profile.value.trim() } } } : {};
    try {
      await agent.runAgent({ runId, ...props }, subscriber);
    } catch (err) {
      if (!tl.ended) {
        const apiErr = err?.status ? new ApiError(err.status, err.payload ?? {}) : err;
        errorSlot.append(errorBox(apiErr));
        tl.refused(err);
      }
    }
    running = null;
    setRunning(false);
    input.focus();
    clear(threadList);
    await loadThreads();
    try {
      tl.record(await api("GET", `/api/v1/agent/runs/${pathId(runId)}`));
    } catch {
      // A run that was refused has no record: the error above already says why.
    }
  }

  composer.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = input.value.trim();
    if (!text || running) return;
    input.value = "";
    startRun(text);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      composer.requestSubmit();
    }
  });
  stop.addEventListener("click", async () => {
    if (!running) return;
    stop.disabled = true;
    const runId = running.runId;
    try {
      const answer = await api("POST", `/api/v1/agent/runs/${pathId(runId)}:cancel`);
      timeline.append(h("li", { class: "tl tl-note" }, `cancel asked: the run is ${answer.state}`));
    } catch (err) {
      errorSlot.append(errorBox(err));
      stop.disabled = false;
    }
  });
  reload.addEventListener("click", () => loadHistory());

  showTitle();
  await Promise.all([loadThreads(), loadHistory()]);
  input.focus();
}
