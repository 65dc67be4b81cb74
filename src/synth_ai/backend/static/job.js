// One job: facts, live charts, the event log, checkpoints and a "try it" chat with the resulting model.
// Polls the ordinary JSON routes about once a second while the page is open.
import { api, badge, duration, fail, h, poll, replace, table, when } from "./dom.js";
import { Chart } from "./charts.js";
import { messageNode } from "./evals.js";

const POLL_MS = 1000;
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
// [title, {job kind: its series}]: a job's page shows only the panels with series for its kind.
const PANELS = [
  ["Loss", { sft: [["train.loss", "train"], ["val.loss", "validation"]], rl: [["loss", "RL loss"]] }],
  ["Learning rate", { sft: [["learning_rate", "learning rate"]] }],
  ["RL reward", { rl: [["reward.mean", "mean reward"]] }],
  ["Eval return", { rl: [["eval.mean_return", "mean return"]] }],
];
// Panels drawn only once one of their series has a point: asynchronous GSPO's (docs/rl.md) and the sampler's
// agreement with the trainer.
const OPTIONAL_PANELS = [
  ["Staleness", { rl: [["staleness.mean", "mean"], ["staleness.max", "max"], ["stale_samples.dropped", "dropped"]] }],
  ["Backlog", { rl: [["backlog.groups", "finished groups waiting"], ["trainer_idle_s", "trainer idle, s"]] }],
  ["Sampler vs trainer", { rl: [["mismatch_kl", "mismatch KL"], ["is_ratio.mean", "IS ratio mean"],
    ["is_ratio.max", "IS ratio max"], ["is_truncated_frac", "truncated"]] }],
  ["Groups without signal", { rl: [["frac_reward_zero_std", "share of groups with equal rewards"]] }],
];
const METRICS_PAGE = 5000;
const EVENTS_PAGE = 100; // the log opens on the newest page; "Show earlier events" reads the page before

export function jobPage(root, jobId) {
  let base = null; // its events and metrics: /learning/jobs/<id> (SFT) or /rl/jobs/<id>, once its kind is known
  const facts = h("div", { class: "facts", id: "job-facts" });
  const chartsNode = h("div", { class: "charts" });
  let charts = null; // made once the job's kind is known
  const eventsBody = h("tbody", {});
  const earlier = h("button", { id: "events-earlier", type: "button", hidden: true }, "Show earlier events");
  const checkpoints = h("div", { id: "checkpoints" }, h("p", { class: "muted" }, "None yet."));
  const chat = h("div", { id: "chat-area" }, h("p", { class: "muted" }, "Available when the job succeeds."));
  const error = h("div", {});
  replace(root, h("h1", {}, "Job ", h("span", { class: "mono" }, jobId)), error, facts,
    h("h2", {}, "Metrics"), chartsNode,
    h("div", { class: "split" },
      h("div", {}, h("h2", {}, "Events ", h("span", { class: "muted" }, "(newest first)")),
        h("div", { class: "events" }, h("table", { id: "events" }, h("thead", {}, h("tr", {},
          ["#", "Time", "Type", "Message"].map((t) => h("th", {}, t)))), eventsBody), earlier)),
      h("div", {}, h("h2", {}, "Checkpoints"), checkpoints, h("h2", {}, "Result"), chat)));

  const points = new Map(); // name -> Map(step -> value)
  let newestSeq = null, oldestSeq = null, maxStep = -1, finalSeen = false, chatModel = null, lastCheckpoints = "";

  async function loadMetrics() {
    // Re-read from the last step seen: another metric of that same step may have been written since.
    for (;;) {
      const doc = await api(base + "/metrics?limit=" + METRICS_PAGE + "&after_step=" + Math.max(-1, maxStep - 1));
      for (const p of doc.points) {
        if (!points.has(p.name)) points.set(p.name, new Map());
        points.get(p.name).set(p.step, p.value);
      }
      const top = doc.points.length ? doc.points[doc.points.length - 1].step : maxStep;
      const progressed = top > maxStep;
      maxStep = Math.max(maxStep, top);
      if (doc.points.length < METRICS_PAGE || !progressed) break;
    }
    addOptionalCharts();
    for (const chart of charts) chart.draw(points);
  }

  let optional = null; // OPTIONAL_PANELS of this job's kind not drawn yet
  function addOptionalCharts() {
    const kind = base.startsWith("/rl/") ? "rl" : "sft";
    if (optional === null) optional = OPTIONAL_PANELS.filter(([, byKind]) => byKind[kind]);
    const ready = optional.filter(([, byKind]) => byKind[kind].some(([name]) => points.has(name)));
    if (!ready.length) return;
    optional = optional.filter((panel) => !ready.includes(panel));
    for (const [title, byKind] of ready) {
      const chart = new Chart(title, byKind[kind], kind === "rl" ? "iteration" : "step");
      charts.push(chart);
      chartsNode.append(chart.node);
    }
  }

  // Newest first: new events go on top, earlier pages below.
  function addOlder(doc) {
    eventsBody.append(...doc.events.map(eventRow));
    if (doc.events.length) oldestSeq = doc.events[doc.events.length - 1].seq;
    earlier.hidden = !doc.has_more;
  }

  async function loadEvents() {
    if (newestSeq === null) {
      const doc = await api(base + "/events?order=desc&limit=" + EVENTS_PAGE);
      addOlder(doc);
      newestSeq = doc.next_seq;
      return;
    }
    for (;;) {
      const doc = await api(base + "/events?limit=500&since_seq=" + newestSeq);
      for (const e of doc.events) eventsBody.prepend(eventRow(e));
      newestSeq = doc.next_seq;
      if (!doc.has_more) break;
    }
  }

  earlier.addEventListener("click", async () => {
    earlier.disabled = true;
    try {
      addOlder(await api(base + "/events?order=desc&limit=" + EVENTS_PAGE + "&before_seq=" + oldestSeq));
    } catch (err) {
      fail(error, err);
    } finally {
      earlier.disabled = false;
    }
  });

  async function loadCheckpoints() {
    const doc = await api("/dashboard/jobs/" + encodeURIComponent(jobId) + "/checkpoints");
    const shape = JSON.stringify(doc.checkpoints);
    if (shape === lastCheckpoints || !doc.checkpoints.length) return;
    lastCheckpoints = shape;
    const unit = doc.unit === "iteration" ? "Iteration" : "Step";
    const kept = doc.checkpoints.filter((c) => c.on_disk), pruned = doc.checkpoints.filter((c) => !c.on_disk);
    replace(checkpoints,
      kept.length ? table([unit, "Saved"], kept.map((c) => [String(c.step ?? ""), when(c.saved_at)]),
        { id: "checkpoints-kept" }) : null,
      pruned.length ? h("p", { class: "muted", id: "checkpoints-pruned" }, prunedLine(pruned, unit)) : null);
  }

  async function loadJob() {
    const job = await api("/dashboard/jobs/" + encodeURIComponent(jobId));
    base = (job.job_type === "rl" ? "/rl/jobs/" : "/learning/jobs/") + encodeURIComponent(jobId);
    if (!charts) {
      const unit = job.job_type === "rl" ? "iteration" : "step";
      charts = PANELS.filter(([, byKind]) => byKind[job.job_type])
        .map(([title, byKind]) => new Chart(title, byKind[job.job_type], unit));
      replace(chartsNode, charts.map((c) => c.node));
    }
    return job;
  }

  const stop = poll(async () => {
    const job = await loadJob();
    replace(facts, ["status", "model", "type"].map((k) => h("span", {}, h("b", {}, k),
      k === "status" ? badge(job.status) : String(job[k] || job.job_type || ""))),
    h("span", {}, h("b", {}, "duration"), duration(job.started_at, job.finished_at)),
    h("span", {}, h("b", {}, "created"), when(job.created_at)),
    job.error ? h("span", { class: "error" }, h("b", {}, "error"), typeof job.error === "string" ? job.error
      : JSON.stringify(job.error)) : null);
    facts.setAttribute("data-status", job.status);
    await Promise.all([loadMetrics(), loadEvents(), loadCheckpoints()]);
    if (job.fine_tuned_model && chatModel !== job.fine_tuned_model) {
      chatModel = job.fine_tuned_model;
      replace(chat, chatBox(chatModel));
    }
    if (TERMINAL.has(job.status)) {
      if (finalSeen) stop(); // one more round after the end, for the last points and events
      finalSeen = true;
    }
  }, POLL_MS, (err) => fail(error, err));
  return stop;
}

function eventRow(e) {
  return h("tr", { class: "level-" + String(e.level).replace(/[^a-z]/g, "") }, h("td", {}, String(e.seq)),
    h("td", {}, when(e.created_at)), h("td", { class: "mono" }, e.type), h("td", {}, e.message));
}

// Pruned checkpoints in one line: "57 checkpoints pruned from disk (iterations 5–285)".
function prunedLine(pruned, unit) {
  const steps = pruned.map((c) => c.step).filter(Number.isFinite);
  const range = steps.length ? " (" + unit.toLowerCase() + "s " + Math.min(...steps) + "–" + Math.max(...steps) + ")"
    : "";
  return pruned.length + (pruned.length === 1 ? " checkpoint" : " checkpoints") + " pruned from disk" + range;
}

function chatBox(model) {
  const history = [];
  const log = h("div", { class: "log", id: "chat-log" });
  const input = h("textarea", { id: "chat-input", placeholder: "Ask the model something…" });
  const send = h("button", { id: "chat-send", type: "button" }, "Send");
  const status = h("span", { class: "muted" });
  send.addEventListener("click", async () => {
    const text = input.value.trim();
    if (!text) return;
    history.push({ role: "user", content: text });
    log.append(messageNode({ role: "user", parts: [{ kind: "text", text }] }));
    input.value = "";
    send.disabled = true;
    status.textContent = " thinking…";
    try {
      const doc = await api("/inference/v1/chat/completions", { method: "POST",
        body: { model, messages: history, max_tokens: 64, temperature: 0 } });
      const reply = doc.choices[0].message;
      const content = typeof reply.content === "string" ? reply.content : JSON.stringify(reply.content);
      history.push({ role: "assistant", content });
      log.append(messageNode({ role: "assistant", parts: [{ kind: "text", text: content }] }));
      status.textContent = "";
    } catch (err) {
      history.pop();
      status.textContent = " " + (err && err.message ? err.message : String(err));
    } finally {
      send.disabled = false;
      log.scrollTop = log.scrollHeight;
    }
  });
  return h("div", { class: "chat" }, h("p", {}, "Model ", h("span", { class: "mono", id: "chat-model" }, model),
    " ", h("span", { class: "muted" }, "(served by this backend's inference endpoint)")),
  log, input, send, status);
}
