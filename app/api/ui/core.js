// tasklease's web view, the pieces every page shares: building nodes from text, the
// public /v1 API read with the caller's key, and its streams. No framework and no build
// step. Every piece of data goes in as text (textContent or text nodes), never as markup.
export const KEY = "tasklease.key";
export const FLOW = [["queued"], ["leased"], ["running"], ["retrying", "waiting", "stalled"],
  ["succeeded", "dead_lettered", "cancelled"]];
export const FINISHED = new Set(["succeeded", "dead_lettered", "cancelled"]);
export const $ = (id) => document.getElementById(id);
// What the pages share: the caller (GET /v1/me), the current page's stream to abort, and
// the hooks app.js sets (showing the log-in, drawing the page for the address again).
export const session = { me: null, stopLive: null, showLogin: () => {}, route: () => {} };
export function logout(why) {
  sessionStorage.removeItem(KEY);
  session.me = null;
  if (session.stopLive) session.stopLive();
  session.showLogin(why || "");
}

// --- small helpers -------------------------------------------------------------------
export function el(tag, attrs = {}, ...kids) {
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
export const when = (t) => (t ? new Date(t).toLocaleString() : "");
export function age(seconds) {
  if (seconds === null || seconds === undefined) return "none";
  const s = Math.round(seconds);
  if (s < 90) return `${s} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}
export const json = (v) => (typeof v === "string" ? v : JSON.stringify(v, null, 2));
export const badge = (state) => el("span", { class: `badge s-${state}` }, state);
// Runs and attempts as the job's JSON counts them: runs, every start of the kind's code;
// attempt, the attempts used (a run that ends waiting gives its attempt back).
export const attempts = (j, of = "/") => `${j.attempt}${of}${j.max_attempts}`;
// What a waiting job waits for (waiting_for, as the API answers it), without its deadline.
export const waitWhat = (w) => (w ? `${w.kind}${w.key ? ` ${w.key}` : ""}` : "");
export const jobLink = (id, text) => el("a", { href: `#/jobs/${encodeURIComponent(id)}` }, text || String(id).slice(0, 8));
export function toast(text, bad = false) {
  const t = $("toast");
  t.textContent = text;
  t.className = bad ? "toast bad" : "toast";
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 4000);
}
export function debounce(fn, ms) {
  let timer = null;
  return () => { clearTimeout(timer); timer = setTimeout(fn, ms); };
}

// --- the API -------------------------------------------------------------------------
export class ApiError extends Error {
  constructor(status, detail) { super(`${status}: ${detail}`); this.status = status; this.detail = detail; }
}
export async function api(path, options = {}) {
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
export const query = (params) => {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v) q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : "";
};

// Server-Sent Events read with fetch (EventSource sends no Authorization header): frames
// parsed here (id, event, data), resumed with Last-Event-ID after a drop, until `end`.
export function follow(path, onEvent, onStatus) {
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
export function liveStatus(on) {
  $("live").className = on ? "live on" : "live";
  $("live").title = on ? "live: following the stream" : "reconnecting…";
}
