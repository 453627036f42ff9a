"""The chaos checker on issue 32's work (app/tools/chaos/per_message.py): the gate must
fail on a message read twice or out of order, a repeated Idempotency-Key that stored a
second message, a message to a succeeded job accepted, a chat job that answered other
than its messages, a job given a deadline that did not end by it (or one ended by a
deadline it was not given), a job past its deadline unfinished after the drain, and a
publisher whose state is not what it published last. Pure: facts in, report out."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.tools.chaos.checker import check, violated
from app.tools.chaos.report import render
from tests.unit.test_chaos_checker import done, job
from tests.unit.test_cli_render import chaos_report, text

pytestmark = pytest.mark.unit


def messages(n: int = 3) -> list[dict[str, Any]]:
    return [
        {"id": 10 + i, "topic": "user", "body": {"n": i}, "consumed_by": f"receive:user:{i + 1}"}
        for i in range(n)
    ]


def facts() -> dict[str, Any]:
    """A chat job that answered its 3 messages (one sent twice with a key, one refused
    after it succeeded), a nap ended by its deadline, a publisher: all as they should be."""
    answers = [{"message": m["id"], "reply": f"you said: {m['body']}"} for m in messages()]
    jobs = [
        job("chat", "demo.chat", payload={"messages": 3}, result={"answers": answers}),
        job(
            "late",
            "demo.nap",
            "dead_lettered",
            payload={"seconds": 600, "naps": 1},
            last_error="deadline passed",
        ),
        job("pub", "demo.publish", payload={"steps": 3}, result={"steps": 3}),
    ]
    published = [
        {"key": "phase", "value": "finished", "version": 2},
        {"key": "done", "value": 3, "version": 3},
    ]
    return {
        "submitted": 3,
        "acked": {"M-0": "chat", "D-0": "late", "P-0": "pub"},
        "tags": {},
        "redriven": [],
        "jobs": jobs,
        "events": done("chat") + done("pub"),
        "effects": [],
        "duplicated_effect_rows": 0,
        "model_calls": [],
        "deliveries": [],
        "kills": [],
        "messages": {"chat": messages()},
        "sent": {
            "M-0": {"job_id": "chat", "ids": [10, 11, 12], "repeats": [[11, 11]], "late": "refused"}
        },
        "views": {
            "late": {"dead_lettered_by": "deadline", "published": []},
            "pub": {"dead_lettered_by": None, "published": published},
        },
        "deadline_refs": ["D-0"],
        "past_deadline": [],
    }


def whys(f: dict[str, Any]) -> list[str]:
    report = check(**f)
    return [u["why"] for u in report["unexpected_jobs"]]


def test_a_run_whose_messages_deadlines_and_state_are_as_they_should_be_is_valid() -> None:
    report = check(**facts())
    assert report["unexpected_jobs"] == []
    assert not violated(report)
    counts = report["messages_and_deadlines"]
    assert counts["messages_sent"] == counts["messages_read"] == 3
    assert (counts["repeated_keys"], counts["refused_after_success"]) == (1, 1)
    assert (counts["deadlines_given"], counts["ended_by_deadline"]) == (1, 1)
    assert report["dead_lettered_by_cause"] == {"deadline": 1}
    shown = text(render({**chaos_report(""), "messages_and_deadlines": counts}))
    assert "3 / 3 / 3 / 1 / 1 (1 chat jobs)" in shown


def broken(change: str) -> dict[str, Any]:
    f = copy.deepcopy(facts())
    rows, sent = f["messages"]["chat"], f["sent"]["M-0"]
    chat, late, _ = f["jobs"]
    if change == "read twice":  # two receives took the same message: one row read by both
        rows[2]["consumed_by"] = "receive:user:2"
    elif change == "out of order":
        rows[0]["consumed_by"], rows[1]["consumed_by"] = None, "receive:user:1"
    elif change == "another topic's receive":
        rows[1]["consumed_by"] = "receive:admin:2"
    elif change == "repeated key stored again":
        rows.append({"id": 13, "topic": "user", "body": {"n": 1}, "consumed_by": None})
    elif change == "repeated key answered another id":
        sent["repeats"] = [[11, 13]]
    elif change == "late message stored":
        sent["late"] = "stored"
    elif change == "answered out of order":
        chat["result"]["answers"].reverse()
    elif change == "deadline not met":
        late.update(state="succeeded", last_error=None, result={"naps": 1})
    elif change == "deadline by another":
        f["views"]["late"]["dead_lettered_by"] = "sweeper"
    elif change == "ended by a deadline not given":
        f["deadline_refs"] = []
    elif change == "past its deadline":
        f["past_deadline"] = [["late", "waiting", "2026-01-01T00:00:00+00:00"]]
    elif change == "state not the last published":
        f["views"]["pub"]["published"][1]["value"] = 2
    return f


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("read twice", "not in the messages' order"),
        ("out of order", "read before an older one"),
        ("another topic's receive", "another topic's receive"),
        ("repeated key stored again", "the sender was answered"),
        ("repeated key answered another id", "answered messages 11 and 13"),
        ("late message stored", "stored, not refused"),
        ("answered out of order", "not its messages"),
        ("deadline not met", "given a deadline it cannot meet"),
        ("deadline by another", "dead_lettered_by 'sweeper'"),
        ("ended by a deadline not given", "a deadline it was not given"),
        ("past its deadline", "past its deadline"),
        ("state not the last published", "not {'phase': 'finished', 'done': 3}"),
    ],
)
def test_each_broken_message_deadline_or_state_fails_the_gate(change: str, said: str) -> None:
    f = broken(change)
    found = whys(f)
    assert any(said in w for w in found), (change, found)
    assert violated(check(**f))
