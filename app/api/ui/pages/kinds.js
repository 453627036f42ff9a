// The kinds: each job kind the deployment runs (GET /v1/kinds), its timeout, attempts,
// payload schema, flow control by key and jobs by state (the key's tenant's), each count a
// link to those jobs.
import { FLOW, api, badge, el, json, session } from "../core.js";
import { showJobs } from "./overview.js";

const STATES = FLOW.flat();

function fields(schema) {
  const required = new Set(schema.required || []);
  const names = Object.keys(schema.properties || {}).sort((a, b) => (required.has(b) - required.has(a)) || a.localeCompare(b));
  return names.map((n) => (required.has(n) ? `${n}*` : n)).join(", ") || "(none)";
}
// A kind's flow control by key (GET /v1/kinds' flow) in words: "key from payload; 1 at a time; if active: reject".
export function flowText(f) {
  if (!f) return "none";
  const parts = f.keyed ? ["key from payload"] : [];
  const limits = [];
  if (f.concurrency !== null && f.concurrency !== undefined) limits.push(`${f.concurrency} at a time`);
  if (f.rate) limits.push(`${f.rate.limit} starts per ${f.rate.per_seconds} s`);
  if (limits.length) parts.push(limits.join(", "));
  if (f.if_active && f.if_active !== "enqueue") parts.push(`if active: ${f.if_active}`);
  if (f.debounce_seconds !== null && f.debounce_seconds !== undefined) parts.push(`debounce ${f.debounce_seconds} s`);
  return parts.join("; ") || "none";
}
const jobsLink = (filter, text) => el("a", { href: "#/", on: { click: (e) => { e.preventDefault(); showJobs(filter); } } }, text);

export async function kinds(view) {
  const doc = await api("/v1/kinds");
  const rows = doc.kinds.map((k) => {
    const counts = STATES.filter((s) => k.counts[s]).map((s) =>
      el("span", { class: "kind-count", "data-state": s }, jobsLink({ kind: k.name, state: s }, badge(s)), ` ${k.counts[s]}`));
    return el("tr", { "data-kind": k.name },
      el("td", {}, jobsLink({ kind: k.name }, k.name), el("div", { class: "muted" }, k.description)),
      el("td", { class: "versions" }, (k.versions || [k.version]).join(", "), el("div", { class: "muted" }, k.on_version_change)),
      el("td", {}, `${k.timeout_seconds} s`), el("td", {}, k.max_attempts),
      el("td", {}, fields(k.payload_schema),
        el("details", {}, el("summary", {}, "schema"), el("pre", {}, json(k.payload_schema)))),
      el("td", { class: "flow-control" }, flowText(k.flow)),
      el("td", { class: "counts" }, counts.length ? counts : el("span", { class: "muted" }, "no jobs")));
  });
  view.append(el("section", { class: "card" }, el("h2", {}, "Kinds"),
    el("p", { class: "muted" }, session.me.admin ? "Jobs of every tenant (admin key)." : "This tenant's jobs."),
    el("div", { class: "scroll" }, el("table", { id: "kinds" },
      el("thead", {}, el("tr", {}, ["kind", "versions", "timeout", "attempts", "payload (* required)", "flow control by key", "jobs by state"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: 7, class: "empty" }, "the API serves no job kinds: its TASKLEASE_KINDS names none")))))));
}
