// DOM and API helpers. Everything a server or a trace sent becomes a text node: never HTML.

export class LoginRequired extends Error {}

export async function api(path, { method = "GET", body } = {}) {
  const init = { method, credentials: "same-origin", headers: { "X-Synth-Dashboard": "1" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch("/api" + path, init);
  if (response.status === 401) throw new LoginRequired("login required");
  const doc = await response.json().catch(() => ({}));
  if (!response.ok) {
    const err = doc && doc.error ? doc.error : {};
    throw Object.assign(new Error(err.message || ("HTTP " + response.status)), { status: response.status });
  }
  return doc;
}

// h("td", {class: "x"}, "text", child...): attributes by setAttribute, strings as text nodes.
export function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) throw new Error("no inline handlers: use addEventListener");
    node.setAttribute(name, String(value));
  }
  append(node, children);
  return node;
}

export function append(node, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

// An in-page link; the parts are encoded, so an id cannot change the route's shape.
export function link(parts, text) {
  return h("a", { href: "#/" + parts.map(encodeURIComponent).join("/") }, text);
}

export function badge(status) {
  return h("span", { class: "badge " + String(status).replace(/[^a-z_]/g, "") }, status);
}

export function table(headers, rows, attrs) {
  return h("table", attrs || {}, h("thead", {}, h("tr", {}, headers.map((t) => h("th", {}, t)))),
    h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((c) => h("td", {}, c))))));
}

export function when(text) {
  if (!text) return "";
  const date = new Date(text);
  return isNaN(date) ? String(text) : date.toLocaleString();
}

export function duration(start, end) {
  if (!start) return "";
  const ms = (end ? new Date(end) : new Date()) - new Date(start);
  if (!(ms >= 0)) return "";
  const s = Math.round(ms / 1000);
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
}

export function bytes(n) {
  if (typeof n !== "number") return "";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

export function number(value) {
  if (typeof value !== "number") return value === null || value === undefined ? "" : String(value);
  if (value === 0) return "0";
  const abs = Math.abs(value);
  return abs >= 1e4 || abs < 1e-3 ? value.toExponential(2) : String(Number(value.toPrecision(4)));
}

export function fail(target, err) {
  if (err instanceof LoginRequired) {
    replace(target, h("p", { class: "error" }, "Your login expired. Run `synth-ai backend open` for a new link."));
  } else {
    replace(target, h("p", { class: "error" }, "Error: " + (err && err.message ? err.message : String(err))));
  }
}

// Runs `load` now and every `ms` until stopped; a failing call is shown and polling goes on.
export function poll(load, ms, onError) {
  let stopped = false, timer = null;
  const tick = async () => {
    try { await load(); } catch (err) { onError(err); if (err instanceof LoginRequired) stopped = true; }
    if (!stopped) timer = setTimeout(tick, ms);
  };
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}

