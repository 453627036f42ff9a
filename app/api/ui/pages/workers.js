// The workers: each worker process and Lambda environment the database knows (GET
// /v1/workers, an admin key), alive, gone or stopped, refreshed every heartbeat.
import { age, api, el, session, toast, when } from "../core.js";

// A status in the colours of the states it is like.
const LOOK = { alive: "succeeded", gone: "dead_lettered", stopped: "cancelled", idle: "waiting" };
const COLUMNS = ["status", "name", "host", "pid", "carrier", "version", "started", "last seen", "running", "invocations"];

export async function workers(view) {
  if (!session.me.admin) {
    view.append(el("section", { class: "card" }, el("h2", {}, "Workers"),
      el("p", { class: "muted", id: "workers-admin-only" },
        "Workers serve every tenant: an admin key lists them (GET /v1/workers answers 403 to a tenant key).")));
    return;
  }
  const rows = el("tbody", { id: "workers" });
  const note = el("p", { class: "muted" });
  view.append(el("section", { class: "card" }, el("h2", {}, "Workers"), note,
    el("div", { class: "scroll" }, el("table", {},
      el("thead", {}, el("tr", {}, COLUMNS.map((h) => el("th", {}, h)))), rows))));
  const draw = async () => {
    const doc = await api("/v1/workers");
    note.textContent = `A process heartbeats every ${doc.heartbeat_seconds} s and reads as gone after ` +
      `${doc.gone_after_seconds} s of silence; a Lambda environment counts its invocations.`;
    rows.replaceChildren(...(doc.workers.length ? doc.workers.map((w) => {
      const lam = w.runtime === "lambda";
      return el("tr", { "data-worker": w.id, "data-name": w.name, "data-status": w.status },
        el("td", {}, el("span", { class: `badge s-${LOOK[w.status] || "queued"}` }, w.status)),
        el("td", {}, w.name), el("td", {}, w.host), el("td", {}, w.pid), el("td", {}, w.carrier),
        el("td", {}, w.version), el("td", {}, when(w.started_at)),
        el("td", { title: when(w.last_seen) }, `${age(w.seen_seconds_ago)} ago`),
        el("td", {}, lam ? "" : w.running),
        el("td", {}, lam ? `${w.invocations} (${w.messages} messages)` : ""));
    }) : [el("tr", {}, el("td", { colspan: COLUMNS.length, class: "empty" },
      "no worker has registered yet: start one with `tasklease worker`"))]));
    rows.dataset.loaded = "yes";
    return doc.heartbeat_seconds;
  };
  const every = await draw();
  const timer = setInterval(() => {
    if (!rows.isConnected) return clearInterval(timer);
    draw().catch((err) => toast(err.message, true));
  }, Math.max(1000, every * 1000));
  session.stopLive = () => clearInterval(timer);
}
