"""The checker on issue 32's work: messages to a job (demo.chat), a job's published state
(demo.publish) and a run's deadline. Pure: the witnesses in, what was broken out.

Invariant 6, every message read at most once and in order (``message_violations``), is
the one copy: tests/invariants.py reads job_messages and calls it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from app.states import JobState

CHAT = "demo.chat"
PUBLISH = "demo.publish"
# A job ended by its deadline: dead-lettered by 'deadline' with this reason
# (app/store/deadlines.py REASON; the checker imports nothing of the store).
DEADLINE_REASON = "deadline passed"


def message_violations(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Invariant 6 on one job's messages (id, topic, consumed_by; oldest first): on each
    topic the messages read are the oldest, each by its own receive of that topic,
    numbered in the messages' order."""
    found: list[str] = []
    by_topic: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r["id"]):
        by_topic[r["topic"]].append(r)
    for topic, sent in by_topic.items():
        read = [r for r in sent if r["consumed_by"] is not None]
        if sent[: len(read)] != read:
            found.append(f"6: on {topic!r}, a message was read before an older one")
        numbers = [_receive_number(r["consumed_by"]) for r in read]
        if any(
            r["consumed_by"] != f"receive:{topic}:{n}" for r, n in zip(read, numbers, strict=True)
        ):
            found.append(f"6: on {topic!r}, a message read by another topic's receive")
        if numbers != sorted(set(numbers)):
            found.append(f"6: on {topic!r}, the receives {numbers} are not in the messages' order")
    return found


def _receive_number(consumed_by: str) -> int:
    tail = consumed_by.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def chat_findings(
    job: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], sent: Mapping[str, Any] | None
) -> list[str]:
    """A demo.chat job: invariant 6 on its messages; one row per message the harness was
    answered 201 for (a repeated Idempotency-Key named the first message, stored nothing);
    a message to it once succeeded refused; succeeded, its answers are its messages on
    its topic, in order, each once."""
    found = message_violations(rows)
    stored = [r["id"] for r in sorted(rows, key=lambda r: r["id"])]
    if sent is not None:
        if stored != list(sent.get("ids", [])):
            found.append(f"6: stored messages {stored}, the sender was answered {sent['ids']}")
        for first, again in sent.get("repeats", []):
            if first != again:
                found.append(f"6: one Idempotency-Key answered messages {first} and {again}")
        if sent.get("late") == "stored":
            found.append("6: a message to the succeeded job was stored, not refused (409)")
    if job["state"] != JobState.SUCCEEDED:
        return found
    payload = job["payload"] or {}
    topic, n = payload.get("topic", "user"), int(payload.get("messages", 3))
    mine = [r for r in sorted(rows, key=lambda r: r["id"]) if r["topic"] == topic][:n]
    want = [(r["id"], f"you said: {r['body']}") for r in mine]
    answers = (job["result"] or {}).get("answers") or []
    got = [(a.get("message"), a.get("reply")) for a in answers]
    if got != want:
        found.append(f"6: succeeded answering {got}, not its messages {want}")
    return found


def deadline_findings(job: Mapping[str, Any], view: Mapping[str, Any] | None) -> list[str]:
    """A job given a deadline it cannot meet: it must end dead-lettered by 'deadline',
    "deadline passed" (``view``: GET /v1/jobs/{id}, for dead_lettered_by)."""
    by = (view or {}).get("dead_lettered_by")
    if (
        job["state"] == JobState.DEAD_LETTERED
        and job["last_error"] == DEADLINE_REASON
        and by == "deadline"
    ):
        return []
    return [
        f"7: given a deadline it cannot meet, it ended {job['state']} "
        f"(dead_lettered_by {by!r}, {job['last_error']!r})"
    ]


def publish_findings(job: Mapping[str, Any], view: Mapping[str, Any] | None) -> list[str]:
    """A succeeded demo.publish job: its published state is what it published last."""
    if job["state"] != JobState.SUCCEEDED:
        return []
    steps = int((job["payload"] or {}).get("steps", 1))
    want = {"phase": "finished", "done": steps}
    published = {s["key"]: s["value"] for s in (view or {}).get("published", [])}
    versions = {s["key"]: s["version"] for s in (view or {}).get("published", [])}
    found = [] if published == want else [f"succeeded having published {published}, not {want}"]
    if any(v < 1 for v in versions.values()):
        found.append(f"state versions {versions}: counted from 1")
    return found


def issue32_check(
    jobs: Sequence[Mapping[str, Any]],
    acked: Mapping[str, str],
    messages: Mapping[str, Sequence[Mapping[str, Any]]],
    sent: Mapping[str, Mapping[str, Any]],
    views: Mapping[str, Mapping[str, Any]],
    deadline_refs: Sequence[str],
    past_deadline: Sequence[Any],
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """(counts for the report, (job id, what) for each finding) over the chat, publish
    and deadline jobs; a job ended by a deadline it was not given is a finding too."""
    expected = {acked[r] for r in deadline_refs if r in acked}
    sent_by_id = {str(s["job_id"]): s for s in sent.values()}
    findings: list[tuple[str, str]] = []
    ended = 0
    for job in jobs:
        job_id = job["id"]
        by_deadline = job["last_error"] == DEADLINE_REASON
        ended += by_deadline and job["state"] == JobState.DEAD_LETTERED
        found: list[str] = []
        if job_id in expected:
            found += deadline_findings(job, views.get(job_id))
        elif by_deadline:
            found.append("7: ended by a deadline it was not given")
        if job.get("kind") == CHAT:
            found += chat_findings(job, messages.get(job_id, []), sent_by_id.get(job_id))
        elif job.get("kind") == PUBLISH:
            found += publish_findings(job, views.get(job_id))
        findings += [(job_id, why) for why in found]
    findings += [
        (str(p[0]), f"7: {p[1]} past its deadline {p[2]} after the drain") for p in past_deadline
    ]
    counts = {
        "chat_jobs": sum(1 for j in jobs if j.get("kind") == CHAT),
        "messages_stored": sum(len(m) for m in messages.values()),
        "messages_read": sum(1 for m in messages.values() for r in m if r["consumed_by"]),
        "messages_sent": sum(len(s.get("ids", [])) for s in sent.values()),
        "repeated_keys": sum(len(s.get("repeats", [])) for s in sent.values()),
        "refused_after_success": sum(1 for s in sent.values() if s.get("late") == "refused"),
        "deadlines_given": len(expected),
        "ended_by_deadline": ended,
        "past_deadline_after_drain": len(past_deadline),
        "publish_jobs": sum(1 for j in jobs if j.get("kind") == PUBLISH),
    }
    return counts, findings
