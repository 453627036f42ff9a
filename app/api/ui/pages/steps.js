// The job page's step waterfall, child tree and model usage. The waterfall is read from
// the job's events and effects, nothing recorded for it: a run lasts from its start (the
// "running" event) to the job's next event; a step (an effect) from the previous step's
// record in the same run, or the run's start, to its own record; queueing, retry backoff
// and waits are the gaps between runs, shown as bars of their own.
import { api, badge, el, jobLink } from "../core.js";
import { ms, stylesheet } from "./charts.js";

const FAILED = new Set(["retrying", "stalled", "dead_lettered"]);
const GAP = { queued: "queued", retrying: "retry backoff", stalled: "stalled (lease lost)", waiting: "waiting" };
const t = (s) => new Date(s).getTime();

// Rows {label, cls, start, end} (epoch ms) in time order, from the API's events and effects.
export function waterfall(job, events, effects, now = Date.now()) {
  const rows = [];
  const evs = [...events].sort((a, b) => t(a.at) - t(b.at));
  const end = job.finished_at ? t(job.finished_at) : now;
  const runs = [];
  let run = 0;
  evs.forEach((e, i) => {
    const next = evs[i + 1];
    const until = next ? t(next.at) : end;
    if (e.to_state === "running") {
      run += 1;
      const outcome = next ? next.to_state : job.state;
      runs.push({ start: t(e.at), end: until });
      rows.push({ label: `run ${run} · attempt ${e.attempt}${next ? ` → ${outcome}` : ""}`,
        cls: `run${FAILED.has(outcome) ? " failed" : ""}`, start: t(e.at), end: until, run });
    } else if (GAP[e.to_state] && next) {
      const why = e.to_state === "waiting" && e.detail ? e.detail : GAP[e.to_state];
      rows.push({ label: why, cls: e.to_state === "stalled" ? "wait failed" : "wait", start: t(e.at), end: until });
    }
  });
  if (!evs.length || evs[0].to_state !== "queued") {
    const first = evs.length ? t(evs[0].at) : end;
    if (first > t(job.created_at)) rows.push({ label: "queued", cls: "wait", start: t(job.created_at), end: first });
  }
  // A fork's inherited steps ran in the original, before this job existed: one bar at the
  // start, "inherited", rather than bars far left of the axis.
  const inherited = effects.filter((f) => f.inherited_from);
  if (inherited.length) {
    const at = t(job.created_at);
    rows.push({ label: `${inherited.length} inherited step${inherited.length === 1 ? "" : "s"}`, cls: "step inherited", start: at, end: at });
  }
  let last = null; // the previous step's record, in the run that recorded it
  for (const f of [...effects].filter((e) => !e.inherited_from).sort((a, b) => a.seq - b.seq)) {
    const at = t(f.recorded_at);
    const inRun = runs.filter((r) => r.start <= at).pop();
    const from = inRun ? Math.max(inRun.start, last ?? -Infinity) : t(job.created_at);
    rows.push({ label: f.key, cls: "step", start: Math.min(from, at), end: at, seq: f.seq });
    last = at;
  }
  return rows.sort((a, b) => a.start - b.start || (a.run ? -1 : 0) - (b.run ? -1 : 0));
}

export function renderWaterfall(box, job, events, effects) {
  stylesheet("pages/charts.css");
  const rows = waterfall(job, events, effects);
  const t0 = t(job.created_at);
  const span = Math.max(1, Math.max(...rows.map((r) => r.end), t0 + 1) - t0);
  const pct = (v) => `${(100 * v / span).toFixed(3)}%`;
  box.replaceChildren(el("p", { class: "muted" }, `from submit (0) to ${job.finished_at ? "finish" : "now"}: ${ms(span)}`),
    ...rows.map((r) => {
      const bar = el("span", { class: `bar ${r.cls}` }, el("span", { class: "took" }, ms(r.end - r.start)));
      bar.style.left = pct(r.start - t0);
      bar.style.width = pct(Math.max(0, r.end - r.start));
      return el("div", { class: "row", "data-row": r.cls.split(" ")[0], "data-label": r.label },
        el("span", { class: "label", title: r.label }, r.label), el("span", { class: "track" }, bar));
    }));
  if (!rows.length) box.append(el("p", { class: "empty" }, "nothing recorded yet"));
}

// The children, each with a toggle that loads its own children when opened (and theirs).
// The branches open stay open when the page draws the tree again (on each transition).
export function renderTree(box, job) {
  stylesheet("pages/charts.css");
  box.opened = box.opened || new Set();
  box.replaceChildren(el("p", {}, "parent: ", job.parent_id ? jobLink(job.parent_id, job.parent_id) : "none"),
    branch(job, box.opened));
}
function branch(job, opened) {
  if (!job.children.length) return el("p", { class: "empty" }, "no children");
  const list = el("ul", {}, job.children.map((c) => {
    const below = el("div", { class: "below" });
    const toggle = el("button", { type: "button", class: "quiet toggle", "aria-expanded": "false", "aria-label": `children of ${c.id}` }, "+");
    const show = async (open) => {
      toggle.setAttribute("aria-expanded", String(open));
      toggle.textContent = open ? "−" : "+";
      if (open) opened.add(c.id); else opened.delete(c.id);
      if (!open) { below.replaceChildren(); return; }
      try { below.replaceChildren(branch(await api(`/v1/jobs/${c.id}`), opened)); } catch (err) { below.replaceChildren(el("p", { class: "error" }, err.message)); }
    };
    toggle.addEventListener("click", () => show(toggle.getAttribute("aria-expanded") !== "true"));
    if (opened.has(c.id)) show(true);
    return el("li", { "data-child": c.id }, toggle, jobLink(c.id), " ", c.kind, " ", badge(c.state), below);
  }));
  const more = job.children_count - job.children.length;
  return el("div", {}, list, more > 0 ? el("p", { class: "muted" }, `and ${more} more (the first ${job.children.length} shown)`) : null);
}

// Tokens and estimated cost of the job's model calls, by model.
export function usageFacts(u) {
  if (!u || !u.models.length) return [["tokens", "no model calls"]];
  const cost = u.cost_usd === null ? "not priced (a model has no price)" : `$${u.cost_usd.toFixed(6)}`;
  return [["tokens", `${u.input_tokens} in · ${u.output_tokens} out`], ["cost", cost],
    ["models", u.models.map((m) => `${m.model}: ${m.calls} call${m.calls === 1 ? "" : "s"}`).join(", ")]];
}
