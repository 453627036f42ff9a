// Re-run and fork on a job's page (POST /v1/jobs/{id}/rerun and /fork): the editor, prefilled
// with the job's payload and checked as JSON before sending (the API validates it against
// the kind's schema; its answer is shown in the editor too), the job's origin, and the
// jobs re-run or forked from it. Every piece of data as text.
import { api, badge, el, jobLink, toast } from "../core.js";

// The editor: one per page, opened by "Re-run" or a row's "Fork from here".
export function rerunEditor() {
  const title = el("h3", {});
  const payload = el("textarea", { name: "payload", rows: 8, "aria-label": "payload (JSON)", spellcheck: "false" });
  const problem = el("p", { class: "error", role: "alert", hidden: true });
  const send = el("button", { type: "submit" }, "Send");
  const close = el("button", { type: "button", class: "quiet", on: { click: () => { form.hidden = true; } } }, "Close");
  let target = null; // { job, mode: "rerun" | "fork", step }: a fork's step null: after the last
  const fail = (text) => { problem.textContent = text; problem.hidden = false; };
  const submit = async (ev) => {
    ev.preventDefault();
    problem.hidden = true;
    let value;
    try { value = JSON.parse(payload.value); } catch (err) { return fail(`the payload is not JSON: ${err.message}`); }
    if (value === null || typeof value !== "object" || Array.isArray(value)) return fail("the payload must be a JSON object");
    const { job, mode, step } = target;
    const body = step === null ? { payload: value } : { step, payload: value };
    try {
      const made = await api(`/v1/jobs/${job.id}/${mode}`, { method: "POST", body });
      toast(mode === "rerun" ? "re-run: a new job" : `forked: ${made.inherited.length} steps inherited`);
      form.hidden = true;
      location.hash = `#/jobs/${made.id}`;
    } catch (err) { fail(err.detail || err.message); }
  };
  const form = el("form", { id: "rerun-editor", class: "card editor", hidden: true, on: { submit } },
    title, payload, problem, el("div", { class: "actions" }, send, close));
  // open(job): a re-run; open(job, step, n): a fork from that step (n steps before it);
  // open(job, null, n, "fork"): a fork after the last of its n recorded steps.
  const open = (job, step = null, inherits = 0, mode = step === null ? "rerun" : "fork") => {
    target = { job, mode, step };
    title.textContent = mode === "rerun" ? `Re-run ${job.kind} as a new job`
      : step === null ? `Fork after the last recorded step: all ${inherits} recorded steps inherited, the step it failed in and the rest run`
        : `Fork from step "${step}": ${inherits} earlier steps inherited, "${step}" and the rest run again`;
    send.textContent = mode === "rerun" ? "Re-run" : "Fork";
    payload.value = JSON.stringify(job.payload, null, 2);
    problem.hidden = true;
    form.hidden = false;
    payload.focus();
  };
  return { form, open };
}

// Where the job came from, as facts for its head ([label, value] pairs).
export function origin(job) {
  if (job.rerun_of) return [["re-run of", jobLink(job.rerun_of, job.rerun_of)]];
  if (job.forked_from) {
    return [["forked from", jobLink(job.forked_from, job.forked_from)],
      ["fork step", job.fork_step ?? "after its last recorded step"]];
  }
  return [];
}

// The jobs re-run or forked from this one.
export function madeFrom(job) {
  if (!job.reruns || !job.reruns.length) return el("p", { id: "reruns" }, "re-runs and forks: none");
  return el("div", { id: "reruns" }, el("p", {}, `re-runs and forks: ${job.reruns.length}`),
    el("ul", {}, job.reruns.map((r) => el("li", { "data-rerun": r.id }, jobLink(r.id), " ",
      r.rerun_of ? "re-run" : r.fork_step === null ? "fork after the last step" : `fork from "${r.fork_step}"`,
      " ", badge(r.state)))));
}

// An effect's source cell: inherited from the job that recorded it, or run by this job.
export function source(f, lastRun) {
  if (f.inherited_from) return el("span", { class: "inherited" }, "inherited from ", jobLink(f.inherited_from));
  return `${f.attempt} · ${f.recorded_at < lastRun ? "replayed" : "run"}`;
}
