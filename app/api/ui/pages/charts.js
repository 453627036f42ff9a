// Charts: jobs submitted, succeeded, failed and dead-lettered over the last hour, day or
// week, and p50/p95 latency per kind (GET /v1/charts), drawn with the vendored uPlot.
// uPlot styles its nodes through the CSSOM (element.style), which the page's CSP allows.
import uPlot from "../vendor/uplot.js";
import { api, el, query, session, toast } from "../core.js";

// The styles this page needs, linked once (style-src 'self': files of this origin only).
export function stylesheet(href) {
  if ([...document.querySelectorAll("link[rel=stylesheet]")].some((l) => l.getAttribute("href") === href)) return;
  document.head.append(el("link", { rel: "stylesheet", href }));
}
const color = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";
export const ms = (v) => (v === null || v === undefined ? "–"
  : v >= 60000 ? `${(v / 60000).toFixed(1)} min` : v >= 1000 ? `${(v / 1000).toFixed(2)} s` : `${Math.round(v)} ms`);

const COUNTS = [["submitted", "--running"], ["succeeded", "--succeeded"], ["failed", "--retrying"], ["dead_lettered", "--dead_lettered"]];
const LATENCY = [["p50_ms", "p50 submit→finish", "--running"], ["p95_ms", "p95 submit→finish", "--dead_lettered"],
  ["run_p50_ms", "p50 run", "--succeeded"], ["run_p95_ms", "p95 run", "--retrying"]];
const REFRESH_MS = 30000;
const filters = { window: "hour", kind: "", tenant: "" };

export async function chartsPage(view) {
  stylesheet("vendor/uplot.css");
  stylesheet("pages/charts.css");
  const windows = el("div", { class: "windows", role: "group", "aria-label": "window" },
    ["hour", "day", "week"].map((w) => el("button", { type: "button", class: "quiet", "data-window": w,
      on: { click: () => { filters.window = w; draw(); } } }, `last ${w}`)));
  const kinds = el("select", { id: "c-kind", "aria-label": "kind", on: { change: (e) => { filters.kind = e.target.value; draw(); } } });
  const tenant = session.me.admin ? el("input", { id: "c-tenant", placeholder: "every tenant", "aria-label": "tenant",
    value: filters.tenant, on: { change: (e) => { filters.tenant = e.target.value.trim(); draw(); } } }) : null;
  const totals = el("dl", { class: "totals", id: "totals" });
  const throughput = el("div", { class: "chart", id: "throughput" });
  const latency = el("div", { class: "chart", id: "latency" });
  const latencyTitle = el("h2", { id: "latency-title" }, "Latency");
  const perKind = el("tbody", { id: "per-kind" });
  view.append(
    el("section", { class: "card" }, el("h1", {}, "Charts"), el("div", { class: "filters" }, windows, kinds, tenant)),
    el("section", { class: "card" }, el("h2", {}, "Jobs per bucket"), totals, throughput),
    el("section", { class: "card" }, latencyTitle, latency),
    el("section", { class: "card" }, el("h2", {}, "Latency per kind over the window"), el("div", { class: "scroll" }, el("table", {},
      el("thead", {}, el("tr", {}, ["kind", "finished", "p50", "p95", "run p50", "run p95"].map((h) => el("th", {}, h)))), perKind))));

  const plots = [];
  const draw = async () => {
    let data;
    try {
      data = await api(`/v1/charts${query(filters)}`);
    } catch (err) { toast(err.message, true); return; }
    for (const b of windows.children) b.classList.toggle("on", b.dataset.window === filters.window);
    renderKinds(kinds, data);
    totals.replaceChildren(...COUNTS.flatMap(([s, c]) => [
      el("dt", { class: "swatch", "data-color": c }, s.replace("_", " ")),
      el("dd", { "data-series": s }, String(data.totals[s]))]));
    for (const dt of totals.querySelectorAll("dt")) dt.style.borderColor = color(dt.dataset.color);
    // The first entry is every kind the answer covers together: with ?kind=, that kind.
    const mine = data.latency[0];
    latencyTitle.textContent = `Latency: ${filters.kind || "every kind"} (p50 ${ms(mine.p50_ms)}, p95 ${ms(mine.p95_ms)})`;
    perKind.replaceChildren(...data.latency.map((k) => el("tr", { "data-kind": k.kind || "" },
      el("td", {}, k.kind || "every kind"), el("td", {}, k.finished), el("td", {}, ms(k.p50_ms)),
      el("td", {}, ms(k.p95_ms)), el("td", {}, ms(k.run_p50_ms)), el("td", {}, ms(k.run_p95_ms)))));
    plots.splice(0).forEach((p) => p.destroy());
    const width = Math.max(280, throughput.clientWidth);
    plots.push(new uPlot({
      width, height: 220, scales: { x: { time: true } },
      series: [{}, ...COUNTS.map(([s, c]) => ({ label: s.replace("_", " "), stroke: color(c), width: 2, points: { show: false } }))],
      axes: axes(), legend: { live: true },
    }, [data.times, ...COUNTS.map(([s]) => data.counts[s])], throughput));
    plots.push(new uPlot({
      width, height: 220, scales: { x: { time: true } },
      series: [{}, ...LATENCY.map(([, label, c]) => ({ label, stroke: color(c), width: 2, spanGaps: false,
        value: (u, v) => ms(v), points: { size: 5 } }))],
      axes: axes((u, vals) => vals.map(ms)), legend: { live: true },
    }, [data.times, ...LATENCY.map(([key]) => mine.series[key])], latency));
  };
  await draw();
  const timer = setInterval(() => { if (!document.hidden) draw(); }, REFRESH_MS);
  session.stopLive = () => { clearInterval(timer); plots.splice(0).forEach((p) => p.destroy()); };
}
function axes(values) {
  const line = { stroke: color("--muted"), grid: { stroke: color("--line"), width: 1 }, ticks: { stroke: color("--line") } };
  return [line, values ? { ...line, values, size: 70 } : line];
}
// The kinds offered: those with latency in the window, and the one asked for.
function renderKinds(select, data) {
  const names = new Set(data.latency.map((k) => k.kind).filter(Boolean));
  if (filters.kind) names.add(filters.kind);
  select.replaceChildren(el("option", { value: "" }, "every kind"),
    ...[...names].sort().map((k) => el("option", { value: k, selected: k === filters.kind }, k)));
}
