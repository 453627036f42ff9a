// The dead letters and the schedules.
import { redrive } from "./job.js";
import { api, el, jobLink, session, when } from "../core.js";

// --- dead letters and schedules --------------------------------------------------------------
export async function deadLetters(view) {
  const rows = await api("/v1/dead-letters?limit=100");
  view.append(el("section", { class: "card" }, el("h2", {}, "Dead letters"),
    el("p", { class: "muted" }, session.me.admin ? "Every tenant's (admin key)." : "This tenant's."),
    el("div", { class: "scroll" }, el("table", { id: "dead-letters" },
      el("thead", {}, el("tr", {}, ["job", "kind", "tenant", "attempts", "reason", "when", ""].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows.length ? rows.map((j) => el("tr", { "data-job": j.id }, el("td", {}, jobLink(j.id)), el("td", {}, j.kind),
        el("td", {}, j.tenant), el("td", {}, j.attempt), el("td", { class: "detail" }, j.last_error || j.dead_lettered_by || ""),
        el("td", {}, when(j.finished_at || j.updated_at)),
        el("td", {}, el("button", { type: "button", class: "redrive", on: { click: () => redrive(j.id) } }, "Redrive"))))
        : el("tr", {}, el("td", { colspan: 7, class: "empty" }, "no dead letters")))))));
}
export async function schedules(view) {
  const rows = await api("/v1/schedules?limit=100");
  view.append(el("section", { class: "card" }, el("h2", {}, "Schedules"), el("div", { class: "scroll" }, el("table", {},
    el("thead", {}, el("tr", {}, ["name", "when", "kind", "tenant", "next", "last job", "state"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.length ? rows.map((s) => el("tr", {}, el("td", {}, s.name || String(s.id).slice(0, 8)),
      el("td", {}, `${s.description} (${s.cron}, ${s.timezone})`), el("td", {}, s.kind), el("td", {}, s.tenant),
      el("td", {}, when(s.next_slot)), el("td", {}, s.last_job_id ? jobLink(s.last_job_id) : ""),
      el("td", {}, s.enabled ? "on" : "paused", s.last_error ? ` · ${s.last_error}` : "")))
      : el("tr", {}, el("td", { colspan: 7, class: "empty" }, "no schedules")))))));
}
