// Automation: the caller's jobs (create, edit, pause, resume, trigger, delete), each job's next
// run in the job's own time zone, and its past runs with every attempt and its error.
import {
  api, badge, browserZone, clear, confirmButton, empty, errorBox, field, guarded, h, markInvalid,
  mono, listing, pathId, table, when, ago,
} from "./lib.js";

const TOOLS = ["memory_write", "memory_forget", "memory_search"];
const WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
const GOING = new Set(["pending", "dispatching"]);

function schedule(job) {
  const s = job.schedule ?? {};
  if (s.type === "once") return `once, ${when(s.runAt, job.timezone)}`;
  if (s.type === "daily") return `every day at ${s.localTime}`;
  if (s.type === "weekly") return `every ${WEEKDAYS[(s.weekday ?? 1) - 1]} at ${s.localTime}`;
  if (s.type === "cron") return `cron ${s.cron}`;
  return s.type ?? "—";
}

// The next run in the job's own time zone (what its schedule means), with the UTC instant.
function nextRun(job) {
  if (!job.nextRunTime) return h("span", { class: "muted" }, job.status === "paused" ? "paused: none" : "none");
  return h("span", { class: "next-run", title: job.nextRunTime },
    h("strong", {}, when(job.nextRunTime, job.timezone)), " ", h("span", { class: "muted small" }, `${job.timezone} · ${ago(job.nextRunTime)}`));
}

export async function render(root, params) {
  if (params[0] === "new") return renderForm(root, null);
  if (params[0] && params[1] === "edit") return renderJob(root, params[0], true);
  if (params[0]) return renderJob(root, params[0], false);
  return listing(root, {
    title: "Automation",
    intro: "Agent work on a schedule in your local time. Each slot runs once.",
    action: h("a", { class: "btn primary", href: "#/automation/new", id: "new-job" }, "New job"),
    id: "jobs-table",
    columns: ["Job", "Status", "Schedule", "Next run (job's time)", "Version"],
    path: "/api/v1/automation/jobs",
    key: "jobs",
    none: "No jobs yet.",
    row: (j) => h("tr", { "data-job-id": j.id },
      h("td", {}, h("a", { href: `#/automation/${pathId(j.id)}` }, j.title), j.defaultJob ? h("span", { class: "muted small" }, " default") : null),
      h("td", {}, badge(j.status)),
      h("td", {}, schedule(j), h("div", { class: "muted small" }, j.timezone)),
      h("td", {}, nextRun(j)),
      h("td", { class: "num" }, String(j.version))),
  });
}

function fact(label, ...value) {
  return [h("dt", {}, label), h("dd", {}, ...value)];
}

function runsTable(job, runs) {
  if (!runs.length) return empty("No runs yet: trigger the job, or wait for its next slot.");
  // Two zones in one table: the slot is the job's wall time, the rest the browser's.
  const yours = browserZone();
  const columns = [`Slot (job's zone, ${job.timezone})`, "State", "Trigger", "Attempt", `Dispatched (your zone, ${yours})`,
    `Finished (your zone, ${yours})`, "Run", "Errors"];
  return table("job-runs", columns, h("tbody", {}, runs.map((r) => h("tr", { "data-job-run-id": r.id, "data-state": r.state },
      h("td", {}, when(r.scheduledSlot, job.timezone)),
      h("td", {}, badge(r.state), r.nextAttemptTime ? h("div", { class: "muted small" }, `next attempt ${when(r.nextAttemptTime)} (your zone)`) : null),
      h("td", {}, r.trigger),
      h("td", { class: "num" }, String(r.attempt)),
      h("td", {}, when(r.dispatchTime)),
      h("td", {}, when(r.finishTime)),
      h("td", {}, mono(r.runId, `#/threads/${pathId(`automation:${job.id}`)}`)),
      h("td", {}, r.errors?.length
        ? h("ol", { class: "attempt-errors" }, r.errors.map((e) => h("li", {}, h("span", { class: "muted small" }, `attempt ${e.attempt} · ${when(e.time)}`), h("div", { class: "error-inline" }, e.error))))
        : "—")))), "Runs");
}

async function renderJob(root, jobId, editing) {
  const errorSlot = h("div", { id: "job-error" });
  const head = h("div", { class: "page-head" });
  const facts = h("dl", { class: "facts" });
  const runsBox = h("div", { id: "job-runs-box" });
  const actions = h("div", { class: "actions" });
  clear(root, h("section", { class: "page" }, head, errorSlot, actions, facts, h("h2", {}, "Runs"), runsBox));
  let job = await guarded(errorSlot, () => api("GET", `/api/v1/automation/jobs/${pathId(jobId)}`));
  if (!job) return;
  if (editing) return renderForm(root, job);
  let timer = null;
  let until = 0;

  const loadRuns = async () => {
    const page = await api("GET", `/api/v1/automation/jobs/${pathId(jobId)}/runs`, { query: { page_size: 50 } }).catch((err) => {
      clear(runsBox, errorBox(err));
      return null;
    });
    if (!page) return;
    clear(runsBox, runsTable(job, page.runs));
    const going = page.runs.some((r) => GOING.has(r.state));
    clearTimeout(timer);
    if (going || Date.now() < until) timer = setTimeout(loadRuns, 1000);
  };

  const act = async (action) => {
    const answer = await guarded(errorSlot, () => api("POST", `/api/v1/automation/jobs/${pathId(jobId)}:${action}`));
    if (!answer) return;
    if (action === "trigger") {
      until = Date.now() + 5000;
    } else {
      job = answer;
    }
    show();
    await loadRuns();
  };

  const show = () => {
    clear(head,
      h("a", { href: "#/automation", class: "back" }, "← Automation"),
      h("h1", {}, job.title, " ", badge(job.status)),
      job.defaultJob ? h("p", { class: "muted" }, "Your default job (created when you registered).") : null);
    const paused = job.status === "paused";
    const over = job.status === "completed" || job.status === "failed";
    clear(actions,
      h("a", { class: "btn", href: `#/automation/${pathId(jobId)}/edit`, id: "edit-job" }, "Edit"),
      over ? null : h("button", { class: "btn", type: "button", id: paused ? "resume-job" : "pause-job", onclick: () => act(paused ? "resume" : "pause") }, paused ? "Resume" : "Pause"),
      h("button", { class: "btn primary", type: "button", id: "trigger-job", onclick: () => act("trigger") }, "Run now"),
      confirmButton("Delete", "Delete job and its runs?", async () => {
        const ok = await guarded(errorSlot, () => api("DELETE", `/api/v1/automation/jobs/${pathId(jobId)}`));
        if (ok !== undefined) location.hash = "#/automation";
      }));
    const p = job.executionProfile ?? {};
    clear(facts,
      fact("Schedule", schedule(job)),
      fact("Time zone", job.timezone),
      fact("Next run", nextRun(job)),
      fact("Next slot", job.nextSlotTime ? [when(job.nextSlotTime, job.timezone), h("span", { class: "muted small" }, ` ${job.timezone}`)] : "—"),
      fact("Last run", job.lastRunTime ? [when(job.lastRunTime, job.timezone), h("span", { class: "muted small" }, ` ${job.timezone}`)] : "—"),
      fact("Prompt", h("div", { class: "prompt" }, job.config?.prompt ?? "")),
      fact("Tools", (job.config?.tools ?? []).length ? job.config.tools.map((t) => [h("code", {}, t), " "]) : "—"),
      fact("Profile", `${p.name ?? "—"} · router ${p.enableRouter ? "on" : "off"} · ${p.executor ?? "—"}`,
        p.historyPolicy ? h("span", { class: "muted" }, ` · history ${p.historyPolicy.window}`) : null),
      fact("Catch-up", job.catchUpPolicy ?? "latest"),
      fact("Jitter", `${job.jitterSeconds ?? 0} s`),
      fact("Id", mono(job.id)),
      fact("Version", String(job.version)),
      fact("Thread", mono(`automation:${job.id}`, `#/threads/${pathId(`automation:${job.id}`)}`)));
  };
  show();
  await loadRuns();
  return () => clearTimeout(timer);
}

function localInputValue(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

function renderForm(root, job) {
  const s = job?.schedule ?? { type: "daily", localTime: "10:00" };
  const title = h("input", { id: "job-title", value: job?.title ?? "", required: true, maxlength: 200 });
  const type = h("select", { id: "job-type" }, ["once", "daily", "weekly", "cron"].map((t) => h("option", { value: t }, t)));
  type.value = s.type;
  const runAt = h("input", { id: "job-run-at", type: "datetime-local", value: localInputValue(s.runAt) });
  const localTime = h("input", { id: "job-local-time", type: "time", value: s.localTime ?? "10:00" });
  const weekday = h("select", { id: "job-weekday" }, WEEKDAYS.map((d, i) => h("option", { value: String(i + 1) }, d)));
  weekday.value = String(s.weekday ?? 1);
  const cron = h("input", { id: "job-cron", value: s.cron ?? "", placeholder: "0 9 * * 1-5", spellcheck: "false" });
  const zones = h("datalist", { id: "zones" }, (Intl.supportedValuesOf?.("timeZone") ?? []).map((z) => h("option", { value: z })));
  const timezone = h("input", { id: "job-timezone", value: job?.timezone ?? browserZone(), list: "zones", autocomplete: "off" });
  const prompt = h("textarea", { id: "job-prompt", rows: 4, maxlength: 2000 });
  prompt.value = job?.config?.prompt ?? "";
  const tools = TOOLS.map((t) => h("label", { class: "check" },
    h("input", { type: "checkbox", value: t, checked: (job?.config?.tools ?? []).includes(t), "data-tool": t }), " ", h("code", {}, t)));
  const catchUp = h("select", { id: "job-catch-up" }, ["latest", "skip", "all"].map((c) => h("option", { value: c }, c)));
  catchUp.value = job?.catchUpPolicy ?? "latest";
  const jitter = h("input", { id: "job-jitter", type: "number", min: 0, max: 86400, value: String(job?.jitterSeconds ?? 0) });
  const profile = h("textarea", { id: "job-profile", rows: 4, spellcheck: "false", placeholder: "{} (default: automation_memory_default)" });
  profile.value = job?.executionProfile ? JSON.stringify(job.executionProfile, null, 2) : "";
  const errorSlot = h("div", { id: "job-form-error" });
  const whenFields = {
    once: field("Run at (your local time)", "schedule.runAt", runAt),
    daily: field("Local time", "schedule.localTime", localTime, "HH:MM in the job's time zone"),
    weekday: field("Weekday", "schedule.weekday", weekday),
    cron: field("Cron expression", "schedule.cron", cron, "five fields, on the job's local wall time"),
  };
  const showWhen = () => {
    whenFields.once.hidden = type.value !== "once";
    whenFields.daily.hidden = !["daily", "weekly"].includes(type.value);
    whenFields.weekday.hidden = type.value !== "weekly";
    whenFields.cron.hidden = type.value !== "cron";
  };
  type.addEventListener("change", showWhen);
  showWhen();

  const form = h("form", { class: "card job-form", id: "job-form", novalidate: true },
    field("Title", "title", title),
    h("div", { class: "grid2" }, field("Schedule", "schedule.type", type), whenFields.once, whenFields.weekday, whenFields.daily, whenFields.cron),
    field("Time zone", "timezone", timezone, "an IANA zone, e.g. Europe/Berlin"),
    zones,
    field("Prompt", "config.prompt", prompt, "the run's input message (hidden from history)"),
    h("fieldset", { class: "field", "data-for": "config.tools" }, h("legend", { class: "field-label" }, "Tools"), tools),
    h("div", { class: "grid2" }, field("Catch-up after downtime", "catchUpPolicy", catchUp), field("Jitter (seconds)", "jitterSeconds", jitter)),
    h("details", { open: Boolean(job) }, h("summary", {}, "Execution profile (JSON)"), field("", "executionProfile", profile, "empty: the default memory profile")),
    errorSlot,
    h("div", { class: "actions" },
      h("a", { class: "btn ghost", href: job ? `#/automation/${pathId(job.id)}` : "#/automation" }, "Cancel"),
      h("button", { class: "btn primary", type: "submit", id: "save-job" }, job ? "Save changes" : "Create job")));

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    for (const el of form.querySelectorAll(".invalid")) el.classList.remove("invalid");
    const sched = { type: type.value };
    if (type.value === "once") sched.runAt = runAt.value ? new Date(runAt.value).toISOString() : "";
    if (type.value === "daily" || type.value === "weekly") sched.localTime = localTime.value;
    if (type.value === "weekly") sched.weekday = Number(weekday.value);
    if (type.value === "cron") sched.cron = cron.value;
    const body = {
      title: title.value,
      schedule: sched,
      timezone: timezone.value,
      config: { prompt: prompt.value, tools: tools.map((l) => l.querySelector("input")).filter((i) => i.checked).map((i) => i.value) },
      catchUpPolicy: catchUp.value,
      jitterSeconds: Number(jitter.value || 0),
    };
    clear(errorSlot);
    if (profile.value.trim()) {
      try {
        body.executionProfile = JSON.parse(profile.value);
      } catch (err) {
        errorSlot.append(errorBox(new Error(`Execution profile: not JSON (${err.message})`)));
        return;
      }
    } else if (job) {
      body.executionProfile = null;
    }
    try {
      const saved = job
        ? await api("PATCH", `/api/v1/automation/jobs/${pathId(job.id)}`, { body: { ...body, version: job.version } })
        : await api("POST", "/api/v1/automation/jobs", { body, headers: { "Idempotency-Key": crypto.randomUUID() } });
      location.hash = `#/automation/${pathId(saved.id)}`;
    } catch (err) {
      errorSlot.append(errorBox(err));
      markInvalid(form, err);
    }
  });
  clear(root, h("section", { class: "page narrow" },
    h("div", { class: "page-head" },
      h("a", { href: job ? `#/automation/${pathId(job.id)}` : "#/automation", class: "back" }, job ? "← Job" : "← Automation"),
      h("h1", {}, job ? `Edit “${job.title}”` : "New job")),
    form));
  title.focus();
}
