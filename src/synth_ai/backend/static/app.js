// The dashboard's router and list pages. Each page renders into #view and returns a function that stops its
// polling when the user navigates away.
import { api, badge, bytes, duration, fail, h, link, poll, replace, table, when } from "./dom.js";
import { jobPage } from "./job.js";
import { evalsPage, runPage, sessionPage } from "./evals.js";

const POLL_MS = 2000;
const view = () => document.getElementById("view");
let stopPage = () => {};

function jobsPage(root) {
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  replace(root, h("h1", {}, "Jobs"), body);
  return poll(async () => {
    const doc = await api("/learning/jobs?limit=200");
    if (!doc.data.length) {
      replace(body, h("p", { class: "muted" }, "No jobs yet. Start one with `synth-ai train`."));
      return;
    }
    replace(body, table(["Job", "Status", "Model", "Type", "Created", "Duration", "Result"],
      doc.data.map((j) => [link(["jobs", j.id], j.id), badge(j.status), j.model, j.type || j.job_type,
        when(j.created_at), duration(j.started_at, j.finished_at), j.fine_tuned_model || ""]), { id: "jobs" }));
  }, POLL_MS, (err) => fail(body, err));
}

function filesPage(root) {
  const body = h("div", {});
  replace(root, h("h1", {}, "Files"), body);
  return poll(async () => {
    const doc = await api("/files?limit=500");
    replace(body, doc.data.length ? table(["File", "Name", "Purpose", "Status", "Size", "Examples", "Uploaded"],
      doc.data.map((f) => [h("span", { class: "mono" }, f.id), f.filename, f.purpose, badge(f.status),
        bytes(f.bytes), f.summary && f.summary.examples !== undefined ? f.summary.examples : "",
        when(f.created_at)]), { id: "files" })
      : h("p", { class: "muted" }, "No files uploaded."));
  }, POLL_MS * 3, (err) => fail(body, err));
}

function modelsPage(root) {
  const body = h("div", {});
  replace(root, h("h1", {}, "Models"), body);
  return poll(async () => {
    const doc = await api("/learning/models");
    replace(body, table(["Model", "Kind", "Base", "Family", "From job"],
      doc.data.map((m) => [h("span", { class: "mono" }, link(["models", m.id], m.id)), m.kind || "", m.base_model || "",
        m.family || "", m.job_id ? link(["jobs", m.job_id], m.job_id) : ""]), { id: "models" }));
  }, POLL_MS * 5, (err) => fail(body, err));
}

// One model: its facts and the commands that take it out of this backend (`synth-ai models export`).
function modelPage(root, modelId) {
  const body = h("div", {});
  replace(root, h("h1", {}, "Model ", h("span", { class: "mono" }, modelId)), body);
  return poll(async () => {
    const m = await api("/learning/models/" + encodeURIComponent(modelId));
    const out = "./" + modelId.replace(/[^A-Za-z0-9._-]+/g, "-").replace(/^-+/, "");
    const command = "synth-ai models export " + shellWord(m.id) + " --out " + shellWord(out);
    const lora = m.training === "lora";
    replace(body, h("div", { class: "facts" }, ["kind", "base_model", "family", "training", "status"]
      .filter((k) => m[k]).map((k) => h("span", {}, h("b", {}, k), String(m[k]))),
    m.job_id ? h("span", {}, h("b", {}, "job"), link(["jobs", m.job_id], m.job_id)) : null),
    h("h2", {}, "Export"),
    h("p", {}, lora ? "A PEFT adapter folder (its base comes along when it is not on the Hugging Face Hub):"
      : "A Hugging Face folder (config, safetensors weights, tokenizer, chat template):"),
    h("pre", { class: "mono", id: "export-command" }, command),
    lora ? h("p", {}, "The adapter merged into its base, a full model:") : null,
    lora ? h("pre", { class: "mono", id: "export-merged-command" }, command + "-merged --merge") : null,
    h("p", { class: "muted" }, "Add --push-to-hub OWNER/NAME to upload it (token from HF_TOKEN or .env)."));
  }, POLL_MS * 5, (err) => fail(body, err));
}

function shellWord(text) {
  return /^[A-Za-z0-9_:\/.@+=-]+$/.test(text) ? text : "'" + text.replace(/'/g, "'\\''") + "'";
}

const ROUTES = {
  jobs: (root, parts) => (parts.length ? jobPage(root, parts[0]) : jobsPage(root)),
  files: (root) => filesPage(root),
  models: (root, parts) => (parts.length ? modelPage(root, parts[0]) : modelsPage(root)),
  evals: (root, parts) => (parts.length >= 3 && parts[1] === "runs" ? runPage(root, parts[0], parts.slice(2).join("/"))
    : parts.length >= 3 && parts[1] === "sessions" ? sessionPage(root, parts[0], parts.slice(2).join("/"))
      : evalsPage(root)),
};

function route() {
  stopPage();
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  const name = ROUTES[parts[0]] ? parts[0] : "jobs";
  for (const a of document.querySelectorAll("[data-nav]")) a.classList.toggle("active", a.dataset.nav === name);
  stopPage = ROUTES[name](view(), parts.slice(1)) || (() => {});
}

window.addEventListener("hashchange", route);
route();
