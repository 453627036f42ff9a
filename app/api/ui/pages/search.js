// The overview's search and bulk actions: one filter (the search box, the state, kind,
// tenant, flow-control key, created-after and error fields) read by GET /v1/jobs as query parameters and
// by POST /v1/bulk as the same filter in JSON; row checkboxes, "all matching", and a bulk
// bar that shows the dry run's count before it acts and the operation's progress after.
import { $, api, el, query, toast } from "../core.js";

const ID = /^[0-9a-f-]{1,36}$/i;

// The search box: "field=value" is a payload field, "key:…" an idempotency key, hex digits
// a job id or its prefix, anything else an idempotency key. A field's value is text, or
// JSON when it reads as a number, true, false, null or a "quoted" string.
const JSON_VALUE = /^(-?\d+(\.\d+)?([eE][+-]?\d+)?|true|false|null|".*")$/;
export function parseSearch(text) {
  const t = text.trim();
  if (!t) return {};
  if (t.startsWith("key:")) return { idempotency_key: t.slice(4) };
  const eq = t.indexOf("=");
  if (eq > 0) {
    const raw = t.slice(eq + 1).trim();
    let value = raw;
    if (JSON_VALUE.test(raw)) try { value = JSON.parse(raw); } catch { value = raw; }
    return { payload: { [t.slice(0, eq).trim().replace(/^payload\./, "")]: value } };
  }
  return ID.test(t) ? { id_prefix: t } : { idempotency_key: t };
}

// The page's filters as GET /v1/jobs's query parameters.
export function listQuery(f, extra) {
  const s = parseSearch(f.search);
  const params = {
    state: f.state, kind: f.kind, tenant: f.tenant, key: f.key, id: s.id_prefix, idempotency_key: s.idempotency_key,
    created_after: f.createdAfter ? new Date(f.createdAfter).toISOString() : "", error: f.error, ...extra,
  };
  for (const [field, value] of Object.entries(s.payload || {})) {
    if (typeof value === "string") params[`payload.${field}`] = value;
    else params[`payload_json.${field}`] = JSON.stringify(value);
  }
  return query(params);
}

// The same filters as POST /v1/bulk's filter.
export function bulkFilter(f) {
  const s = parseSearch(f.search);
  const out = { ...s };
  if (f.state) out.states = [f.state];
  if (f.kind) out.kind = f.kind;
  if (f.tenant) out.tenant = f.tenant;
  if (f.key) out.key = f.key;
  if (f.createdAfter) out.created_after = new Date(f.createdAfter).toISOString();
  if (f.error) out.error = f.error;
  return out;
}

export function searchFields(f, onChange) {
  const input = (id, attrs, key) => el("input", {
    id, "aria-label": attrs.placeholder || key, ...attrs, value: f[key],
    on: { change: (e) => { f[key] = e.target.value.trim(); onChange(); } },
  });
  return [
    input("f-search", { placeholder: "id, idempotency key or field=value", class: "search" }, "search"),
    // A flow-control key (docs/howto/flow-control.md): the jobs of that key, any kind unless one is given.
    input("f-key", { placeholder: "flow key", title: "the jobs of this flow-control key" }, "key"),
    input("f-created", { type: "datetime-local", title: "created after", placeholder: "created after" }, "createdAfter"),
    input("f-error", { placeholder: "error contains" }, "error"),
  ];
}

// Selection: ids picked by checkbox, or every job matching the filter.
export function bulkBar(f, onDone) {
  const picked = new Set();
  let all = false;
  const count = el("span", { id: "bulk-count" });
  const allLink = el("button", { type: "button", class: "quiet", id: "select-all-matching" }, "Select all matching");
  const status = el("span", { id: "bulk-status", class: "muted" });
  const progress = el("progress", { id: "bulk-progress", hidden: true, max: 1, value: 0 });
  const confirm = el("span", { id: "bulk-confirm", hidden: true });
  const actions = el("span", { class: "bulk-actions" },
    el("button", { type: "button", id: "bulk-cancel", on: { click: () => ask("cancel") } }, "Cancel"),
    el("button", { type: "button", id: "bulk-redrive", class: "quiet", on: { click: () => ask("redrive") } }, "Redrive"),
    el("button", { type: "button", id: "bulk-rerun", class: "quiet", on: { click: () => ask("rerun") } }, "Re-run"));
  const bar = el("div", { class: "bulk", id: "bulk", hidden: true }, count, allLink, actions, confirm, progress, status);
  const body = (action) => ({ action, filter: all ? bulkFilter(f) : { ids: [...picked] } });
  function show() {
    // Nothing picked (after a run the bar stays with its result): no action to ask for.
    actions.hidden = !all && picked.size === 0;
    bar.hidden = !all && picked.size === 0;
    count.textContent = all ? "all jobs matching the filter" : `${picked.size} selected`;
    allLink.hidden = all;
  }
  allLink.addEventListener("click", () => { all = true; show(); });
  async function ask(action) {
    if (!all && picked.size === 0) return;
    try {
      const dry = await api("/v1/bulk", { method: "POST", body: { ...body(action), dry_run: true } });
      const go = el("button", { type: "button", id: "bulk-go", on: { click: () => run(action) } }, `${action} ${dry.total} jobs`);
      const back = el("button", { type: "button", class: "quiet", on: { click: () => { confirm.hidden = true; } } }, "Back");
      confirm.replaceChildren(`${dry.total} jobs match. `, go, back);
      confirm.dataset.total = String(dry.total);
      confirm.hidden = false;
    } catch (err) { toast(err.message, true); }
  }
  async function run(action) {
    confirm.hidden = true;
    try {
      let op = (await api("/v1/bulk", { method: "POST", body: body(action) })).operation;
      progress.hidden = false;
      for (;;) {
        const seen = op.done + op.skipped + op.failed;
        progress.max = Math.max(op.total, seen, 1);
        progress.value = seen;
        status.textContent = `${op.action}: ${seen} of ${op.total} (${op.done} done, ${op.skipped} skipped, ${op.failed} failed) · ${op.state}`;
        bar.dataset.state = op.state;
        if (op.state !== "running") break;
        await new Promise((r) => setTimeout(r, 400));
        op = await api(`/v1/bulk/${encodeURIComponent(op.id)}`);
      }
      toast(`${op.action}: ${op.done} done`);
      picked.clear();
      all = false;
      count.textContent = "finished:"; // the bar stays with the result until the next pick
      allLink.hidden = true;
      actions.hidden = true;
      onDone();
    } catch (err) { toast(err.message, true); }
  }
  return {
    bar,
    // A row's checkbox, and the header's (every row shown).
    box(id) {
      return el("input", { type: "checkbox", class: "pick", "data-job": id, "aria-label": `select ${id}`, checked: picked.has(id),
        on: { change: (e) => { if (e.target.checked) picked.add(id); else picked.delete(id); all = false; show(); } } });
    },
    pageBox(rows) {
      return el("input", { type: "checkbox", id: "select-page", "aria-label": "select every row shown", on: { change: (e) => {
        for (const b of rows.querySelectorAll("input.pick")) { b.checked = e.target.checked; b.dispatchEvent(new Event("change")); }
      } } });
    },
    reset() { picked.clear(); all = false; show(); if ($("select-page")) $("select-page").checked = false; },
  };
}
