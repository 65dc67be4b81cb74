// Eval runs read from the trace databases the backend was given: runs, per-seed scores, one seed's transcript.
import { api, fail, h, link, number, replace, table, when } from "./dom.js";

export function evalsPage(root) {
  const body = h("div", {}, h("p", { class: "muted" }, "Reading trace databases…"));
  replace(root, h("h1", {}, "Eval runs"), body);
  api("/dashboard/evals").then((doc) => {
    const sources = h("ul", { class: "muted" }, doc.sources.map((s) =>
      h("li", {}, h("span", { class: "mono" }, s.path), s.error ? " — " + s.error : s.exists ? "" : " — not found")));
    const runs = doc.runs.length ? table(["Run", "Model", "App", "Seeds", "Scored", "Mean score", "Started"],
      doc.runs.map((r) => [link(["evals", r.db, "runs", r.run_id], r.run_id), r.model || "", r.app_id || "",
        r.sessions, r.scored, number(r.mean_score), when(r.created_at)]), { id: "runs" })
      : h("p", { class: "muted" }, "No eval runs found. `synth-ai eval` writes traces/v3/synth_ai.db; start the " +
        "backend with `--traces PATH` (or SYNTH_AI_BACKEND_TRACES) to read other databases.");
    replace(body, runs, h("h2", {}, "Trace databases"), sources);
  }).catch((err) => fail(body, err));
}

export function runPage(root, db, runId) {
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  replace(root, h("h1", {}, "Eval run ", h("span", { class: "mono" }, runId)), body);
  api("/dashboard/evals/" + encodeURIComponent(db) + "/runs/" + encodeURIComponent(runId)).then((doc) => {
    const scores = doc.seeds.map((s) => s.score).filter((v) => typeof v === "number");
    const top = Math.max(1, ...scores.map(Math.abs));
    const mean = scores.length ? scores.reduce((a, b) => a + b, 0) / scores.length : null;
    replace(body, h("p", {}, h("span", { class: "mono" }, doc.db_path), " — " + doc.seeds.length + " seeds, mean " +
      "score " + number(mean)),
    table(["Seed", "Score", "", "Task", "Model", "Transcript"], doc.seeds.map((s) => [
      s.seed === null || s.seed === undefined ? "" : String(s.seed), number(s.score),
      typeof s.score === "number" ? h("span", { class: "bar" }) : "",
      s.task_id || "", s.model || "", link(["evals", db, "sessions", s.session_id], "view")]), { id: "seeds" }));
    // bar widths through the CSSOM (the CSP allows no inline style attributes)
    body.querySelectorAll("#seeds tbody tr").forEach((tr, i) => {
      const bar = tr.querySelector(".bar");
      if (bar) bar.style.width = Math.round((Math.abs(doc.seeds[i].score) / top) * 120) + "px";
    });
  }).catch((err) => fail(body, err));
}

export function messageNode(m) {
  return h("div", { class: "msg " + String(m.role).replace(/[^a-z]/g, "") }, h("span", { class: "role" }, m.role),
    m.parts.map((p) => p.kind === "image" && p.url.startsWith("data:image/") ? h("img", { src: p.url, alt: "image" })
      : h("span", {}, p.text)));
}

export function sessionPage(root, db, sessionId) {
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  replace(root, h("h1", {}, "Transcript ", h("span", { class: "mono" }, sessionId)), body);
  api("/dashboard/evals/" + encodeURIComponent(db) + "/sessions/" + encodeURIComponent(sessionId)).then((doc) => {
    const meta = Object.entries(doc.metadata).filter(([, v]) => v !== null && typeof v !== "object");
    replace(body, h("div", { class: "facts" }, h("span", {}, h("b", {}, "score"), number(doc.score)),
      meta.map(([k, v]) => h("span", {}, h("b", {}, k), String(v)))),
    h("div", { id: "transcript" }, doc.messages.length ? doc.messages.map(messageNode)
      : h("p", { class: "muted" }, "This session recorded no messages.")));
  }).catch((err) => fail(body, err));
}
