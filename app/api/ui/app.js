// tasklease's web view: the public /v1 API and its streams, read with the caller's key.
// No framework and no build step. Every piece of data goes in as text (textContent or
// text nodes), never as markup.
const KEY = "tasklease.key";
const THEME = "tasklease.theme";
const FLOW = [["queued"], ["leased"], ["running"], ["retrying", "waiting", "stalled"],
  ["succeeded", "dead_lettered", "cancelled"]];
const FINISHED = new Set(["succeeded", "dead_lettered", "cancelled"]);
const $ = (id) => document.getElementById(id);
let me = null;          // GET /v1/me
let stopLive = null;    // aborts the current page's stream

// --- small helpers -------------------------------------------------------------------
function el(tag, attrs = {}, ...kids) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "on") for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
    else if (k === "class") node.className = v;
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined || kid === false) continue;
    node.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return node;
}
const when = (t) => (t ? new Date(t).toLocaleString() : "");
function age(seconds) {
  if (seconds === null || seconds === undefined) return "none";
  const s = Math.round(seconds);
  if (s < 90) return `${s} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}
const json = (v) => (typeof v === "string" ? v : JSON.stringify(v, null, 2));
const badge = (state) => el("span", { class: `badge s-${state}` }, state);
// Runs and attempts as the job's JSON counts them: runs, every start of the kind's code;
// attempt, the attempts used (a run that ends waiting gives its attempt back).
const attempts = (j, of = "/") => `${j.attempt}${of}${j.max_attempts}`;
// What a waiting job waits for (waiting_for, as the API answers it), without its deadline.
const waitWhat = (w) => (w ? `${w.kind}${w.key ? ` ${w.key}` : ""}` : "");
const jobLink = (id, text) => el("a", { href: `#/jobs/${encodeURIComponent(id)}` }, text || String(id).slice(0, 8));
function toast(text, bad = false) {
  const t = $("toast");
  t.textContent = text;
  t.className = bad ? "toast bad" : "toast";
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 4000);
}
function debounce(fn, ms) {
  let timer = null;
  return () => { clearTimeout(timer); timer = setTimeout(fn, ms); };
}

// --- the API -------------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, detail) { super(`${status}: ${detail}`); this.status = status; this.detail = detail; }
}
async function api(path, options = {}) {
  const headers = { Authorization: `Bearer ${sessionStorage.getItem(KEY) || ""}` };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path.replace(/^\//, "../"), {
    method: options.method || "GET", headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  if (resp.status === 401 && !options.quiet) { logout("the API refused the key"); }
  const body = resp.headers.get("content-type")?.includes("json") ? await resp.json() : null;
  if (!resp.ok) {
    const detail = body && body.detail !== undefined ? json(body.detail) : resp.statusText;
    throw new ApiError(resp.status, detail);
  }
  return body;
}
const query = (params) => {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v) q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : "";
};

// Server-Sent Events read with fetch (EventSource sends no Authorization header): frames
// parsed here (id, event, data), resumed with Last-Event-ID after a drop, until `end`.
function follow(path, onEvent, onStatus) {
  const abort = new AbortController();
  let last = null;
  let polling = false; // the API answered a long poll: ask with ?after= from now on
  const sep = path.includes("?") ? "&" : "?";
  (async () => {
    while (!abort.signal.aborted) {
      try {
        const headers = { Authorization: `Bearer ${sessionStorage.getItem(KEY) || ""}`, Accept: "text/event-stream" };
        if (last !== null) headers["Last-Event-ID"] = last;
        const url = polling ? `${path}${sep}after=${encodeURIComponent(last)}&wait=20` : path;
        const resp = await fetch(url.replace(/^\//, "../"), { headers, signal: abort.signal });
        if (resp.status === 401) return logout("the API refused the key");
        if (!resp.ok || !resp.body) throw new Error(`stream: ${resp.status}`);
        onStatus(true);
        if (resp.headers.get("content-type")?.includes("json")) {
          // Behind API Gateway + Lambda the route answers a long poll: {events, next, done}.
          const page = await resp.json();
          for (const e of page.events) if (onEvent(e.type, e) === false) { abort.abort(); return; }
          last = page.next;
          if (page.done) { onEvent("end", {}); abort.abort(); return; }
          polling = true;
          continue;
        }
        const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        let frame = { id: null, event: "message", data: [] };
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let m;
          while ((m = /\r\n|\r|\n/.exec(buf))) {
            if (m[0] === "\r" && m.index === buf.length - 1) break; // maybe half of \r\n
            const line = buf.slice(0, m.index);
            buf = buf.slice(m.index + m[0].length);
            if (line === "") {
              if (frame.id !== null) last = frame.id;
              if (frame.data.length) {
                const data = JSON.parse(frame.data.join("\n"));
                if (onEvent(frame.event, data) === false || frame.event === "end") { abort.abort(); return; }
              }
              frame = { id: null, event: "message", data: [] };
            } else if (!line.startsWith(":")) {
              const at = line.indexOf(":");
              const field = at < 0 ? line : line.slice(0, at);
              let val = at < 0 ? "" : line.slice(at + 1);
              if (val.startsWith(" ")) val = val.slice(1);
              if (field === "id") frame.id = val;
              else if (field === "event") frame.event = val;
              else if (field === "data") frame.data.push(val);
            }
          }
        }
      } catch (err) {
        if (abort.signal.aborted) return;
      }
      onStatus(false);
      await new Promise((r) => setTimeout(r, 1000));
    }
  })();
  return () => abort.abort();
}
function liveStatus(on) {
  $("live").className = on ? "live on" : "live";
  $("live").title = on ? "live: following the stream" : "reconnecting…";
}

// --- key, theme, routing ----------------------------------------------------------------
function logout(why) {
  sessionStorage.removeItem(KEY);
  me = null;
  if (stopLive) stopLive();
  showLogin(why || "");
}
function showLogin(why) {
  $("login").hidden = false;
  $("view").replaceChildren();
  $("nav").hidden = true;
  $("logout").hidden = true;
  $("who").textContent = "";
  $("login-error").textContent = why;
  $("key").focus();
}
async function login(key) {
  sessionStorage.setItem(KEY, key.trim());
  try {
    me = await api("/v1/me", { quiet: true });
  } catch (err) {
    sessionStorage.removeItem(KEY);
    return showLogin(err.status === 401 ? "That key was refused." : `The API said ${err.message}`);
  }
  $("login").hidden = true;
  $("nav").hidden = false;
  $("logout").hidden = false;
  $("who").textContent = `${me.tenant}${me.admin ? " · admin" : ""}`;
  route();
}
function applyTheme(theme) {
  if (theme) document.documentElement.dataset.theme = theme;
  else delete document.documentElement.dataset.theme;
}
function toggleTheme() {
  const dark = document.documentElement.dataset.theme
    ? document.documentElement.dataset.theme === "dark"
    : matchMedia("(prefers-color-scheme: dark)").matches;
  const next = dark ? "light" : "dark";
  localStorage.setItem(THEME, next);
  applyTheme(next);
}
function route() {
  if (!me) return;
  if (stopLive) { stopLive(); stopLive = null; }
  liveStatus(false);
  const hash = location.hash.replace(/^#/, "") || "/";
  const view = $("view");
  view.replaceChildren();
  const job = hash.match(/^\/jobs\/([0-9a-f-]{36})$/);
  const page = job ? jobPage(view, job[1])
    : hash === "/dead-letters" ? deadLetters(view)
      : hash === "/schedules" ? schedules(view) : overview(view);
  page.catch((err) => view.replaceChildren(el("p", { class: "error" }, err.message)));
}

// --- the overview ------------------------------------------------------------------------
const filters = { state: "", kind: "", tenant: "" };
// The list is the API's order, newest created first (its cursor pages by creation): the
// time shown is that one, so the rows read in order.
const JOB_COLUMNS = ["job", "kind", "state", "runs", "attempts used", "waiting for", "until", "tenant", "created"];
async function overview(view) {
  const diagram = el("div", { class: "flow", id: "flow" });
  for (const column of FLOW) {
    diagram.append(el("div", { class: "flow-col" }, column.map((s) => el("a", {
      class: `node s-${s}`, "data-state": s, href: "#/",
      on: { click: (e) => { e.preventDefault(); filters.state = filters.state === s ? "" : s; refresh(); } },
    }, el("span", { class: "name" }, s.replace("_", " ")), el("b", { class: "count", id: `count-${s}` }, "–")))));
  }
  const stats = el("div", { class: "stats" },
    el("div", {}, "oldest queued ", el("b", { id: "oldest" }, "–")),
    me.admin ? el("div", {}, "dead-letter queue ", el("b", { id: "dlq" }, "–")) : null);
  const form = el("form", { class: "filters", on: { submit: (e) => { e.preventDefault(); refresh(); } } },
    el("select", { id: "f-state", "aria-label": "state", on: { change: (e) => { filters.state = e.target.value; refresh(); } } },
      el("option", { value: "" }, "any state"), FLOW.flat().map((s) => el("option", { value: s }, s))),
    el("input", { id: "f-kind", placeholder: "kind", "aria-label": "kind", value: filters.kind,
      on: { change: (e) => { filters.kind = e.target.value.trim(); refresh(); } } }),
    me.admin ? el("input", { id: "f-tenant", placeholder: "tenant", "aria-label": "tenant", value: filters.tenant,
      on: { change: (e) => { filters.tenant = e.target.value.trim(); refresh(); restart(); } } }) : null);
  const rows = el("tbody", { id: "jobs" });
  const more = el("button", { type: "button", id: "more", hidden: true }, "More");
  view.append(el("section", { class: "card" }, el("h2", {}, "The flow"), diagram, stats),
    el("section", { class: "card" }, el("h2", {}, "Recent jobs"), form,
      el("div", { class: "scroll" }, el("table", { class: "jobs" },
        el("thead", {}, el("tr", {}, JOB_COLUMNS.map((h) => el("th", {}, h)))),
        rows)), more));

  let cursor = null;
  const listRows = async (append) => {
    const page = await api(`/v1/jobs${query({ ...filters, limit: 25, cursor: append ? cursor : "" })}`);
    if (!append) rows.replaceChildren();
    for (const j of page.items) {
      rows.append(el("tr", { "data-job": j.id, "data-state": j.state },
        el("td", {}, jobLink(j.id)), el("td", {}, j.kind), el("td", {}, badge(j.state)),
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
    if (me.admin && o.dead_letter_queue) {
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
    if (stopLive) stopLive();
    stopLive = follow(`/v1/stream${query({ tenant: filters.tenant })}`, (type) => {
      if (type === "transition" || type === "open") later();
    }, liveStatus);
  }
  await refresh();
  restart();
}

// --- a job ---------------------------------------------------------------------------------
async function jobPage(view, id) {
  const head = el("section", { class: "card" });
  const published = stateCard(id);
  const progress = el("div", { class: "progress", hidden: true }, el("div", { class: "bar", id: "bar" }), el("span", { id: "note" }));
  const output = el("ol", { class: "output", id: "output" });
  const quiet = el("p", { class: "muted" }, "no progress or output reported");
  const texts = el("div", { id: "texts" });
  const timeline = el("tbody", { id: "timeline" });
  const effects = el("tbody", { id: "effects" });
  const waits = el("div", { id: "waits" });
  const family = el("div", { id: "family" });
  const inbox = el("tbody", { id: "messages" });
  const sending = messageForm(id, () => load());
  view.append(head,
    el("section", { class: "card" }, el("h2", {}, "Progress and output"), quiet, progress, texts, output),
    el("section", { class: "card" }, el("h2", {}, "Waits"), waits),
    published.section,
    el("section", { class: "card" }, el("h2", {}, "Timeline"), el("div", { class: "scroll" }, el("table", {},
      el("thead", {}, el("tr", {}, ["time", "from", "to", "attempt", "worker", "detail"].map((h) => el("th", {}, h)))), timeline))),
    el("section", { class: "card" }, el("h2", {}, "Effects"), el("div", { class: "scroll" }, el("table", {},
      el("thead", {}, el("tr", {}, ["key", "seq", "attempt", "worker", "recorded", "result"].map((h) => el("th", {}, h)))), effects))),
    el("section", { class: "card" }, el("h2", {}, "Parent and children"), family),
    el("section", { class: "card" }, el("h2", {}, "Messages"), el("div", { class: "scroll" }, el("table", {},
      el("thead", {}, el("tr", {}, ["id", "topic", "body", "sent", "read"].map((h) => el("th", {}, h)))), inbox)), sending));

  const chunks = new Map(); // effect key -> {seq -> text}, shown as one text per key
  const load = async () => {
    const [job, events, found, cbs] = await Promise.all([api(`/v1/jobs/${id}`), api(`/v1/jobs/${id}/events`),
      api(`/v1/jobs/${id}/effects`), api(`/v1/jobs/${id}/callbacks`)]);
    renderHead(head, job);
    // An effect recorded before the last run began was replayed by it, not run again.
    const lastRun = events.filter((e) => e.to_state === "running").map((e) => e.at).sort().pop() || "";
    timeline.replaceChildren(...events.map((e) => el("tr", {}, el("td", {}, when(e.at)),
      el("td", {}, e.from_state ? badge(e.from_state) : ""), el("td", {}, badge(e.to_state)),
      el("td", {}, e.attempt), el("td", {}, e.worker || ""), el("td", { class: "detail" }, e.detail || ""))));
    effects.replaceChildren(...found.map((f) => el("tr", {}, el("td", {}, f.key), el("td", {}, f.seq),
      el("td", {}, `${f.attempt} · ${f.recorded_at < lastRun ? "replayed" : "run"}`),
      el("td", {}, f.worker || ""), el("td", {}, when(f.recorded_at)), el("td", {}, el("pre", {}, json(f.result))))));
    if (!found.length) effects.append(el("tr", {}, el("td", { colspan: 6, class: "empty" }, "no effects recorded")));
    renderWaits(waits, job, cbs, load);
    renderMessages(inbox, await api(`/v1/jobs/${id}/messages`));
    sending.hidden = job.state === "succeeded" || job.state === "cancelled"; // they take none
    family.replaceChildren(
      el("p", {}, "parent: ", job.parent_id ? jobLink(job.parent_id, job.parent_id) : "none"),
      el("p", {}, `children: ${job.children_count}`),
      el("ul", {}, job.children.map((c) => el("li", {}, jobLink(c.id), " ", c.kind, " ", badge(c.state)))));
  };
  await load();
  await published.load();
  const later = debounce(() => load().catch((err) => toast(err.message, true)), 200);
  stopLive = follow(`/v1/jobs/${id}/stream`, (type, e) => {
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
function renderHead(head, job) {
  const actions = el("div", { class: "actions" });
  if (job.state === "dead_lettered") actions.append(el("button", { type: "button", id: "redrive", on: { click: () => redrive(job.id) } }, "Redrive"));
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
  facts.replaceChildren(...[["id", job.id], ["tenant", job.tenant], ["runs", job.runs], ["attempts used", attempts(job, " of ")],
    ["created", when(job.created_at)], ["finished", when(job.finished_at) || "not yet"],
    // The whole run's deadline: past it the job ends dead_lettered, "deadline passed" (its last error).
    ["deadline", job.deadline ? when(job.deadline) : "none"], ["worker", job.lease_owner || "none (no lease)"],
    ["last error", job.last_error || "none"]].flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
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
async function redrive(id) {
  try {
    await api(`/v1/jobs/${id}/redrive`, { method: "POST" });
    toast("redriven: queued again");
  } catch (err) { toast(err.message, true); }
  route();
}

// --- dead letters and schedules --------------------------------------------------------------
async function deadLetters(view) {
  const rows = await api("/v1/dead-letters?limit=100");
  view.append(el("section", { class: "card" }, el("h2", {}, "Dead letters"),
    el("p", { class: "muted" }, me.admin ? "Every tenant's (admin key)." : "This tenant's."),
    el("div", { class: "scroll" }, el("table", { id: "dead-letters" },
      el("thead", {}, el("tr", {}, ["job", "kind", "tenant", "attempts", "reason", "when", ""].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows.length ? rows.map((j) => el("tr", { "data-job": j.id }, el("td", {}, jobLink(j.id)), el("td", {}, j.kind),
        el("td", {}, j.tenant), el("td", {}, j.attempt), el("td", { class: "detail" }, j.last_error || j.dead_lettered_by || ""),
        el("td", {}, when(j.finished_at || j.updated_at)),
        el("td", {}, el("button", { type: "button", class: "redrive", on: { click: () => redrive(j.id) } }, "Redrive"))))
        : el("tr", {}, el("td", { colspan: 7, class: "empty" }, "no dead letters")))))));
}
async function schedules(view) {
  const rows = await api("/v1/schedules?limit=100");
  view.append(el("section", { class: "card" }, el("h2", {}, "Schedules"), el("div", { class: "scroll" }, el("table", {},
    el("thead", {}, el("tr", {}, ["name", "when", "kind", "tenant", "next", "last job", "state"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.length ? rows.map((s) => el("tr", {}, el("td", {}, s.name || String(s.id).slice(0, 8)),
      el("td", {}, `${s.description} (${s.cron}, ${s.timezone})`), el("td", {}, s.kind), el("td", {}, s.tenant),
      el("td", {}, when(s.next_slot)), el("td", {}, s.last_job_id ? jobLink(s.last_job_id) : ""),
      el("td", {}, s.enabled ? "on" : "paused", s.last_error ? ` · ${s.last_error}` : "")))
      : el("tr", {}, el("td", { colspan: 7, class: "empty" }, "no schedules")))))));
}

// --- start ------------------------------------------------------------------------------------
applyTheme(localStorage.getItem(THEME));
$("theme").addEventListener("click", toggleTheme);
$("logout").addEventListener("click", () => logout(""));
$("login-form").addEventListener("submit", (e) => { e.preventDefault(); login($("key").value); $("key").value = ""; });
window.addEventListener("hashchange", route);
if (sessionStorage.getItem(KEY)) login(sessionStorage.getItem(KEY)); else showLogin("");
