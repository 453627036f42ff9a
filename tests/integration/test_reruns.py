"""Re-run and fork over HTTP (app/services/reruns.py) against the test's real PostgreSQL and
SQS server: the new job is linked both ways, validated and admitted like a submission,
sent, and recorded; a fork holds copies of the steps before its step, never references."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from app import store
from app.api import create_app
from app.services import submit as submit_service
from tests.conftest import bearer, job_row
from tests.helpers import count
from tests.integration.test_auth import (  # noqa: F401 (the fixture)
    Tenants,
    TestClient,
    dead_lettered_job,
    snapshot,
    submit,
    tenants,
)

pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]

TICKET = {
    "ticket_id": "T-9",
    "subject": "Refund",
    "body": "I was charged twice.",
    "customer_email": "kim@example.com",
}


def triage_dead_letter(t: Tenants, sql: Any, key: str) -> str:
    job_id = submit(t, key, {"kind": "support.triage", "payload": TICKET})
    sql.execute(
        "UPDATE jobs SET state = 'dead_lettered', dead_lettered_by = 'engine', "
        "finished_at = now(), last_error = 'given' WHERE id = %s",
        (job_id,),
    )
    return job_id


def record(sql: Any, job_id: str, *steps: str, model: str | None = None) -> None:
    """Effects as a run records them: seq in order, the first a model call when ``model``."""
    for seq, key in enumerate(steps):
        sql.execute(
            "INSERT INTO effects (job_id, key, seq, result, attempt, worker, model, "
            "input_tokens, output_tokens) VALUES (%s, %s, %s, %s, 1, 'w-1', %s, %s, %s)",
            (
                job_id,
                key,
                seq,
                f'{{"step": "{key}"}}',
                model if seq == 0 else None,
                100 if model and seq == 0 else None,
                20 if model and seq == 0 else None,
            ),
        )


def first_event(sql: Any, job_id: str) -> str:
    row = sql.execute(
        "SELECT detail FROM job_events WHERE job_id = %s ORDER BY id LIMIT 1", (job_id,)
    ).fetchone()
    return str(row["detail"])


def test_a_rerun_is_a_new_linked_job_sent_and_recorded(
    tenants: Tenants,  # noqa: F811 (the fixture imported above)
    sql: Any,
) -> None:
    t = tenants
    original = triage_dead_letter(t, sql, t.acme)
    outbox_before = count(sql, "outbox")

    resp = t.client.post(f"/v1/jobs/{original}/rerun", headers=bearer(t.acme))

    assert resp.status_code == 202, resp.text
    new = resp.json()
    assert resp.headers["Location"] == f"/v1/jobs/{new['id']}"
    assert new["rerun_of"] == original and new["forked_from"] is None
    assert (new["kind"], new["payload"], new["state"]) == ("support.triage", TICKET, "queued")
    assert job_row(sql, new["id"])["tenant"] == "acme"
    assert count(sql, "outbox") == outbox_before + 1  # the submit path: its outbox row
    detail = first_event(sql, new["id"])
    assert f"re-run of {original}" in detail and "key " in detail, detail
    # Both directions: the original lists its re-run, the new job names its original.
    shown = t.client.get(f"/v1/jobs/{original}", headers=bearer(t.acme)).json()
    assert [r["id"] for r in shown["reruns"]] == [new["id"]]
    assert shown["reruns"][0]["rerun_of"] == original
    again = t.client.get(f"/v1/jobs/{new['id']}", headers=bearer(t.acme)).json()
    assert again["rerun_of"] == original and again["reruns"] == []


def test_a_rerun_with_an_edited_payload_is_validated_like_a_submission(
    tenants: Tenants,  # noqa: F811 (the fixture imported above)
    sql: Any,
) -> None:
    t = tenants
    original = triage_dead_letter(t, sql, t.acme)
    edited = {**TICKET, "subject": "Refund, second try"}

    ok = t.client.post(
        f"/v1/jobs/{original}/rerun", json={"payload": edited}, headers=bearer(t.acme)
    )
    assert ok.status_code == 202, ok.text
    assert ok.json()["payload"] == edited
    assert "edited payload" in first_event(sql, ok.json()["id"])

    before = snapshot(sql)
    bad = t.client.post(
        f"/v1/jobs/{original}/rerun",
        json={"payload": {"ticket_id": "T-9"}},
        headers=bearer(t.acme),
    )
    assert bad.status_code == 422, bad.text
    assert "subject" in bad.text  # names what is missing
    extra = t.client.post(
        f"/v1/jobs/{original}/rerun", json={"payload": TICKET, "x": 1}, headers=bearer(t.acme)
    )
    assert extra.status_code == 422 and "x" in extra.text
    assert snapshot(sql) == before


def test_only_a_finished_job_of_ones_own_tenant_is_rerun_and_an_admin_reruns_any(
    tenants: Tenants,  # noqa: F811 (the fixture imported above)
    sql: Any,
) -> None:
    t = tenants
    queued = submit(t, t.acme)
    theirs = dead_lettered_job(t, sql, t.acme)
    before = snapshot(sql)

    busy = t.client.post(f"/v1/jobs/{queued}/rerun", headers=bearer(t.acme))
    assert busy.status_code == 409 and "only a finished job" in busy.json()["detail"]
    other = t.client.post(f"/v1/jobs/{theirs}/rerun", headers=bearer(t.globex))
    assert other.status_code == 404 and other.json() == {"detail": f"no job {theirs}"}
    fork = t.client.post(f"/v1/jobs/{theirs}/fork", json={"step": "a"}, headers=bearer(t.globex))
    assert fork.status_code == 404 and fork.json() == {"detail": f"no job {theirs}"}
    assert snapshot(sql) == before
    # The original's listing hides another tenant's nothing: globex sees no job at all.
    assert t.client.get("/v1/jobs", headers=bearer(t.globex)).json()["items"] == []

    by_admin = t.client.post(f"/v1/jobs/{theirs}/rerun", headers=bearer(t.admin))
    assert by_admin.status_code == 202, by_admin.text
    assert by_admin.json()["tenant"] == "acme"  # the original's tenant, not the admin's


def test_a_rerun_is_admitted_against_the_tenants_limits(
    tenants: Tenants,  # noqa: F811 (the fixture imported above)
    sql: Any,
) -> None:
    t = tenants
    original = dead_lettered_job(t, sql, t.acme)
    submit(t, t.acme)  # one unfinished job: the cap below
    settings = t.stack.with_settings(max_jobs_in_flight=1, auth_failure_limit="1000/minute")
    with TestClient(create_app(settings)) as client:
        before = snapshot(sql)
        resp = client.post(f"/v1/jobs/{original}/rerun", headers=bearer(t.acme))
        assert resp.status_code == 429, resp.text
        assert "unfinished jobs" in resp.json()["detail"]
        assert snapshot(sql) == before


def test_a_fork_copies_the_steps_before_its_step_and_runs_from_there(
    tenants: Tenants,  # noqa: F811 (the fixture imported above)
    sql: Any,
) -> None:
    t = tenants
    original = dead_lettered_job(t, sql, t.acme)
    record(sql, original, "plan", "search", "write", model="gpt-test")

    resp = t.client.post(
        f"/v1/jobs/{original}/fork", json={"step": "write"}, headers=bearer(t.acme)
    )

    assert resp.status_code == 202, resp.text
    new = resp.json()
    assert new["forked_from"] == original and new["fork_step"] == "write"
    assert new["inherited"] == ["plan", "search"]
    assert new["state"] == "queued"
    effects = t.client.get(f"/v1/jobs/{new['id']}/effects", headers=bearer(t.acme)).json()
    assert [(e["key"], e["inherited_from"], e["result"]) for e in effects] == [
        ("plan", original, {"step": "plan"}),
        ("search", original, {"step": "search"}),
    ]
    assert "forked from" in first_event(sql, new["id"])
    # The inherited model call was the original's to pay: not the fork's usage.
    shown = t.client.get(f"/v1/jobs/{new['id']}", headers=bearer(t.acme)).json()
    assert shown["usage"] is None or shown["usage"]["input_tokens"] == 0, shown["usage"]
    listed = t.client.get(f"/v1/jobs/{original}", headers=bearer(t.acme)).json()["reruns"]
    assert [(r["id"], r["fork_step"]) for r in listed] == [(new["id"], "write")]

    # Copies, not references: the original pruned, the fork keeps its steps.
    sql.execute("DELETE FROM jobs WHERE id = %s", (original,))
    kept = sql.execute(
        "SELECT key FROM effects WHERE job_id = %s ORDER BY seq", (new["id"],)
    ).fetchall()
    assert [r["key"] for r in kept] == ["plan", "search"]


def test_a_fork_without_a_step_inherits_every_step_and_runs_from_the_one_that_failed(
    tenants: Tenants,  # noqa: F811 (the fixture imported above)
    sql: Any,
) -> None:
    # A dead letter's failing step recorded nothing: a fork with no step inherits every
    # recorded one, so the new job runs from the step it failed in.
    t = tenants
    original = dead_lettered_job(t, sql, t.acme)
    record(sql, original, "plan", "search", model="gpt-test")

    resp = t.client.post(f"/v1/jobs/{original}/fork", json={}, headers=bearer(t.acme))

    assert resp.status_code == 202, resp.text
    new = resp.json()
    assert (new["forked_from"], new["fork_step"], new["inherited"]) == (
        original,
        None,
        ["plan", "search"],
    )
    effects = t.client.get(f"/v1/jobs/{new['id']}/effects", headers=bearer(t.acme)).json()
    assert [(e["key"], e["inherited_from"]) for e in effects] == [
        ("plan", original),
        ("search", original),
    ]
    assert "after its last recorded step (2 steps inherited)" in first_event(sql, new["id"])
    listed = t.client.get(f"/v1/jobs/{original}", headers=bearer(t.acme)).json()["reruns"]
    assert [(r["id"], r["fork_step"]) for r in listed] == [(new["id"], None)]


def test_a_fork_of_a_fork_names_the_job_that_recorded_each_step(
    tenants: Tenants,  # noqa: F811 (the fixture imported above)
    sql: Any,
) -> None:
    t = tenants
    first = dead_lettered_job(t, sql, t.acme)
    record(sql, first, "plan", "search", "write")
    second = t.client.post(
        f"/v1/jobs/{first}/fork", json={"step": "search"}, headers=bearer(t.acme)
    ).json()["id"]
    sql.execute("UPDATE jobs SET state = 'succeeded', finished_at = now() WHERE id = %s", (second,))
    sql.execute(
        "INSERT INTO effects (job_id, key, seq, result, attempt) VALUES (%s, 'search', 1, '1', 1)",
        (second,),
    )
    resp = t.client.post(
        f"/v1/jobs/{second}/fork", json={"step": "search"}, headers=bearer(t.admin)
    )
    assert resp.status_code == 202, resp.text
    effects = t.client.get(f"/v1/jobs/{resp.json()['id']}/effects", headers=bearer(t.acme)).json()
    assert [(e["key"], e["inherited_from"]) for e in effects] == [("plan", first)]


def test_a_fork_names_an_unknown_step_and_refuses_to_inherit_a_spawn(
    tenants: Tenants,  # noqa: F811 (the fixture imported above)
    sql: Any,
) -> None:
    t = tenants
    original = dead_lettered_job(t, sql, t.acme)
    record(sql, original, "plan", "spawn:research", "gather:research", "write")
    before = snapshot(sql)

    unknown = t.client.post(
        f"/v1/jobs/{original}/fork", json={"step": "nope"}, headers=bearer(t.acme)
    )
    assert unknown.status_code == 404
    assert "no step 'nope'" in unknown.json()["detail"]
    assert "'plan'" in unknown.json()["detail"]  # the steps it could fork from
    tied = t.client.post(
        f"/v1/jobs/{original}/fork", json={"step": "write"}, headers=bearer(t.acme)
    )
    assert tied.status_code == 409
    assert "'spawn:research'" in tied.json()["detail"]
    # No step: after the last, which would inherit the spawn too.
    last = t.client.post(f"/v1/jobs/{original}/fork", json={}, headers=bearer(t.acme))
    assert last.status_code == 409 and "after its last step" in last.json()["detail"]
    assert "'spawn:research'" in last.json()["detail"]
    empty = t.client.post(f"/v1/jobs/{original}/fork", json={"step": ""}, headers=bearer(t.acme))
    assert empty.status_code == 422 and "step" in empty.text
    assert snapshot(sql) == before

    # From the spawn step itself: nothing tied is inherited; the child is spawned anew.
    ok = t.client.post(
        f"/v1/jobs/{original}/fork", json={"step": "spawn:research"}, headers=bearer(t.acme)
    )
    assert ok.status_code == 202, ok.text
    assert ok.json()["inherited"] == ["plan"]


@pytest.mark.asyncio
async def test_the_insert_writes_no_fork_whose_step_vanished_since_the_look(
    tenants: Tenants,  # noqa: F811 (the fixture imported above)
    sql: Any,
) -> None:
    """The service looked up the step; a prune may take the original before the insert,
    which checks the step again in its own statement and then writes nothing."""
    t = tenants
    original = dead_lettered_job(t, sql, t.acme)
    record(sql, original, "plan")
    row = submit_service.validated(
        t.stack.settings,
        submit_service.NewJob("demo.noop", {}, forked_from=uuid.UUID(original), fork_step="write"),
    )
    before = snapshot(sql)
    assert t.stack.settings.database_url is not None
    async with store.connect(t.stack.settings.database_url, min_size=1, max_size=1) as db:
        written = await store.jobs.insert(
            db, [row], tenant="acme", limits=submit_service.limits(t.stack.settings), key_id=None
        )
    assert not written.fork_ok and written.jobs == []
    assert snapshot(sql) == before


def where(sql: Any, table: str, condition: str, params: tuple[Any, ...] = ()) -> int:
    query = f"SELECT count(*) AS n FROM {table} WHERE {condition}"
    return int(sql.execute(query, params).fetchone()["n"])


def test_a_retried_rerun_or_fork_with_its_idempotency_key_answers_the_first_one(
    tenants: Tenants,  # noqa: F811 (the fixture imported above)
    sql: Any,
) -> None:
    t = tenants
    original = triage_dead_letter(t, sql, t.acme)
    record(sql, original, "classify", "draft")
    other = triage_dead_letter(t, sql, t.acme)
    keyed = {**bearer(t.acme), "Idempotency-Key": "retry-1"}

    first = t.client.post(f"/v1/jobs/{original}/rerun", headers=keyed)
    again = t.client.post(f"/v1/jobs/{original}/rerun", headers=keyed)
    assert first.status_code == again.status_code == 202, (first.text, again.text)
    assert again.json()["id"] == first.json()["id"]
    assert "Idempotent-Replayed" not in first.headers
    assert again.headers["Idempotent-Replayed"] == "true"
    assert where(sql, "jobs", "rerun_of = %s", (original,)) == 1
    # The key is bound to the job re-run and to the payload: another's is a 409.
    for path, body in (
        (f"/v1/jobs/{other}/rerun", None),
        (f"/v1/jobs/{original}/rerun", {"payload": {**TICKET, "ticket_id": "T-10"}}),
    ):
        refused = t.client.post(path, headers=keyed, json=body)
        assert refused.status_code == 409, refused.text
        assert "Idempotency-Key" in refused.json()["detail"]
    assert where(sql, "jobs", "rerun_of IS NOT NULL") == 1

    fork_key = {**bearer(t.acme), "Idempotency-Key": "fork-1"}
    forked = t.client.post(f"/v1/jobs/{original}/fork", headers=fork_key, json={"step": "draft"})
    forked_again = t.client.post(
        f"/v1/jobs/{original}/fork", headers=fork_key, json={"step": "draft"}
    )
    assert forked.status_code == forked_again.status_code == 202, forked_again.text
    assert forked_again.json()["id"] == forked.json()["id"]
    assert forked_again.headers["Idempotent-Replayed"] == "true"
    assert forked_again.json()["inherited"] == ["classify"]
    assert where(sql, "effects", "job_id = %s", (forked.json()["id"],)) == 1  # copied once
    # The same key from another step is another request.
    elsewhere = t.client.post(f"/v1/jobs/{original}/fork", headers=fork_key, json={})
    assert elsewhere.status_code == 409, elsewhere.text
    assert where(sql, "jobs", "forked_from = %s", (original,)) == 1

    # A retry answers what the first request made whatever became of the original since:
    # redriven (no longer finished), then pruned.
    sql.execute("UPDATE jobs SET state = 'queued', finished_at = NULL WHERE id = %s", (original,))
    late = t.client.post(f"/v1/jobs/{original}/rerun", headers=keyed)
    assert late.status_code == 202, late.text
    assert late.json()["id"] == first.json()["id"] and late.headers["Idempotent-Replayed"] == "true"
    unkeyed = t.client.post(f"/v1/jobs/{original}/rerun", headers=bearer(t.acme))
    assert unkeyed.status_code == 409  # a new re-run of an unfinished job: refused as before
    sql.execute("DELETE FROM effects WHERE job_id = %s", (original,))
    sql.execute("DELETE FROM job_events WHERE job_id = %s", (original,))
    sql.execute("DELETE FROM outbox WHERE job_id = %s", (original,))
    sql.execute("DELETE FROM jobs WHERE id = %s", (original,))
    pruned = t.client.post(f"/v1/jobs/{original}/fork", headers=fork_key, json={"step": "draft"})
    assert pruned.status_code == 202, pruned.text
    assert (pruned.json()["id"], pruned.json()["inherited"]) == (forked.json()["id"], ["classify"])
    assert t.client.post(f"/v1/jobs/{original}/rerun", headers=bearer(t.acme)).status_code == 404
    # Another tenant's key finds nothing of it.
    theirs = {**bearer(t.globex), "Idempotency-Key": "retry-1"}
    assert t.client.post(f"/v1/jobs/{original}/rerun", headers=theirs).status_code == 404
