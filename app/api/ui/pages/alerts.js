// The alerts sent (GET /v1/alerts): what happened, to which job, where each was delivered
// or why not yet. Every value goes in as text.
import { api, el, jobLink, session, when } from "../core.js";

function what(a) {
  const d = a.detail || {};
  if (a.type === "job.dead_lettered") return `${d.kind || ""}: ${d.error || d.detail || "dead-lettered"}`;
  if (a.type === "job.stalled") return `${d.kind || ""}: lease expired (attempt ${d.attempt}, worker ${d.worker || "?"})`;
  if (a.type === "dlq.over_threshold") return `${d.dead_lettered} dead-lettered (threshold ${d.threshold})`;
  if (a.type === "queue.oldest_over_threshold") return `oldest queued ${Math.round(d.age_seconds)} s (threshold ${d.threshold_seconds} s)`;
  if (a.type === "tenant.budget_exhausted") return `daily token budget ${d.budget} used up (${d.day})`;
  return "";
}
function delivery(a) {
  // A tenant key is shown its own webhook's deliveries only (the deployment's are the
  // operators'): nothing listed then means the deployment's destinations took it.
  const none = session.me.admin ? "nowhere configured" : "the deployment's destinations";
  if (a.delivered_at) return a.delivered.length ? a.delivered.join(", ") : none;
  if (a.given_up_at) return `given up: ${a.last_error || ""}`;
  return `retry ${when(a.next_attempt_at)}${a.last_error ? ` · ${a.last_error}` : ""}`;
}
export async function alerts(view) {
  const rows = await api("/v1/alerts?limit=100");
  view.append(el("section", { class: "card" }, el("h2", {}, "Alerts"),
    el("p", { class: "muted" }, session.me.admin ? "Every tenant's and the deployment's (admin key)." : "This tenant's."),
    el("div", { class: "scroll" }, el("table", { id: "alerts" },
      el("thead", {}, el("tr", {}, ["when", "type", "tenant", "job", "what", "delivered", "attempts"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows.length ? rows.map((a) => el("tr", { "data-alert": a.id },
        el("td", {}, when(a.created_at)), el("td", {}, a.type), el("td", {}, a.tenant || "(deployment)"),
        el("td", {}, a.job_id ? jobLink(a.job_id) : ""), el("td", { class: "detail" }, what(a)),
        el("td", { class: a.delivered_at ? "" : "detail" }, delivery(a)), el("td", {}, a.attempts)))
        : el("tr", {}, el("td", { colspan: 7, class: "empty" }, "no alerts")))))));
}
