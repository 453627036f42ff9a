"""The chaos run's verdict as a table for the terminal. Every value is ``Text``, never rich
markup: a lost job's state or an unexpected job's reason (which may quote a ticket's
``[permanent]`` tag) is shown as written. Besides Jepsen's counts, the waits: how many
suspensions, wake-ups, callbacks answered / refused / timed out, children spawned."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from app.tools.chaos.checker import violated
from app.tools.chaos.timeline import summary


def render(report: dict[str, Any]) -> Table:
    ok = not violated(report)
    table = Table(
        "check",
        "value",
        title=Text.assemble("tasklease chaos: ", ("valid", "green") if ok else ("INVALID", "red")),
        title_justify="left",
    )

    def row(name: str, value: Any, bad: bool = False) -> None:
        table.add_row(Text(name), Text(str(value), style="red" if bad else ""))

    config = report.get("config", {})
    if "seed" in config:  # to run it again: --seed
        row("seed", f"{config['seed']} (--transport {config.get('transport', 'sqs')})")
    for name in ("submitted", "acknowledged", "succeeded", "dead_lettered", "cancelled"):
        row(name, report[name])
    for name in ("lost", "duplicated_effects", "duplicated_completions", "stuck_waits"):
        row(name, report[name], bad=bool(report[name]))
    row("unexpected", report["unexpected"], bad=bool(report["unexpected"]))
    row("  effect rows recorded twice", report["duplicated_effect_rows"])
    row("  webhook deliveries duplicated", report["duplicated_deliveries"])
    row("effect window repeats (documented)", report["effect_window_repeats"])
    mc = report["model_calls"]
    row(
        "model calls per effect (ok) mean/max",
        f"{mc['ok_per_effect_mean']} / {mc['ok_per_effect_max']}",
    )
    row(
        "model calls per effect (all) mean/max",
        f"{mc['calls_per_effect_mean']} / {mc['calls_per_effect_max']}",
    )
    row("model calls by outcome", mc["by_outcome"])
    th = report.get("throttles", {})
    row(
        "throttles (429): answered / retried without an attempt",
        f"{th.get('answered', 0)} / {th.get('retried_without_an_attempt', 0)}",
    )
    row(
        "repeated model answers: after a kill / other",
        f"{mc['ok_repeats_after_a_kill']} / {mc['ok_repeats_otherwise']}",
        bad=bool(mc["ok_repeats_otherwise"]),
    )
    w = report["waits"]
    row("waits (suspensions)", w["suspensions"])
    row(
        "wake-ups: when due / by an answer or children (at once)",
        f"{w['woken_when_due']} / {w['woken_by_answer_or_children']} ({w.get('woken_at_once', 0)})",
    )
    row(
        "timers / past the delay cap (sweeper's)",
        f"{w.get('timers', 0)} / {w.get('timers_past_the_delay_cap')}",
    )
    row(
        "callbacks answered / duplicates refused / timed out",
        f"{w['callbacks_answered']} / {w['duplicate_answers_refused']} / "
        f"{w['callbacks_timed_out']}",
    )
    if w["duplicate_answers_accepted"]:
        row("  duplicate answers accepted", w["duplicate_answers_accepted"], bad=True)
    row("children spawned", w["children_spawned"])
    agent_rows(row, report.get("agents") or {})
    talk_rows(row, report.get("messages_and_deadlines") or {})
    version_rows(row, report.get("versions") or {})
    key_rows(row, report.get("keys") or {})
    row("jobs by kind and state", report["by_kind"])
    if "running_cap" in report:
        cap = report["running_cap"]
        row(
            "most jobs leased at once (tenant's running cap)",
            f"{cap['most_live_leases']} ({cap['cap']})",
        )
    if "retention" in report:
        kept = report["retention"]
        row(
            "history pruned while faulted (seeded / left / partial)",
            f"{kept['seeded']} / {kept['left']} / {kept['partial']}",
            bad=bool(kept["problems"]),
        )
        for problem in kept["problems"]:
            row("  retention", problem, bad=True)
    row("dead letters after first drain", report["dead_letters_after_first_drain"])
    row(
        "redriven, then",
        f"{report['redriven']}  → final dead letters {report['dead_lettered_by_cause']}",
    )
    f = report["faults"]
    carrier = "redis" if f.get("redis_restarts") else "sqs"
    restarts = f.get("redis_restarts") or f["sqs_restarts"]
    inside = len(f.get("agent_crashes") or [])
    others = len(f.get("other_crash_points") or [])
    at_points = f" ({inside} at a crash point inside an agent's step)" if inside else ""
    if others:
        at_points += f" ({others} at a crash point of messages, state or deadlines)"
    row(
        "faults",
        f"kills {f['kills']}{at_points}, {carrier} restarts {restarts}, "
        f"pg restarts {f['pg_restarts']}",
    )
    for r in f.get("carrier_restarts", []):
        if "lost" not in r:
            row(f"  {r['carrier']} restart at {r['at']} s", f"back in {r['took']} s")
            continue
        made_good = (
            f"{len(r['unrecovered'])} NOT made good"
            if "unrecovered" in r
            else f"made good {r['recovered_in']} s after"
            if r["lost"]
            else "nothing to make good"
        )
        row(
            f"  {r['carrier']} restart at {r['at']} s",
            f"back in {r['took']} s; of {r['needed']} messages needed, lost {r['lost']}, "
            f"{made_good}",
            bad="unrecovered" in r,
        )
    if f["unbidden_exits"]:
        row("processes that exited unbidden", ", ".join(f["unbidden_exits"]), bad=True)
    t = report["timings"]
    row("time to drain after the last fault", f"{t.get('time_to_drain_after_last_fault', '?')} s")
    row("total", f"{t.get('total', '?')} s")
    for name, value in summary(report.get("time", {})):
        row(name, value)
    for u in report["unexpected_jobs"][:10]:
        row("  unexpected", f"{u['ref']} {u['job_id']}: {u['why']}", bad=True)
    for lost in report["lost_jobs"][:10]:
        row("  lost", f"{lost['job_id']} ({lost['state']})", bad=True)
    for s in report["stuck_wait_jobs"][:10]:
        row("  stuck wait", f"{s['job_id']}: {s['why']}", bad=True)
    return table


def agent_rows(row: Any, a: dict[str, Any]) -> None:
    """The agent jobs (per_agent.py): results against an uninterrupted run, tool calls
    applied (the webhook's count), model requests (the fake model's log)."""
    if not a.get("jobs"):
        return
    row(
        "agent jobs: succeeded / equal to an uninterrupted run",
        f"{a['jobs']}: {a.get('succeeded', 0)} / {a.get('equal_to_an_uninterrupted_run', 0)}",
        bad=a.get("succeeded", 0) != a.get("equal_to_an_uninterrupted_run", 0),
    )
    row(
        "agent tool calls: recorded / applied / again in the window / again outside",
        f"{a.get('tool_calls_recorded', 0)} / {a.get('tool_calls_made', 0)} / "
        f"{a.get('tool_calls_repeats_in_window', 0)} / {a.get('tool_calls_made_again', 0)}",
        bad=bool(a.get("tool_calls_made_again")),
    )
    row(
        "agent model requests: recorded / answered / again in the window / again outside",
        f"{a.get('model_steps_recorded', 0)} / {a.get('model_requests_made', 0)} / "
        f"{a.get('model_requests_repeats_in_window', 0)} / {a.get('model_requests_made_again', 0)}",
        bad=bool(a.get("model_requests_made_again")),
    )
    row(
        "agent steps recorded twice / requests throttled (429)",
        f"{a.get('steps_recorded_twice', 0)} / {a.get('requests_throttled', 0)}",
        bad=bool(a.get("steps_recorded_twice")),
    )


def talk_rows(row: Any, t: dict[str, Any]) -> None:
    """Messages to demo.chat jobs, deadlines passed under the faults, published state
    (per_message.py)."""
    if not t:
        return
    row(
        "messages: sent / stored / read / repeated keys / refused after success",
        f"{t['messages_sent']} / {t['messages_stored']} / {t['messages_read']} / "
        f"{t['repeated_keys']} / {t['refused_after_success']} ({t['chat_jobs']} chat jobs)",
    )
    row(
        "deadlines: given / ended by one / past theirs after the drain",
        f"{t['deadlines_given']} / {t['ended_by_deadline']} / {t['past_deadline_after_drain']}",
        bad=bool(t["past_deadline_after_drain"]),
    )
    row("jobs publishing state", t["publish_jobs"])


def version_rows(row: Any, v: dict[str, Any]) -> None:
    """demo.revised, whose version 2 is deployed half-way through the faults
    (per_version.py): how many started and finished on each version."""
    if not v.get("jobs"):
        return
    row(
        "deployed kind: jobs / succeeded / 1→1 / 1→2 / 2→2 / reviewed / notified",
        f"{v['jobs']} / {v['succeeded']} / {v['v1_to_v1']} / {v['v1_to_v2']} / "
        f"{v['v2_to_v2']} / {v['reviewed']} / {v['notified']}",
        bad=v["succeeded"] != v["jobs"],
    )
    row("  version 2 deployed at", f"{v.get('deployed_at', '?')} s")


def key_rows(row: Any, k: dict[str, Any]) -> None:
    """The keyed jobs (per_key.py): the most holding a key at once, the waits behind a
    held key and on a free one, the debounce's bursts."""
    if not k.get("jobs"):
        return
    row(
        "keyed jobs: keys / most holding one at once / waited behind a held key",
        f"{k['jobs']}: {k['keys']} / {k['most_holding']} / {k['behind_key']}",
        bad=not k["behind_key"],
    )
    row(
        "  waits on a free key: checked / excused by a fault / longest (bound)",
        f"{k['hand_offs_checked']} / {k['hand_offs_excused']} / "
        f"{k['longest_free_wait']:.2f} s ({k['bound']:g} s)",
        bad=k["longest_free_wait"] > k["bound"],
    )
    d = k.get("debounce") or {}
    row(
        "  debounced: jobs / replaced / bursts (of one) / bursts whose last ran",
        f"{d.get('jobs', 0)} / {d.get('replaced', 0)} / {d.get('bursts', 0)} "
        f"({d.get('bursts_of_one', 0)}) / {d.get('ran', 0)}",
        bad=not d.get("replaced") or d.get("ran") != d.get("bursts"),
    )
    for problem in k.get("problems", []):
        row("  keys", problem, bad=True)
