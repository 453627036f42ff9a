"""The checker on keyed work (issue 35: demo.converse, one run per conversation;
demo.reindex, debounced per document; docs/explain/chaos.md#keyed-work). Pure: the jobs,
their events and the run's outages in, counts and findings out. Spans: key_spans.py.

- **at most N holding**: at no moment more jobs of a key hold it than its kind's
  concurrency (from the events' spans);
- **every debounced burst ran exactly its last job**: a burst is what the data says: a
  job replaced names its replacer (its 'cancelled' event: "debounced: replaced by job
  <id>"), which is a later job of its key; following those names ends at a job nobody
  replaced, the burst's last, which ran, no sooner than its window after its submission
  (its acceptance event's 'runs at'). A replaced job ran never (no claim, attempt 0).
  A job whose window passed before the next submission is a burst of its own;
- **no wait on a free key**: while a job waited for its key, a stretch in which the key
  had room for it (fewer than N holding, counting the jobs queued ahead of it: those
  claimed before it) and its tenant was under its running cap lasted no longer than
  ``bound`` seconds. Stretches that meet an outage (a worker killed, a server restarted,
  a deploy, each with its recovery) are excused and counted apart.

And the run must show the thing tested: a job that waited behind its held key, and a
debounced job replaced; without them the run fails (``problems``)."""

from __future__ import annotations

import datetime as dt
import itertools
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from app.demos import flow as demo_flow
from app.kinds.kind import Kind
from app.tools.chaos.key_spans import Life, StepCount, holding_at, lease_count, lives, most_holding

# The keyed kinds the gate submits (their key is computed from the payload, as the kind
# does: the harness gives no per-job key).
KINDS: dict[str, Kind[Any, Any, Any]] = {k.name: k for k in (demo_flow.converse, demo_flow.reindex)}
REPLACED = re.compile(r"debounced: replaced by job ([0-9a-fA-F-]{36})")

Outage = tuple[dt.datetime, dt.datetime]  # [from, to]: an excused window


def replaced_by(events: Sequence[Mapping[str, Any]]) -> str | None:
    """The job that replaced this debounced one, as its 'cancelled' event names it."""
    for e in events:
        if e["to_state"] == "cancelled" and (m := REPLACED.search(e.get("detail") or "")):
            return m.group(1)
    return None


def key_of(job: Mapping[str, Any]) -> str | None:
    kind = KINDS.get(str(job.get("kind")))
    if kind is None or kind.flow.key is None:
        return None
    return str(kind.flow.key(kind.parse(job["payload"])))


def key_check(
    jobs: Sequence[Mapping[str, Any]],
    events_of: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    all_events: Sequence[Mapping[str, Any]] = (),
    cap: int | None = None,
    bound: float = 5.0,
    outages: Sequence[Outage] = (),
    require: bool = True,
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """(counts for the report, (job id, what) for each finding) over the keyed jobs;
    ``all_events``: every job's (the tenant's leases against ``cap``); ``require``: the
    run submitted keyed work, so it must have met a held key and a debounce."""
    keyed: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for j in jobs:
        k = key_of(j)
        if k is not None:
            keyed[(j["kind"], k)].append(j)
    life_of = lives([j for js in keyed.values() for j in js], events_of)
    leases = lease_count(all_events) if cap is not None else None
    findings: list[tuple[str, str]] = []
    counts: dict[str, Any] = {
        "keys": len(keyed),
        "jobs": sum(len(js) for js in keyed.values()),
        "most_holding": 0,
        "behind_key": 0,
        "hand_offs_checked": 0,
        "hand_offs_excused": 0,
        "longest_free_wait": 0.0,
        "bound": bound,
    }
    debounce = {"jobs": 0, "replaced": 0, "bursts": 0, "bursts_of_one": 0, "ran": 0}
    for (kind_name, key), js in sorted(keyed.items()):
        flow = KINDS[kind_name].flow
        key_lives = [life_of[j["id"]] for j in js if j["id"] in life_of]
        if flow.concurrency is not None:
            n = flow.concurrency
            most, at = most_holding(s for one in key_lives for s in one.holds)
            counts["most_holding"] = max(counts["most_holding"], most)
            if most > n:
                over = [one.job_id for one in key_lives if at and holding_at(one.holds, at)]
                for job_id in over:
                    findings.append(
                        (job_id, f"{most} jobs of key {key!r} held it at {at} (at most {n})")
                    )
            for one in key_lives:
                _waits(one, key_lives, n, leases, cap, bound, outages, counts, findings)
        if flow.debounce_seconds is not None:
            _bursts(js, events_of, life_of, debounce, findings)
    counts["longest_free_wait"] = round(counts["longest_free_wait"], 3)
    problems = []
    if require and not counts["behind_key"]:
        problems.append("no keyed job waited behind its held key: the key's limit went untested")
    if require and not debounce["replaced"]:
        problems.append("no debounced job was replaced by a newer one: the debounce went untested")
    return {**counts, "debounce": debounce, "problems": problems}, findings


def _waits(
    one: Life,
    key_lives: Sequence[Life],
    n: int,
    leases: StepCount | None,
    cap: int | None,
    bound: float,
    outages: Sequence[Outage],
    counts: dict[str, Any],
    findings: list[tuple[str, str]],
) -> None:
    """Job ``one``'s wait for its key, split at every change of what is ahead of it and
    of its tenant's leases; the stretches in which it had room, merged."""
    start, end = one.due, one.waited_until
    if end is None or end <= start:
        return
    others = [o for o in key_lives if o is not one]
    # Ahead of it: the holders, and the jobs queued that were claimed before it (the
    # claim takes a key's jobs in the order they were submitted).
    ahead_queued = [
        (o.due, o.waited_until)
        for o in others
        if o.first_claim is not None
        and (one.first_claim is None or o.first_claim < one.first_claim)
    ]
    holds = [s for o in others for s in o.holds]
    cuts = {start, end}
    for s, e in [*holds, *ahead_queued]:
        cuts.update(t for t in (s, e) if t is not None and start < t < end)
    if leases is not None:
        cuts.update(leases.changes_within(start, end))
    moments = sorted(cuts)
    behind = False
    stretches: list[tuple[dt.datetime, dt.datetime]] = []
    for a, b in itertools.pairwise(moments):
        queued = sum(1 for s, e in ahead_queued if s <= a and (e is None or a < e))
        full = holding_at(holds, a) + queued >= n
        behind = behind or holding_at(holds, a) >= n
        free = not full and (leases is None or cap is None or leases.at(a) < cap)
        if free and stretches and stretches[-1][1] == a:
            stretches[-1] = (stretches[-1][0], b)
        elif free:
            stretches.append((a, b))
    if not behind:
        return
    counts["behind_key"] += 1
    for a, b in stretches:
        if any(a <= o_end and o_start <= b for o_start, o_end in outages):
            counts["hand_offs_excused"] += 1
            continue
        counts["hand_offs_checked"] += 1
        seconds = (b - a).total_seconds()
        counts["longest_free_wait"] = max(counts["longest_free_wait"], seconds)
        if seconds > bound:
            findings.append(
                (
                    one.job_id,
                    f"waited {seconds:.1f} s from {a} on a key with a free slot and its "
                    f"tenant under its cap (bound {bound:g} s)",
                )
            )


def _bursts(
    js: Sequence[Mapping[str, Any]],
    events_of: Mapping[str, Sequence[Mapping[str, Any]]],
    life_of: Mapping[str, Life],
    tally: dict[str, int],
    findings: list[tuple[str, str]],
) -> None:
    """A debounced key's jobs, in bursts by their replacers' names."""
    ids = {j["id"] for j in js}
    replacer: dict[str, str] = {}
    for j in js:
        tally["jobs"] += 1
        by = replaced_by(events_of.get(j["id"], ()))
        one = life_of.get(j["id"])
        if by is not None:
            tally["replaced"] += 1
            replacer[j["id"]] = by
            if by not in ids:
                findings.append((j["id"], f"replaced by {by}, not a job of its key"))
            if j["state"] != "cancelled" or (one is not None and one.runs) or j["attempt"]:
                runs = one.runs if one else "?"
                findings.append(
                    (
                        j["id"],
                        f"debounced, yet ended {j['state']} after {runs} runs, attempt "
                        f"{j['attempt']}: a replaced job never runs",
                    )
                )
            elif (
                one is not None
                and (other := life_of.get(by)) is not None
                and other.accepted < one.accepted
            ):
                findings.append((j["id"], f"replaced by {by}, submitted before it"))
        elif j["state"] == "cancelled":
            findings.append((j["id"], "cancelled, but not by a newer job of its key"))
        elif one is None or not one.runs:
            findings.append((j["id"], f"the last of its burst, yet it never ran ({j['state']})"))
        elif one.first_claim is not None and one.first_claim < one.due:
            findings.append(
                (j["id"], f"ran at {one.first_claim}, before its window ended at {one.due}")
            )
    burst_size: dict[str, int] = defaultdict(int)
    for j in js:
        last, seen = j["id"], set()
        while last in replacer and last not in seen:
            seen.add(last)
            last = replacer[last]
        if last in seen:
            findings.append((j["id"], "its replacers' names go round in a circle"))
            continue
        burst_size[last] += 1
    tally["bursts"] += len(burst_size)
    tally["bursts_of_one"] += sum(1 for n in burst_size.values() if n == 1)
    tally["ran"] += sum(1 for last in burst_size if (one := life_of.get(last)) and one.runs)
