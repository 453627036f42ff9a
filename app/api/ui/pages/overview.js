// The overview: the flow of states with their counts, and the recent jobs, live.
import {
  $, FLOW, age, api, attempts, badge, debounce, el, follow, jobLink, liveStatus, query,
  session, toast, waitWhat, when,
} from "../core.js";
import { bulkBar, listQuery, searchFields } from "./search.js";

// --- the overview ------------------------------------------------------------------------
const filters = { state: "", kind: "", tenant: "", key: "", search: "", createdAfter: "", error: "" };
// The list is the API's order, newest created first (its cursor pages by creation): the
// time shown is that one, so the rows read in order.
const JOB_COLUMNS = ["", "job", "kind", "state", "runs", "attempts used", "waiting for", "until", "tenant", "created"];
// The jobs list filtered ({ kind, state } or { key }): the kinds page's and a job's key links land here.
export function showJobs(filter) {
  Object.assign(filters, { state: "", kind: "", key: "", search: "", createdAfter: "", error: "" }, filter);
  if (location.hash === "#/") session.route(); else location.hash = "#/";
}
export async function overview(view) {
  const diagram = el("div", { class: "flow", id: "flow" });
  for (const column of FLOW) {
    diagram.append(el("div", { class: "flow-col" }, column.map((s) => el("a", {
      class: `node s-${s}`, "data-state": s, href: "#/",
      on: { click: (e) => { e.preventDefault(); filters.state = filters.state === s ? "" : s; refresh(); } },
    }, el("span", { class: "name" }, s.replace("_", " ")), el("b", { class: "count", id: `count-${s}` }, "–")))));
  }
  const stats = el("div", { class: "stats" },
    el("div", {}, "oldest queued ", el("b", { id: "oldest" }, "–")),
    session.me.admin ? el("div", {}, "dead-letter queue ", el("b", { id: "dlq" }, "–")) : null);
  const form = el("form", { class: "filters", on: { submit: (e) => { e.preventDefault(); refresh(); } } },
    el("select", { id: "f-state", "aria-label": "state", on: { change: (e) => { filters.state = e.target.value; refresh(); } } },
      el("option", { value: "" }, "any state"), FLOW.flat().map((s) => el("option", { value: s }, s))),
    el("input", { id: "f-kind", placeholder: "kind", "aria-label": "kind", value: filters.kind,
      on: { change: (e) => { filters.kind = e.target.value.trim(); refresh(); } } }),
    session.me.admin ? el("input", { id: "f-tenant", placeholder: "tenant", "aria-label": "tenant", value: filters.tenant,
      on: { change: (e) => { filters.tenant = e.target.value.trim(); refresh(); restart(); } } }) : null,
    searchFields(filters, () => refresh()));
  const rows = el("tbody", { id: "jobs" });
  const bulk = bulkBar(filters, () => refresh());
  const more = el("button", { type: "button", id: "more", hidden: true }, "More");
  view.append(el("section", { class: "card" }, el("h2", {}, "The flow"), diagram, stats),
    el("section", { class: "card" }, el("h2", {}, "Recent jobs"), form, bulk.bar,
      el("div", { class: "scroll" }, el("table", { class: "jobs" },
        el("thead", {}, el("tr", {}, JOB_COLUMNS.map((h) => el("th", {}, h || bulk.pageBox(rows))))),
        rows)), more));

  let cursor = null;
  let lastAsked = null;
  const listRows = async (append) => {
    const page = await api(`/v1/jobs${listQuery(filters, { limit: 25, cursor: append ? cursor : "" })}`);
    if (!append) rows.replaceChildren();
    // Another search: the selection was of the last one's rows.
    const asked = listQuery(filters, {});
    if (asked !== lastAsked) { lastAsked = asked; bulk.reset(); }
    for (const j of page.items) {
      rows.append(el("tr", { "data-job": j.id, "data-state": j.state },
        el("td", {}, bulk.box(j.id)), el("td", {}, jobLink(j.id)), el("td", {}, j.kind), el("td", {}, badge(j.state)),
        el("td", {}, j.runs), el("td", {}, attempts(j)), el("td", {}, waitWhat(j.waiting_for)),
        el("td", {}, when(j.waiting_for?.until)), el("td", {}, j.tenant), el("td", {}, when(j.created_at))));
    }
    if (!page.items.length && !append) rows.append(el("tr", {}, el("td", { colspan: JOB_COLUMNS.length, class: "empty" }, "no jobs")));
    cursor = page.next_cursor;
    more.hidden = !cursor;
  };
  more.addEventListener("click", () => listRows(true));
  const counts = async () => {
    const o = await api(`/v1/overview${query({ tenant: filters.tenant })}`);
    for (const s of FLOW.flat()) {
      const n = o.counts[s] || 0;
      $(`count-${s}`).textContent = String(n);
      diagram.querySelector(`[data-state="${s}"]`).classList.toggle("busy", n > 0);
      diagram.querySelector(`[data-state="${s}"]`).classList.toggle("picked", filters.state === s);
    }
    $("oldest").textContent = age(o.oldest_queued_seconds);
    diagram.dataset.loaded = "yes";
    if (session.me.admin && o.dead_letter_queue) {
      $("dlq").textContent = Object.entries(o.dead_letter_queue).map(([k, v]) => `${v} ${k}`).join(", ");
    }
  };
  async function refresh() {
    if (!diagram.isConnected) return; // a refresh due after the page moved on to another view
    $("f-state").value = filters.state;
    await Promise.all([counts(), listRows(false)]).catch((err) => toast(err.message, true));
  }
  const later = debounce(refresh, 250);
  function restart() {
    if (session.stopLive) session.stopLive();
    session.stopLive = follow(`/v1/stream${query({ tenant: filters.tenant })}`, (type) => {
      if (type === "transition" || type === "open") later();
    }, liveStatus);
  }
  await refresh();
  restart();
}
