// One job: its facts and actions, progress and output, waits, state, timeline, effects,
// family and messages, kept current by its stream.
import {
  $, FINISHED, api, attempts, badge, debounce, el, follow, json, liveStatus,
  session, toast, when,
} from "../core.js";
import { renderTree, renderWaterfall, usageFacts } from "./steps.js";
import { madeFrom, origin, rerunEditor, source } from "./rerun.js";
import { showJobs } from "./overview.js";

// --- a job ---------------------------------------------------------------------------------
export async function jobPage(view, id) {
  const head = el("section", { class: "card" });
  const published = stateCard(id);
  const progress = el("div", { class: "progress", hidden: true }, el("div", { class: "bar", id: "bar" }), el("span", { id: "note" }));
  const output = el("ol", { class: "output", id: "output" });
  const quiet = el("p", { class: "muted" }, "no progress or output reported");
  const texts = el("div", { id: "texts" });
  const timeline = el("tbody", { id: "timeline" });
  const effects = el("tbody", { id: "effects" });
  const waits = el("div", { id: "waits" });
  const family = el("div", { id: "family", class: "tree" });
  const steps = el("div", { id: "waterfall", class: "waterfall" });
  const inbox = el("tbody", { id: "messages" });
  const sending = messageForm(id, () => load());
  const editor = rerunEditor();
  view.append(head, editor.form,
    el("section", { class: "card" }, el("h2", {}, "Steps"), steps),
    el("section", { class: "card" }, el("h2", {}, "Progress and output"), quiet, progress, texts, output),
    el("section", { class: "card" }, el("h2", {}, "Waits"), waits),
    published.section,
    el("section", { class: "card" }, el("h2", {}, "Timeline"), el("div", { class: "scroll" }, el("table", {},
      el("thead", {}, el("tr", {}, ["time", "from", "to", "attempt", "worker", "detail"].map((h) => el("th", {}, h)))), timeline))),
    el("section", { class: "card" }, el("h2", {}, "Effects"), el("div", { class: "scroll" }, el("table", {},
      el("thead", {}, el("tr", {}, ["key", "seq", "attempt", "worker", "recorded", "result", ""].map((h) => el("th", {}, h)))), effects))),
    el("section", { class: "card" }, el("h2", {}, "Parent, children, re-runs"), family),
    el("section", { class: "card" }, el("h2", {}, "Messages"), el("div", { class: "scroll" }, el("table", {},
      el("thead", {}, el("tr", {}, ["id", "topic", "body", "sent", "read"].map((h) => el("th", {}, h)))), inbox)), sending));

  const chunks = new Map(); // effect key -> {seq -> text}, shown as one text per key
  const load = async () => {
    const [job, events, found, cbs] = await Promise.all([api(`/v1/jobs/${id}`), api(`/v1/jobs/${id}/events`),
      api(`/v1/jobs/${id}/effects`), api(`/v1/jobs/${id}/callbacks`)]);
    renderHead(head, job, editor, found.length);
    renderWaterfall(steps, job, events, found);
    // An effect recorded before the last run began was replayed by it, not run again.
    const lastRun = events.filter((e) => e.to_state === "running").map((e) => e.at).sort().pop() || "";
    timeline.replaceChildren(...events.map((e) => el("tr", {}, el("td", {}, when(e.at)),
      el("td", {}, e.from_state ? badge(e.from_state) : ""), el("td", {}, badge(e.to_state)),
      el("td", {}, e.attempt), el("td", {}, e.worker || ""), el("td", { class: "detail" }, e.detail || ""))));
    // A finished job forks from any of its steps: the ones before it are inherited.
    const fork = (f, i) => (FINISHED.has(job.state) ? el("button", { type: "button", class: "quiet fork",
      on: { click: () => editor.open(job, f.key, i) } }, "Fork from here") : "");
    effects.replaceChildren(...found.map((f, i) => el("tr", { "data-effect": f.key, class: f.inherited_from ? "inherited" : null },
      el("td", {}, f.key), el("td", {}, f.seq), el("td", {}, source(f, lastRun)),
      el("td", {}, f.worker || ""), el("td", {}, when(f.recorded_at)), el("td", {}, el("pre", {}, json(f.result))),
      el("td", {}, fork(f, i)))));
    if (!found.length) effects.append(el("tr", {}, el("td", { colspan: 7, class: "empty" }, "no effects recorded")));
    renderWaits(waits, job, cbs, load);
    renderMessages(inbox, await api(`/v1/jobs/${id}/messages`));
    sending.hidden = job.state === "succeeded" || job.state === "cancelled"; // they take none
    renderTree(family, job);
    family.append(madeFrom(job));
  };
  await load();
  await published.load();
  const later = debounce(() => load().catch((err) => toast(err.message, true)), 200);
  session.stopLive = follow(`/v1/jobs/${id}/stream`, (type, e) => {
    if (type === "progress" || type === "output" || type === "chunk") quiet.hidden = true;
    if (type === "progress") {
      progress.hidden = false;
      $("bar").style.width = `${Math.round(100 * Math.max(0, Math.min(1, e.data.fraction ?? 0)))}%`;
      $("note").textContent = `${Math.round(100 * (e.data.fraction ?? 0))}% ${e.data.note || ""}`;
    } else if (type === "output") {
      output.append(el("li", {}, el("pre", {}, json(e.data))));
    } else if (type === "chunk") {
      if (!chunks.has(e.data.key)) {
        chunks.set(e.data.key, new Map());
        texts.append(el("h3", {}, e.data.key), el("pre", { class: "text", "data-key": e.data.key }));
      }
      const parts = chunks.get(e.data.key);
      parts.set(e.data.seq, e.data.text || "");
      const text = [...parts.entries()].sort((a, b) => a[0] - b[0]).map((p) => p[1]).join("");
      [...texts.querySelectorAll("pre.text")].find((p) => p.dataset.key === e.data.key).textContent = text;
    } else if (type === "state") {
      published.put({ ...e.data, updated_at: e.at });
    } else if (type === "transition" || type === "end") {
      later();
    }
  }, liveStatus);
}
// The state the job publishes (ctx.set_state): a row per key, kept current by the stream's
// state events (a version older than the one shown is ignored: a reload's answer may be).
function stateCard(id) {
  const rows = el("tbody", { id: "state" });
  const empty = el("p", { class: "muted" }, "no state published");
  const shown = new Map(); // key -> version shown
  const put = (s) => {
    if ((shown.get(s.key) ?? 0) >= s.version) return;
    shown.set(s.key, s.version);
    const row = el("tr", { "data-key": s.key }, el("td", {}, s.key), el("td", {}, el("pre", {}, json(s.value))),
      el("td", {}, s.version), el("td", {}, when(s.updated_at)));
    const old = [...rows.children].find((r) => r.dataset.key === s.key);
    if (old) old.replaceWith(row); else rows.append(row);
    empty.hidden = true;
  };
  const section = el("section", { class: "card" }, el("h2", {}, "State"), empty,
    el("div", { class: "scroll" }, el("table", {}, el("thead", {}, el("tr", {}, ["key", "value", "version", "set"].map((h) => el("th", {}, h)))), rows)));
  return { section, put, load: async () => (await api(`/v1/jobs/${id}/state`)).items.forEach(put) };
}
function renderHead(head, job, editor, recorded) {
  const actions = el("div", { class: "actions" });
  if (job.state === "dead_lettered") actions.append(el("button", { type: "button", id: "redrive", on: { click: () => redrive(job.id) } }, "Redrive"));
  if (FINISHED.has(job.state)) actions.append(el("button", { type: "button", id: "rerun", on: { click: () => editor.open(job) } }, "Re-run"));
  // A fork that inherits every recorded step: it runs from the step after them, the one a
  // dead letter failed in (a failed step records nothing).
  if (FINISHED.has(job.state) && recorded) {
    actions.append(el("button", { type: "button", id: "fork-last", class: "quiet", on: { click: () => editor.open(job, null, recorded, "fork") } },
      job.state === "dead_lettered" ? "Fork from the failed step" : "Fork after the last step"));
  }
  if (!FINISHED.has(job.state)) {
    actions.append(el("button", { type: "button", class: "quiet", on: { click: async () => {
      try { await api(`/v1/jobs/${job.id}/cancel`, { method: "POST" }); toast("cancel asked for"); } catch (err) { toast(err.message, true); }
    } } }, "Cancel"));
  }
  head.replaceChildren(el("h1", {}, job.kind, " ", badge(job.state)),
    el("dl", { class: "facts" }),
    actions,
    el("details", {}, el("summary", {}, "payload and result"), el("pre", {}, json(job.payload)), el("pre", {}, json(job.result))));
  const facts = head.querySelector("dl");
  facts.replaceChildren(...[["id", job.id], ["tenant", job.tenant], ["priority", job.priority],
    // The version of its kind it first started on (docs/howto/kind-versions.md).
    ["kind version", job.kind_version ? `version ${job.kind_version}`
      : job.runs ? "not recorded (started before versions were)" : "not started yet"],
    // Its flow-control key (docs/howto/flow-control.md), a link to the key's jobs; as text, never markup.
    ["key", job.key ? el("a", { href: "#/", id: "job-key", on: { click: (e) => { e.preventDefault(); showJobs({ key: job.key }); } } }, job.key) : "none"],
    ...keyFacts(job.key_status),
    ["parked", !job.parked ? "no" : job.key ? "yes: waits its turn (behind its key's jobs or its tenant's window), sent when a slot frees"
      : "yes: queued past its tenant's window, sent when a lease ends"],
    ["runs", job.runs], ["attempts used", attempts(job, " of ")], ...usageFacts(job.usage),
    ["created", when(job.created_at)], ["finished", when(job.finished_at) || "not yet"],
    // The whole run's deadline: past it the job ends dead_lettered, "deadline passed" (its last error).
    ["deadline", job.deadline ? when(job.deadline) : "none"], ["worker", job.lease_owner || "none (no lease)"],
    ["last error", job.last_error || "none"], ...origin(job)].flatMap(([k, v]) => [el("dt", {}, k), el("dd", { "data-fact": k }, v)]));
}
// A keyed job's standing on its key (GET /v1/jobs/{id}'s key_status), as `tasklease jobs
// show` words it: the key's other jobs, and whether it waits for its key or its rate.
function keyFacts(k) {
  if (!k) return [];
  const waits = k.waits_for_key
    ? "for its key: its key's concurrency of jobs are ahead of it; it starts when one of them ends"
    : k.waits_for_rate ? "for its key's rate: the key's starts in the period are used up" : "no";
  return [["the key's jobs", `${k.holding} others holding it, ${k.queued_ahead} queued before this one, ${k.open} unfinished`],
    ["waits for its key", waits]];
}
// What a callback asks (the details its kind gave): an agent's tool call that needs
// approval, by its tool's name and arguments; other details as JSON. All as text.
function asks(d) {
  if (d === null || d === undefined) return null;
  const tool = typeof d === "object" && !Array.isArray(d) && typeof d.tool === "string";
  return el("div", { class: "asks" }, tool
    ? ["run tool ", el("code", { class: "tool" }, d.tool), " with ", el("pre", { class: "args" }, json(d.args ?? null))]
    : el("pre", {}, json(d)));
}
function renderWaits(box, job, cbs, reload) {
  const w = job.waiting_for;
  box.replaceChildren(el("p", {}, w ? `waiting for ${w.kind}${w.key ? ` "${w.key}"` : ""}${w.until ? ` until ${when(w.until)}` : ""}`
    : "not waiting"));
  for (const cb of cbs) {
    const row = el("div", { class: "callback", "data-callback": cb.key }, el("b", {}, cb.key), " ", badge(cb.state),
      ` deadline ${when(cb.deadline)}`, cb.error ? ` · ${cb.error}` : "", asks(cb.details));
    if (cb.state === "pending") {
      const answer = (body) => async () => {
        try {
          await api(`/v1/jobs/${job.id}/callbacks/${encodeURIComponent(cb.key)}`, { method: "POST", body });
          toast(body.error ? "rejected" : "approved");
          await reload();
        } catch (err) { toast(err.message, true); }
      };
      row.append(el("span", { class: "actions" },
        el("button", { type: "button", class: "approve", on: { click: answer({ result: { approved: true, by: "web view" } }) } }, "Approve"),
        el("button", { type: "button", class: "reject", on: { click: answer({ error: "rejected in the web view" }) } }, "Reject")));
    }
    box.append(row);
  }
}
// A job's messages (POST /v1/jobs/{id}/messages, read by its ctx.receive(topic)). The form
// is made once per page: a reload on the job's transitions keeps what is being typed.
function renderMessages(box, msgs) {
  box.replaceChildren(...msgs.map((m) => el("tr", { "data-message": m.id }, el("td", {}, m.id), el("td", {}, m.topic),
    el("td", {}, el("pre", {}, json(m.body))), el("td", {}, when(m.sent_at)),
    el("td", {}, m.consumed_at ? when(m.consumed_at) : "unread"))));
  if (!msgs.length) box.append(el("tr", {}, el("td", { colspan: 5, class: "empty" }, "no messages")));
}
function messageForm(id, reload) {
  const topic = el("input", { name: "topic", value: "user", required: true, maxlength: 100, "aria-label": "topic" });
  const body = el("textarea", { name: "body", rows: 2, "aria-label": "body (JSON)", placeholder: '{"text": "hello"}' });
  const send = async (ev) => {
    ev.preventDefault();
    let value;
    try { value = JSON.parse(body.value.trim() || "null"); } catch (err) { toast(`the body is not JSON: ${err.message}`, true); return; }
    try {
      const sent = await api(`/v1/jobs/${id}/messages`, { method: "POST", body: { topic: topic.value, body: value } });
      toast(sent.job_woken ? "sent: the job is woken" : "sent");
      body.value = "";
      await reload();
    } catch (err) { toast(err.message, true); }
  };
  return el("form", { id: "send-message", class: "send", on: { submit: send } }, topic, body, el("button", { type: "submit" }, "Send"));
}
export async function redrive(id) {
  try {
    await api(`/v1/jobs/${id}/redrive`, { method: "POST" });
    toast("redriven: queued again");
  } catch (err) { toast(err.message, true); }
  session.route();
}
