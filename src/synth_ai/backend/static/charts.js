// Line charts drawn as SVG elements (no library): one chart per panel, several named series on it.
import { h, number } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const W = 320, H = 170, PAD = { left: 46, right: 8, top: 8, bottom: 20 };

function s(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

export class Chart {
  // series: [[metricName, label], ...] drawn in that order; unit: what the x axis counts ("step", "iteration")
  constructor(title, series, unit = "step") {
    this.series = series;
    this.unit = unit;
    this.svg = s("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img" });
    this.legend = h("div", { class: "legend" });
    this.node = h("div", { class: "chart", "data-chart": title, "data-points": "0" }, h("h3", {}, title),
      this.svg, this.legend);
    this.draw(new Map());
  }

  // points: Map(name -> Map(step -> value))
  draw(points) {
    const lines = this.series.map(([name, label], i) => {
      const byStep = points.get(name) || new Map();
      const xy = [...byStep.entries()].filter(([, v]) => Number.isFinite(v)).sort((a, b) => a[0] - b[0]);
      return { label, i, xy };
    });
    const all = lines.flatMap((l) => l.xy);
    this.node.setAttribute("data-points", String(all.length));
    this.svg.replaceChildren();
    this.legend.replaceChildren();
    const x0 = PAD.left, x1 = W - PAD.right, y0 = H - PAD.bottom, y1 = PAD.top;
    this.svg.append(s("line", { class: "axis", x1: x0, y1: y0, x2: x1, y2: y0 }),
      s("line", { class: "axis", x1: x0, y1: y0, x2: x0, y2: y1 }));
    if (!all.length) {
      this.svg.append(s("text", { class: "label", x: (x0 + x1) / 2, y: H / 2, "text-anchor": "middle" },
        "no data yet"));
      return;
    }
    let [xmin, xmax] = [Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0]))];
    let [ymin, ymax] = [Math.min(...all.map((p) => p[1])), Math.max(...all.map((p) => p[1]))];
    if (xmax === xmin) { xmax += 1; }
    if (ymax === ymin) { const d = Math.abs(ymin) * 0.1 || 1; ymin -= d; ymax += d; }
    const X = (x) => x0 + ((x - xmin) / (xmax - xmin)) * (x1 - x0);
    const Y = (y) => y0 - ((y - ymin) / (ymax - ymin)) * (y0 - y1);
    this.svg.append(
      s("text", { class: "label", x: x0 - 4, y: y1 + 8, "text-anchor": "end" }, number(ymax)),
      s("text", { class: "label", x: x0 - 4, y: y0, "text-anchor": "end" }, number(ymin)),
      s("text", { class: "label", x: x0, y: H - 4 }, this.unit + " " + xmin),
      s("text", { class: "label", x: x1, y: H - 4, "text-anchor": "end" }, this.unit + " " + xmax));
    for (const { label, i, xy } of lines) {
      if (!xy.length) continue;
      const coords = xy.map(([x, y]) => X(x).toFixed(1) + "," + Y(y).toFixed(1)).join(" ");
      this.svg.append(s("polyline", { class: "series-" + i, points: coords }));
      if (xy.length === 1) this.svg.append(s("circle", { class: "dot-" + i, cx: X(xy[0][0]), cy: Y(xy[0][1]), r: 2.5 }));
      const last = xy[xy.length - 1][1];
      this.legend.append(h("span", { class: "key-" + i }, "■ " + label + " " + number(last)));
    }
  }
}
