"""The users' known pains, each a regression test named after the pain it guards against.

Each test links the issue where people hit it, says what went wrong there, and
shows tasklease's answer with real worker processes, a real SQS-compatible server
and real PostgreSQL, ending with the invariant checks (tests/invariants.py).
"""

from __future__ import annotations

import datetime as dt
import os
import signal
from typing import Any

import pytest

from app.crashpoints import Point
from app.states import JobState
from app.transport import codec
from tests import carrier
from tests.conftest import Stack, job_row, wait_for
from tests.e2e.test_crash_points import (
    TICKET,
    crash_env,
    died_by_sigkill,
    queue_empty,
    submit_now,
    webhook_starting,
)
from tests.invariants import (
    check_invariants,
    deliveries,
    describe,
    effects,
    model_outcomes,
    timeline,
    wait_for_state,
)

pytestmark = pytest.mark.e2e

VISIBILITY = 4  # the stack fixture's visibility timeout, in seconds


def worker(stack: Stack, name: str, **kw: Any) -> tuple[Any, str]:
    """A worker process and its id (Stack.worker names it f"{name}-{index}")."""
    worker_id = f"{name}-{len(stack.procs)}"
    return stack.worker(name=name, **kw), worker_id


def claims(sql: Any, job_id: str) -> list[dict[str, Any]]:
    return [e for e in timeline(sql, job_id) if e["to_state"] == JobState.LEASED]


def duplicate_deliveries_seen(*procs: Any) -> list[str]:
    """Log lines where a worker got a copy of a message whose job another worker held."""
    return [
        line
        for p in procs
        for line in p.log_path.read_text().splitlines()
        if "duplicate delivery" in line
    ]


def killed_after_first_step(stack: Stack, sql: Any, job_id: str, victims: dict[str, Any]) -> str:
    """SIGKILL whichever of ``victims`` (id -> process) holds the job, once step-0 is recorded."""
    wait_for(
        lambda: len(effects(sql, job_id)) >= 1, what="the first step to be recorded", timeout=60
    )
    owner = job_row(sql, job_id)["lease_owner"]
    assert owner in victims, f"the job is held by {owner}, not one of {sorted(victims)}"
    os.kill(victims[owner].pid, signal.SIGKILL)
    assert victims[owner].wait(10) == -signal.SIGKILL
    return str(owner)


def test_celery_5306_a_task_outliving_the_visibility_timeout_runs_once(
    stack: Stack, sql: Any
) -> None:
    """https://github.com/celery/celery/issues/5306 — "Tasks running multiple times with
    CELERY_ACKS_LATE and visibility_timeout": a task still running when the broker's
    visibility timeout ran out was handed to another worker and ran again.

    Here a job runs three times the visibility timeout with two workers polling: the
    heartbeat keeps extending the message's visibility (and the row's lease), so it is
    claimed once and the other worker never even sees a copy."""
    first, _ = worker(stack, "w")
    second, _ = worker(stack, "w")
    job_id = submit_now(stack, "demo.sleep", {"seconds": 3 * VISIBILITY, "steps": 1})

    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=60)
    assert row["attempt"] == 1
    assert len(claims(sql, job_id)) == 1, describe(sql, job_id)
    assert duplicate_deliveries_seen(first, second) == []
    assert [(f["key"], f["attempt"]) for f in effects(sql, job_id)] == [("step-0", 1)]
    check_invariants(sql, stack, [job_id])


def test_celery_1628_a_task_whose_worker_is_killed_mid_task_is_not_lost(
    stack: Stack, sql: Any
) -> None:
    """https://github.com/celery/celery/issues/1628 — "Message being acknowledged on
    WorkerLostError when CELERY_ACKS_LATE=True": when the OOM killer took a worker,
    celery acknowledged the message anyway and the task was gone.

    Here the worker holding the job is SIGKILLed mid-job; nothing acknowledges (deletes)
    the message, so it comes back and the other worker finishes the job from its last
    recorded step."""
    procs = dict(worker(stack, "w")[::-1] for _ in range(2))  # id -> process
    job_id = submit_now(stack, "demo.sleep", {"seconds": 1, "steps": 4})
    victim = killed_after_first_step(stack, sql, job_id, procs)
    done_before = len(effects(sql, job_id))

    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=60)
    (survivor,) = set(procs) - {victim}
    assert row["attempt"] == 2
    assert row["lease_owner"] == survivor
    fx = effects(sql, job_id)
    assert [f["key"] for f in fx] == ["step-0", "step-1", "step-2", "step-3"]
    assert {f["worker"] for f in fx[:done_before]} == {victim}
    assert {f["worker"] for f in fx[done_before:]} == {survivor}
    check_invariants(sql, stack, [job_id])


def test_celery_4797_a_failed_job_is_dead_lettered_not_deleted(stack: Stack, sql: Any) -> None:
    """https://github.com/celery/celery/issues/4797 — "Add ability to not delete a message
    on exceptions": on SQS, celery always deleted the message of a failed task, so the
    dead-letter queue (and its alarms and redrive) never saw it.

    Here a permanent failure ends with the job's message in the DLQ, carrying the
    reason and the dead-letter marker, and the row dead_lettered with the same reason."""
    worker(stack, "w")
    job_id = submit_now(stack, "demo.flaky", {"permanent": True})

    row = wait_for_state(sql, job_id, JobState.DEAD_LETTERED, timeout=60)
    assert "permanent failure on purpose" in row["last_error"]
    assert row["dead_lettered_by"] == "engine"
    got = carrier.receive_raw(stack, stack.settings.dlq, wait=5)
    assert len(got) == 1, got
    attrs = got[0]["MessageAttributes"]
    assert codec.parse_body(got[0]["Body"]) == row["id"]
    assert "permanent failure on purpose" in attrs[codec.ATTR_REASON]["StringValue"]
    assert codec.ATTR_DEAD_LETTERED_AT in attrs
    assert attrs[codec.ATTR_JOB_ID]["StringValue"] == job_id
    wait_for(lambda: queue_empty(stack), timeout=30, what="the source message to be deleted")
    check_invariants(sql, stack, [job_id])


def test_azul_3708_receives_burned_by_throttling_use_no_attempts(stack: Stack, sql: Any) -> None:
    """https://github.com/DataBiosphere/azul/issues/3708 — "Throttles on retry lambda
    consume actual attempts": Lambda's SQS poller received messages it had no
    concurrency for and returned them, each receive raising ApproximateReceiveCount,
    so messages reached the DLQ without an honest number of attempts.

    Here the message is received and returned (visibility 0) more times than the job's
    attempt budget, as a throttled poller would; the job then runs on attempt 1 and
    succeeds: attempts are counted in the database at claim time, never from the
    receive count."""
    job_id = submit_now(stack, "demo.noop", {}, max_attempts=2)
    throttled = 5
    count = 0
    for _ in range(throttled):
        (msg,) = carrier.receive_raw(stack, wait=5)
        count = int(msg["Attributes"]["ApproximateReceiveCount"])
        carrier.change_visibility(stack, msg["ReceiptHandle"], 0)
    assert count == throttled > job_row(sql, job_id)["max_attempts"]
    assert job_row(sql, job_id)["attempt"] == 0

    worker(stack, "w")
    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=60)
    assert row["attempt"] == 1
    assert len(claims(sql, job_id)) == 1
    assert carrier.depth(stack, stack.settings.dlq)["ApproximateNumberOfMessages"] == 0
    check_invariants(sql, stack, [job_id])


def test_dramatiq_sqs_53_a_long_task_keeps_its_message_hidden_with_a_heartbeat(
    stack: Stack, sql: Any
) -> None:
    """https://github.com/Bogdanp/dramatiq_sqs/pull/53 — "feat: add visibility-timeout
    heartbeat to SQSConsumer": without a heartbeat, a task running longer than the
    queue's VisibilityTimeout was redelivered mid-processing and ran twice.

    Here a job runs more than twice the visibility timeout, with a second poller free
    in the same worker: while it runs, the row's lease moves forward past the first
    lease's end and the message is never delivered again (one claim, no duplicate
    delivery)."""
    proc, _ = worker(stack, "w", concurrency=2)
    job_id = submit_now(stack, "demo.sleep", {"seconds": 2 * VISIBILITY + 1, "steps": 1})
    first = wait_for_state(sql, job_id, JobState.RUNNING, timeout=60)["lease_expires_at"]

    def past_the_first_lease() -> Any:
        row = sql.execute(
            "SELECT state, lease_expires_at, now() AS now FROM jobs WHERE id = %s", (job_id,)
        ).fetchone()
        return row if row["now"] > first + dt.timedelta(seconds=1) else None

    later = wait_for(past_the_first_lease, timeout=30, what="the first lease's end to pass")
    assert later["state"] == JobState.RUNNING, describe(sql, job_id)
    assert later["lease_expires_at"] > later["now"], "the heartbeat did not extend the lease"
    assert len(claims(sql, job_id)) == 1

    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=60)
    assert row["attempt"] == 1
    assert len(claims(sql, job_id)) == 1, describe(sql, job_id)
    assert duplicate_deliveries_seen(proc) == []
    check_invariants(sql, stack, [job_id])


def test_powertools_1038_a_killed_invocation_leaves_no_record_stuck_in_progress(
    stack: Stack, sql: Any
) -> None:
    """https://github.com/aws-powertools/powertools-lambda-python/issues/1038 —
    "Idempotency and Lambda timeouts": a Lambda that timed out left its idempotency
    record INPROGRESS, and every retry failed with IdempotencyAlreadyInProgressError
    until the record expired.

    Here the worker is killed mid-job: the row says 'running', but only under a lease
    that ends one visibility timeout after the last heartbeat. The next delivery after
    that claims it (no error, no wait for an hour-long expiry), finishes it, and each
    effect is recorded once."""
    victim, victim_id = worker(stack, "victim")
    job_id = submit_now(stack, "demo.sleep", {"seconds": 1, "steps": 3})
    killed_after_first_step(stack, sql, job_id, {victim_id: victim})
    row = sql.execute(
        "SELECT state, lease_expires_at, now() AS now FROM jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert row["state"] == JobState.RUNNING
    left = (row["lease_expires_at"] - row["now"]).total_seconds()
    assert left <= VISIBILITY + 0.5, f"the dead worker's lease still has {left:.1f} s to run"
    lease_end = row["lease_expires_at"]

    worker(stack, "next")
    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=60)
    assert row["attempt"] == 2
    assert row["last_error"] is None
    rescue = claims(sql, job_id)[-1]
    assert rescue["at"] >= lease_end, "claimed while the dead worker's lease was live"
    fx = effects(sql, job_id)
    assert [f["key"] for f in fx] == ["step-0", "step-1", "step-2"]
    assert fx[0]["worker"] == victim_id
    check_invariants(sql, stack, [job_id])


def test_procrastinate_307_a_job_whose_worker_died_is_reaped_and_resumes(
    stack: Stack, sql: Any
) -> None:
    """https://github.com/procrastinate-org/procrastinate/issues/307 — "When worker
    restarts, interrupted jobs are forever lost": a worker killed mid-job left its job
    'doing', and nothing ever looked at it again.

    Here the sweeper (`tasklease sweep --once`) marks the expired lease 'stalled', with
    an event naming the dead worker, and the job resumes by itself when its message
    comes back: no operator action."""
    victim, victim_id = worker(stack, "victim")
    job_id = submit_now(stack, "demo.sleep", {"seconds": 1, "steps": 3})
    killed_after_first_step(stack, sql, job_id, {victim_id: victim})
    wait_for(
        lambda: sql.execute(
            "SELECT lease_expires_at < now() - interval '1.5 seconds' AS expired "
            "FROM jobs WHERE id = %s",
            (job_id,),
        ).fetchone()["expired"],
        timeout=30,
        what="the dead worker's lease to expire",
    )

    sweep = stack.spawn("sweep", "--once", name="sweep")
    assert sweep.wait(60) == 0, sweep.log_path.read_text()  # type: ignore[attr-defined]
    assert "stalled=1" in sweep.log_path.read_text()  # type: ignore[attr-defined]
    assert job_row(sql, job_id)["state"] == JobState.STALLED
    stalled = [e for e in timeline(sql, job_id) if e["to_state"] == JobState.STALLED]
    assert len(stalled) == 1
    assert victim_id in stalled[0]["detail"]

    worker(stack, "next")
    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=60)
    assert row["attempt"] == 2
    states = [e["to_state"] for e in timeline(sql, job_id)]
    assert states[states.index("stalled") :][:3] == ["stalled", "leased", "running"]
    check_invariants(sql, stack, [job_id])


def test_hatchet_552_a_step_done_before_a_crash_is_not_run_again(stack: Stack, sql: Any) -> None:
    """https://github.com/hatchet-dev/hatchet/issues/552 — "after restarting the engine,
    the same step gets executed twice": a step that had already run started over from
    its beginning after a restart.

    Here the worker dies right after the first effect (the model's answer) is recorded:
    the next attempt replays it without calling the model, and only the second effect
    (the webhook post) runs, on attempt 2, delivered once."""
    webhook_up = webhook_starting(stack)
    doomed, _ = worker(stack, "doomed", env=crash_env(Point.AFTER_EFFECT))
    webhook_up()
    job_id = submit_now(stack, "support.triage", TICKET)
    died_by_sigkill(doomed, "the worker armed at after_effect")

    worker(stack, "next")
    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=60)
    assert row["attempt"] == 2
    assert [(f["key"], f["attempt"]) for f in effects(sql, job_id)] == [
        ("triage", 1),
        ("post", 2),
    ]
    assert model_outcomes(stack, f"{job_id}:triage") == ["ok"]
    assert deliveries(stack) == {f"{job_id}:post": 1}
    check_invariants(sql, stack, [job_id])


def test_a_job_longer_than_the_lambda_time_limit_completes_over_several_invocations(
    stack: Stack, sql: Any
) -> None:
    """Lambda stops a function at 15 minutes (docs/explain/design.md#leases): when the
    invocation's time runs short the engine hands the lease back without using an
    attempt, and the next invocation replays the recorded steps and goes on.

    A worker whose invocations last 3 s (1 s margin) runs six 1-second steps: the job
    completes over several invocations, each step recorded once, still on attempt 1."""
    worker(
        stack,
        "w",
        env={
            "TASKLEASE_FUNCTION_TIMEOUT_SECONDS": "3",
            "TASKLEASE_HANDBACK_MARGIN_SECONDS": "1",
        },
    )
    job_id = submit_now(stack, "demo.sleep", {"seconds": 1, "steps": 6})

    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=120)
    events = timeline(sql, job_id)
    handbacks = [
        e
        for e in events
        if e["to_state"] == JobState.QUEUED and (e["detail"] or "").startswith("lease handed back")
    ]
    # At most 2 s of work fit in one invocation, so six 1 s steps need three or more.
    assert len(handbacks) >= 2, describe(sql, job_id)
    assert len(claims(sql, job_id)) == len(handbacks) + 1
    assert row["attempt"] == 1, "a hand-back used an attempt"
    assert all(e["attempt"] == 1 for e in claims(sql, job_id))
    fx = effects(sql, job_id)
    assert [f["key"] for f in fx] == [f"step-{i}" for i in range(6)]
    assert {f["attempt"] for f in fx} == {1}
    assert row["result"]["steps"] == 6
    check_invariants(sql, stack, [job_id])
