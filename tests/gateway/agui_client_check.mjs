// Runs one AG-UI run through the official client (@ag-ui/client HttpAgent) against a gateway:
//
//   node tests/gateway/agui_client_check.mjs <url> <token> <threadId> <runId> <text> [<lastEventId>]
//
// <url> is the runs endpoint (http://HOST:PORT/api/v1/agent/runs). With <lastEventId>, the
// client resumes instead: <url> is then the run's events endpoint
// (.../api/v1/agent/runs/<runId>/events), fetched with GET and `Last-Event-ID: <lastEventId>`,
// and the client checks the resumed stream as it checks any run. Prints one JSON line
// {"ok": bool, "eventTypes": [...], "stepNames": [...], "text": "...", "error"?: "..."}
// and exits 0 only if the client consumed the whole stream without any error (its own
// verification of the event sequence included) and the run finished (no RUN_ERROR).
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const require = createRequire(new URL("../../tools/node/package.json", import.meta.url));
const { HttpAgent } = await import(pathToFileURL(require.resolve("@ag-ui/client")).href);

const [url, token, threadId, runId, text, lastEventId] = process.argv.slice(2);
if (!url || !token || !threadId || !runId || text === undefined) {
  console.error("usage: node agui_client_check.mjs <url> <token> <threadId> <runId> <text>");
  process.exit(2);
}

const eventTypes = [];
const stepNames = [];
let reply = "";
let runError = null;
let finished = false;

// Resuming: the same client and checks, over GET with Last-Event-ID instead of POST.
class ResumingAgent extends HttpAgent {
  requestInit() {
    return {
      method: "GET",
      headers: { ...this.headers, Accept: "text/event-stream", "Last-Event-ID": lastEventId },
      signal: this.abortController.signal,
    };
  }
}

const Agent = lastEventId === undefined ? HttpAgent : ResumingAgent;
const agent = new Agent({
  url,
  headers: { Authorization: `Bearer ${token}` },
  threadId,
  initialMessages: [{ id: `${runId}-user`, role: "user", content: text }],
});

const subscriber = {
  onEvent({ event }) {
    eventTypes.push(event.type);
  },
  onStepStartedEvent({ event }) {
    stepNames.push(event.stepName);
  },
  onTextMessageContentEvent({ event }) {
    reply += event.delta;
  },
  onRunErrorEvent({ event }) {
    runError = `${event.code ?? "RUN_ERROR"}: ${event.message}`;
  },
  onRunFinishedEvent() {
    finished = true;
  },
};

let error = null;
try {
  await agent.runAgent({ runId }, subscriber);
} catch (e) {
  error = e instanceof Error ? e.message : String(e);
}
error = error ?? runError ?? (finished ? null : "the stream ended without RUN_FINISHED");
const ok = error === null;
const out = { ok, eventTypes, stepNames, text: reply };
if (!ok) out.error = error;
console.log(JSON.stringify(out));
process.exit(ok ? 0 : 1);
