"""A stateful test: random sequences of API calls, deliveries, duplicates, failures and
redrives against the real stack, with the invariants (docs/explain/design.md#invariants) checked after every step.

Hypothesis drives a ``RuleBasedStateMachine``. Each example gets a fresh pair of queues
on the SQS server (moto over HTTP, or LocalStack), emptied tables in the test's own
database, two engines in this process ("two workers") and the API through FastAPI's
TestClient with a real key per tenant. The rules are what callers, the broker and an
operator do: submit (two tenants, repeated Idempotency-Keys), cancel and redrive (own
tenant and another's), deliver a batch (sometimes with too little time left), deliver
the same records twice (in turn or at once), re-send a job's claim check, receive and
drop (a poller that died), move dead letters back as the AWS console does, sweep,
wait, and send jobs messages (own tenant and another's, repeated Idempotency-Keys,
finished jobs; demo.chat reads two), publish state (demo.publish: GET state's versions
only go up, its value the last published), and submit with a short deadline, waiting for
it and running the sweeper's deadline pass (after it, no job past its deadline is
unfinished; each deadline end is dead-lettered by 'deadline', its children finished).
After every step ``tests/invariants.check_invariants`` (settled=False) and the
checks below run; at the end of an example the queue is drained, every job must be
final and in the state its kind predicts, and every dead letter (but a deadline's) is
redriven once more (invariant 4).

The sequence is derandomized, so CI runs the same examples every time. Shrinking is
off: an example costs real round trips, and a failure already prints its steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import sys
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import hypothesis
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

with warnings.catch_warnings():
    # starlette warns at import that it found httpx rather than httpx2 (see test_api.py).
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

from app.api import create_app
from app.services import deadlines, sweeper
from app.settings.config import Settings
from app.states import JobState
from app.tools.stack.stack import create_queues
from app.transport import codec
from app.worker import event_source_mapping as eventsource
from app.worker.engine import Engine
from tests import carrier
from tests.conftest import Stack, bearer
from tests.helpers import receive_records
from tests.invariants import (
    DEADLINE_GRACE_SECONDS,
    FINAL,
    check_invariants,
    describe,
    timeline,
)

pytestmark = pytest.mark.integration

# The budget: this runs in every `make test`; about a minute on 2 cores.
EXAMPLES = 12
STEPS = 25
# A lease (the message's visibility) short enough that a hidden copy comes back soon.
VISIBILITY_SECONDS = 2
# Backoff under a second: SQS visibility is whole seconds, so a retry comes back at once
# and the drain stays short (the row still records the backoff it chose).
BACKOFF_BASE_SECONDS = 0.2
BACKOFF_CAP_SECONDS = 0.5
HANDBACK_MARGIN_SECONDS = 0.5
# What an invocation "short on time" has left before the hand-back margin: sleep-slow
# records its first effect (0.3 s) and hands the lease back before its second.
SHORT_ON_TIME_SECONDS = 0.45
# Bounds the drain: every message hidden by a step is visible again within ~3 s
# (a duplicate of a live lease: lease + 1 s; a hand-back: 2 s; a dropped receive: 2 s).
DRAIN_SECONDS = 30.0
# Waiting is the dearest step: an example sleeps this long at most.
MAX_WAIT_PER_EXAMPLE = 3.0
DEFAULT_MAX_ATTEMPTS = 3
TENANTS = ("acme", "globex")
ATTEMPTS = st.sampled_from([None, 1, 2, 3])  # None: the deployment's default


def other(tenant: str) -> str:
    return TENANTS[1] if tenant == TENANTS[0] else TENANTS[0]


# --- what is submitted, and how it must end ------------------------------------------


@dataclasses.dataclass(frozen=True)
class Spec:
    """A job request and the outcome its kind predicts when nobody cancels it."""

    label: str
    kind: str
    payload: dict[str, Any] = dataclasses.field(hash=False)
    permanent: bool = False
    fails_each_life: int = 0  # demo.flaky: attempts that fail after every (re)start
    fails_in_total: int = 0  # support.triage [transient:N]: the fake model's first N calls

    def __repr__(self) -> str:
        return self.label

    def outcome(self, max_attempts: int, redrives: int, cut_short: Sequence[int] = ()) -> JobState:
        """Attempts are counted at claim and restart with every redrive; the fake model's
        failures are counted per idempotency key across redrives. ``cut_short``: for each
        life before the last that its deadline ended (then redriven), the model's failures
        it used; every other life before the last used all its attempts' worth."""
        if self.permanent or self.fails_each_life >= max_attempts:
            return JobState.DEAD_LETTERED
        full = redrives - len(cut_short)
        left = self.fails_in_total - full * max_attempts - sum(cut_short)
        return JobState.DEAD_LETTERED if left >= max_attempts else JobState.SUCCEEDED


def lives_cut_short(events: Sequence[Mapping[str, Any]]) -> list[int]:
    """From a job's events in order: for each life but the last that ended "deadline
    passed", the transient failures it saw. A life ends at a dead letter; the next starts
    when the dead letter is redriven (to queued, or claimed straight from the DLQ)."""
    lives: list[list[Mapping[str, Any]]] = [[]]
    for e in events:
        if e["from_state"] == JobState.DEAD_LETTERED and e["to_state"] != JobState.DEAD_LETTERED:
            lives.append([])
        lives[-1].append(e)
    cut = []
    for life in lives[:-1]:
        end = next((e for e in reversed(life) if e["to_state"] == JobState.DEAD_LETTERED), None)
        if end is not None and (end["detail"] or "").startswith("deadline passed"):
            cut.append(sum("TransientModelError" in (e["detail"] or "") for e in life))
    return cut


def ticket(subject: str) -> dict[str, Any]:
    return {"ticket_id": "T-1", "subject": subject, "body": "I was charged twice."}


SPECS = [
    # First, so Hypothesis's simplest examples have it: longer than a heartbeat interval,
    # so the heartbeat runs, a cancel stops it midway and a hand-back splits it.
    Spec("sleep-slow", "demo.sleep", {"steps": 3, "seconds": 0.3}),
    Spec("noop", "demo.noop", {}),
    Spec("sleep-2", "demo.sleep", {"steps": 2}),
    Spec("flaky-1", "demo.flaky", {"fail_attempts": 1}, fails_each_life=1),
    Spec("flaky-2", "demo.flaky", {"fail_attempts": 2}, fails_each_life=2),
    Spec("flaky-permanent", "demo.flaky", {"permanent": True}, permanent=True),
    Spec("triage", "support.triage", ticket("Refund please")),
    Spec("triage-transient", "support.triage", ticket("[transient] Refund"), fails_in_total=1),
    Spec("triage-transient-3", "support.triage", ticket("[transient:3] Refund"), fails_in_total=3),
    Spec("triage-permanent", "support.triage", ticket("[permanent] Refund"), permanent=True),
    # Waits for two messages on "user" (the send_message rule; the drain sends what is
    # missing), answering each once, in order.
    Spec("chat-2", "demo.chat", {"messages": 2}),
    # Publishes phase (working, finished) and done (1, 2) with ctx.set_state.
    Spec("publish-2", "demo.publish", {"steps": 2}),
]
CHAT_MESSAGES = 2
PUBLISHED = {"phase": "finished", "done": 2}  # publish-2's state once it succeeded
# Submitted with a deadline (submit_with_deadline): any spec, and a callback wait longer
# than any deadline here (the callback opens once the job runs), so a deadline always
# ends it; redriven (the deadline cleared) it escalates at its timeout and succeeds.
DEADLINES = st.sampled_from([0.5, 1.5])
DEADLINE_SPECS = [*SPECS, Spec("approval-2s", "demo.approval", {"timeout_seconds": 2})]


@dataclasses.dataclass
class Accepted:
    """A job the API answered 202 for, as the caller knows it."""

    id: str
    tenant: str
    spec: Spec
    max_attempts: int
    cancelled: bool = False  # a cancel answered 200 with the job cancelled
    cancel_pending: bool = False  # a cancel answered 200 while a worker held the job
    messages: list[tuple[int, str]] = dataclasses.field(default_factory=list)  # (id, topic)
    sent_by_key: dict[str, tuple[str, str, int]] = dataclasses.field(default_factory=dict)
    deadline: bool = False  # submitted with deadline_seconds


# --- one example's world --------------------------------------------------------------


@dataclasses.dataclass
class Fixtures:
    """What the pytest test hands the machine: the stack, the database, keys, a loop."""

    stack: Stack
    sql: Any
    keys: dict[str, str]
    admin_key: str
    runner: asyncio.Runner


class World:
    """Fresh queues, two engines and an API client, for one example."""

    def __init__(self, fx: Fixtures) -> None:
        self.fx = fx
        self._resources = contextlib.ExitStack()
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    def _open(self) -> None:
        run = self.fx.runner.run
        name = f"sm-{uuid.uuid4().hex[:10]}"
        base = self.fx.stack.with_settings(
            queue_name=name,
            visibility_timeout_seconds=VISIBILITY_SECONDS,
            backoff_base_seconds=BACKOFF_BASE_SECONDS,
            backoff_cap_seconds=BACKOFF_CAP_SECONDS,
            handback_margin_seconds=HANDBACK_MARGIN_SECONDS,
            max_attempts=DEFAULT_MAX_ATTEMPTS,
            rate_limit_per_second=100_000,
            rate_limit_burst=1_000_000,
            pool_min_size=1,
            pool_max_size=4,
            # The model expects every redrive to run: the budget has its own tests
            # (test_redrive_budget.py).
            redrive_budget=1000,
        )
        urls = run(create_queues(base, name))
        self.settings = Settings(**{**base.model_dump(), **urls.settings()})
        self.engines: dict[str, Engine] = {}
        for worker in ("a", "b"):
            s = Settings(**{**self.settings.model_dump(), "worker_id": f"sm-worker-{worker}"})
            self.engines[worker] = engine = run(Engine.start(s))
            self._resources.callback(run, engine.close())
        # The lifespan opens the API's pool and SQS client.
        self.client = self._resources.enter_context(
            TestClient(create_app(self.settings), raise_server_exceptions=True)
        )

    def close(self) -> None:
        self._resources.close()

    # --- the broker side ------------------------------------------------------------

    async def invoke_async(
        self, worker: str, records: list[dict[str, Any]], context: Any = None
    ) -> dict[str, Any]:
        """What the event source mapping does: call the handler, delete the successes."""
        engine = self.engines[worker]
        response = await engine.handle({"Records": records}, context)
        failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
        done = [r["receiptHandle"] for r in records if r["messageId"] not in failed]
        if done:
            await engine.queue.delete_batch(done)
        return response

    def receive(self, n: int) -> list[dict[str, Any]]:
        return self.fx.runner.run(receive_records(self.engines["a"], max_messages=n, wait=0))  # type: ignore[no-any-return]

    def invoke(self, worker: str, records: list[dict[str, Any]], context: Any = None) -> None:
        if records:
            self.fx.runner.run(self.invoke_async(worker, records, context))

    def depth(self) -> dict[str, int]:
        return self.fx.runner.run(self.engines["a"].queue.depth())  # type: ignore[no-any-return]

    # --- the API side ---------------------------------------------------------------

    def call(self, method: str, path: str, *, key: str, **kw: Any) -> Any:
        headers = {**bearer(key), **kw.pop("headers", {})}
        return self.client.request(method, path, headers=headers, **kw)


# --- the machine ------------------------------------------------------------------------


class JobsMachine(RuleBasedStateMachine):
    fx: ClassVar[Fixtures]

    jobs = Bundle("jobs")

    def __init__(self) -> None:
        super().__init__()
        self.sql.execute("TRUNCATE jobs, job_events, effects, outbox CASCADE")
        self.fx.stack.model_log.unlink(missing_ok=True)
        self.world = World(self.fx)
        self.accepted: dict[str, Accepted] = {}
        self.by_key: dict[tuple[str, str], Accepted] = {}
        self.slept = 0.0
        self.versions: dict[tuple[str, str], int] = {}  # (job, key) -> GET state's version

    @property
    def sql(self) -> Any:
        return self.fx.sql

    def api(self, method: str, path: str, tenant: str, **kw: Any) -> Any:
        return self.world.call(method, path, key=self.fx.keys[tenant], **kw)

    def row(self, job_id: str) -> dict[str, Any]:
        row = self.sql.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()
        assert row is not None, f"job {job_id} was accepted but has no row"
        return row  # type: ignore[no-any-return]

    def n_events(self, job_id: str) -> int:
        return int(
            self.sql.execute(
                "SELECT count(*) AS n FROM job_events WHERE job_id = %s", (job_id,)
            ).fetchone()["n"]
        )

    def n_jobs(self) -> int:
        return int(self.sql.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"])

    def unchanged(self, job_id: str, row: dict[str, Any], events: int, what: str) -> None:
        assert self.row(job_id) == row, f"{what} changed the job\n{describe(self.sql, job_id)}"
        assert self.n_events(job_id) == events, f"{what} wrote an event\n" + describe(
            self.sql, job_id
        )

    # --- callers -----------------------------------------------------------------

    @rule(
        target=jobs,
        tenant=st.sampled_from(TENANTS),
        spec=st.sampled_from(SPECS),
        max_attempts=ATTEMPTS,
        key=st.sampled_from([None, None, "order-1", "order-2"]),
    )
    def submit(self, tenant: str, spec: Spec, max_attempts: int | None, key: str | None) -> Any:
        body: dict[str, Any] = {"kind": spec.kind, "payload": spec.payload}
        if max_attempts is not None:
            body["max_attempts"] = max_attempts
        headers = {"Idempotency-Key": key} if key else {}
        budget = max_attempts or DEFAULT_MAX_ATTEMPTS
        before = self.n_jobs()

        resp = self.api("POST", "/v1/jobs", tenant, json=body, headers=headers)

        prior = self.by_key.get((tenant, key)) if key else None
        if prior is not None and (prior.spec, prior.max_attempts) != (spec, budget):
            assert resp.status_code == 409, resp.text
            assert "Idempotency-Key" in resp.json()["detail"]
            assert self.n_jobs() == before
            return multiple()
        assert resp.status_code == 202, resp.text
        job = resp.json()
        if prior is not None:
            assert job["id"] == prior.id, "a replay made a second job"
            assert resp.headers.get("Idempotent-Replayed") == "true"
            assert self.n_jobs() == before
            return multiple()
        assert "Idempotent-Replayed" not in resp.headers
        assert (job["state"], job["attempt"], job["max_attempts"]) == ("queued", 0, budget)
        assert self.n_jobs() == before + 1
        accepted = Accepted(job["id"], tenant, spec, budget)
        self.accepted[job["id"]] = accepted
        if key:
            self.by_key[(tenant, key)] = accepted
        return job["id"]

    @rule(
        target=jobs,
        tenant=st.sampled_from(TENANTS),
        spec=st.sampled_from(DEADLINE_SPECS),
        seconds=DEADLINES,
    )
    def submit_with_deadline(self, tenant: str, spec: Spec, seconds: float) -> str:
        """A job whose whole run must end within ``seconds``: past it, whatever it does,
        the sweeper or a worker ends it dead-lettered by 'deadline'."""
        body = {"kind": spec.kind, "payload": spec.payload, "deadline_seconds": seconds}

        resp = self.api("POST", "/v1/jobs", tenant, json=body)

        assert resp.status_code == 202, resp.text
        job = resp.json()
        assert job["deadline"] is not None and job["state"] == "queued", job
        self.accepted[job["id"]] = Accepted(
            job["id"], tenant, spec, DEFAULT_MAX_ATTEMPTS, deadline=True
        )
        return job["id"]  # type: ignore[no-any-return]

    @rule(
        target=jobs,
        tenant=st.sampled_from(TENANTS),
        items=st.lists(
            st.tuples(
                st.sampled_from(SPECS),
                ATTEMPTS,
                st.sampled_from([None, None, "order-1", "order-2", "order-3"]),
            ),
            min_size=1,
            max_size=4,
        ),
    )
    def submit_batch(self, tenant: str, items: list[tuple[Spec, int | None, str | None]]) -> Any:
        """POST /v1/jobs/batch: all or none. A key twice in the batch is 422, a key reused
        with another body 409, and then nothing is written; else every replay is answered
        with its earlier job and every other item is a new job."""
        bodies = []
        for spec, max_attempts, key in items:
            body: dict[str, Any] = {"kind": spec.kind, "payload": spec.payload}
            if max_attempts is not None:
                body["max_attempts"] = max_attempts
            if key:
                body["idempotency_key"] = key
            bodies.append(body)
        before = self.n_jobs()

        resp = self.api("POST", "/v1/jobs/batch", tenant, json={"jobs": bodies})

        keys = [key for _, _, key in items if key]
        if len(keys) != len(set(keys)):
            assert resp.status_code == 422, resp.text
            assert self.n_jobs() == before
            return multiple()
        priors = [self.by_key.get((tenant, key)) if key else None for _, _, key in items]
        if any(
            p is not None and (p.spec, p.max_attempts) != (spec, m or DEFAULT_MAX_ATTEMPTS)
            for p, (spec, m, _) in zip(priors, items, strict=True)
        ):
            assert resp.status_code == 409, resp.text
            assert self.n_jobs() == before, "a refused batch wrote a job"
            return multiple()
        assert resp.status_code == 202, resp.text
        answer = resp.json()
        assert answer["replayed"] == [i for i, p in enumerate(priors) if p is not None]
        made = []
        for job, prior, (spec, max_attempts, key) in zip(
            answer["jobs"], priors, items, strict=True
        ):
            if prior is not None:
                assert job["id"] == prior.id, "a replay made a second job"
                continue
            budget = max_attempts or DEFAULT_MAX_ATTEMPTS
            assert (job["state"], job["attempt"], job["max_attempts"]) == ("queued", 0, budget)
            accepted = Accepted(job["id"], tenant, spec, budget)
            self.accepted[job["id"]] = accepted
            if key:
                self.by_key[(tenant, key)] = accepted
            made.append(job["id"])
        assert self.n_jobs() == before + len(made)
        return multiple(*made)

    @initialize(
        target=jobs,
        first=st.lists(
            st.tuples(st.sampled_from(TENANTS), st.sampled_from(SPECS), ATTEMPTS),
            min_size=3,
            max_size=6,
        ),
    )
    def some_jobs(self, first: list[tuple[str, Spec, int | None]]) -> Any:
        """Every example starts with a few jobs, so no example is spent on an empty queue."""
        return multiple(*(self.submit(t, s, m, None) for t, s, m in first))

    @rule(job_id=jobs, as_owner=st.booleans())
    def cancel(self, job_id: str, as_owner: bool) -> None:
        job = self.accepted[job_id]
        before, events = self.row(job_id), self.n_events(job_id)
        caller = job.tenant if as_owner else other(job.tenant)

        resp = self.api("POST", f"/v1/jobs/{job_id}/cancel", caller)

        if not as_owner:
            assert resp.status_code == 404, resp.text
            self.unchanged(job_id, before, events, "another tenant's cancel")
            return
        if before["state"] in (JobState.SUCCEEDED, JobState.CANCELLED):
            assert resp.status_code == 409, resp.text
            self.unchanged(job_id, before, events, "a cancel answered 409")
            return
        # Between steps no worker holds a lease, so a cancel takes effect at once.
        assert resp.status_code == 200, resp.text
        assert resp.json()["state"] == "cancelled", resp.json()
        job.cancelled = True

    @rule(job_id=jobs, as_owner=st.booleans())
    def redrive(self, job_id: str, as_owner: bool) -> None:
        job = self.accepted[job_id]
        before, events = self.row(job_id), self.n_events(job_id)
        caller = job.tenant if as_owner else other(job.tenant)

        resp = self.api("POST", f"/v1/jobs/{job_id}/redrive", caller)

        if not as_owner:
            assert resp.status_code == 404, resp.text
            self.unchanged(job_id, before, events, "another tenant's redrive")
            return
        if before["state"] != JobState.DEAD_LETTERED:
            assert resp.status_code == 409, resp.text
            self.unchanged(job_id, before, events, "a redrive answered 409")
            return
        assert resp.status_code == 202, resp.text
        after = self.row(job_id)
        assert (after["state"], after["attempt"], after["redrives"]) == (
            JobState.QUEUED,
            0,
            before["redrives"] + 1,
        ), describe(self.sql, job_id)

    @rule(job_id=jobs, tenant=st.sampled_from(TENANTS))
    def operator_redrive(self, job_id: str, tenant: str) -> None:
        """The admin API's filtered redrive (the DLQ walk); a tenant's key is refused."""
        before, events = self.row(job_id), self.n_events(job_id)
        refused = self.api("POST", "/v1/dead-letters/redrive", tenant, json={"job_ids": [job_id]})
        assert refused.status_code == 403, refused.text
        self.unchanged(job_id, before, events, "a tenant's bulk redrive")

        resp = self.world.call(
            "POST", "/v1/dead-letters/redrive", key=self.fx.admin_key, json={"job_ids": [job_id]}
        )

        assert resp.status_code == 200, resp.text
        after = self.row(job_id)
        if before["state"] == JobState.DEAD_LETTERED:
            assert resp.json()["selected"] == 1, resp.json()
            assert (after["state"], after["attempt"], after["redrives"]) == (
                JobState.QUEUED,
                0,
                before["redrives"] + 1,
            ), describe(self.sql, job_id)
        else:
            assert resp.json()["selected"] == 0, resp.json()
            self.unchanged(job_id, before, events, "a redrive of a job not dead-lettered")

    @rule(
        job_id=jobs,
        as_owner=st.booleans(),
        topic=st.sampled_from(["user", "user", "other"]),
        body=st.sampled_from(["hi", "bye"]),
        key=st.sampled_from([None, None, "m-1"]),
    )
    def send_message(
        self, job_id: str, as_owner: bool, topic: str, body: str, key: str | None
    ) -> None:
        """POST /v1/jobs/{id}/messages: stored once per Idempotency-Key, refused by a
        finished job (409) and for another tenant (404), waking the job only when it waits
        on that topic."""
        job = self.accepted[job_id]
        before, events = self.row(job_id), self.n_events(job_id)
        caller = job.tenant if as_owner else other(job.tenant)
        headers = {"Idempotency-Key": key} if key else {}

        resp = self.api(
            "POST",
            f"/v1/jobs/{job_id}/messages",
            caller,
            json={"topic": topic, "body": body},
            headers=headers,
        )

        prior = job.sent_by_key.get(key) if key and as_owner else None
        if not as_owner:
            assert resp.status_code == 404, resp.text
        elif prior is not None and prior[:2] != (topic, body):
            assert resp.status_code == 409 and "Idempotency-Key" in resp.text, resp.text
        elif prior is not None:
            assert resp.status_code == 201, resp.text
            assert resp.headers.get("Idempotent-Replayed") == "true"
            assert (resp.json()["id"], resp.json()["job_woken"]) == (prior[2], False)
        elif before["state"] in (JobState.SUCCEEDED, JobState.CANCELLED):
            assert resp.status_code == 409, resp.text
            assert f"is {before['state']}" in resp.json()["detail"], resp.text
        else:
            assert resp.status_code == 201, resp.text
            sent = resp.json()
            waited = before["state"] == JobState.WAITING and (
                before["wait_kind"],
                before["wait_key"],
            ) == ("message", topic)
            assert sent["job_woken"] == waited, (sent, describe(self.sql, job_id))
            job.messages.append((sent["id"], topic))
            if key:
                job.sent_by_key[key] = (topic, body, sent["id"])
            if waited:
                assert self.row(job_id)["state"] == JobState.QUEUED, describe(self.sql, job_id)
            return
        self.unchanged(job_id, before, events, "a message refused or replayed")

    def top_up_messages(self) -> None:
        """demo.chat reads CHAT_MESSAGES on "user": send what is missing to those not
        finished, so the drain can end them."""
        for job_id, job in self.accepted.items():
            if job.spec.kind != "demo.chat":
                continue
            if self.row(job_id)["state"] in (JobState.SUCCEEDED, JobState.CANCELLED):
                continue
            for n in range(sum(1 for _, t in job.messages if t == "user"), CHAT_MESSAGES):
                resp = self.api(
                    "POST",
                    f"/v1/jobs/{job_id}/messages",
                    job.tenant,
                    json={"topic": "user", "body": f"top-up {n}"},
                )
                assert resp.status_code == 201, resp.text
                job.messages.append((resp.json()["id"], "user"))

    # --- the broker and the workers --------------------------------------------------

    @rule()
    def deliver(self) -> None:
        """A full batch to worker a."""
        self.world.invoke("a", self.world.receive(10))

    @rule(worker=st.sampled_from("ab"), n=st.integers(1, 10))
    def deliver_some(self, worker: str, n: int) -> None:
        self.world.invoke(worker, self.world.receive(n))

    @rule(n=st.integers(1, 10), left=st.sampled_from([SHORT_ON_TIME_SECONDS, 0.0]))
    def deliver_short_on_time(self, n: int, left: float) -> None:
        """The invocation is about to end: a job still running ``left`` seconds in hands
        its lease back (no attempt used) and resumes after its recorded effects."""
        context = eventsource.LocalContext(HANDBACK_MARGIN_SECONDS + left)
        self.world.invoke("b", self.world.receive(n), context)

    @rule(n=st.integers(1, 10), at_once=st.booleans())
    def deliver_twice(self, n: int, at_once: bool) -> None:
        """The same records to both workers: one after the other, or at the same time."""
        records = self.world.receive(n)
        if not records:
            return
        if at_once:

            async def both() -> None:
                await asyncio.gather(
                    self.world.invoke_async("a", records), self.world.invoke_async("b", records)
                )

            self.fx.runner.run(both())
        else:
            self.world.invoke("a", records)
            self.world.invoke("b", records)

    @rule(job_id=jobs)
    def resend_claim_check(self, job_id: str) -> None:
        """A second message for the job (the sweeper's re-send, a broker duplicate)."""
        carrier.send_raw(self.fx.stack, codec.body_for(job_id), url=self.world.settings.queue)

    @rule(n=st.integers(1, 10))
    def receive_and_drop(self, n: int) -> None:
        """A poller received a batch and died before the handler ran: no attempt is used;
        the messages come back after their visibility timeout."""
        self.world.receive(n)

    @rule(n=st.integers(1, 10), delay=st.sampled_from([0.0, 0.1]))
    def deliver_while_cancelling(self, n: int, delay: float) -> None:
        """The owner cancels a job of the batch while a worker runs it."""
        records = self.world.receive(n)
        ids = [str(codec.parse_body(r["body"])) for r in records]
        # A job that runs long enough to be cancelled midway, if the batch has one.
        victims = sorted(
            (self.accepted[i] for i in ids if i in self.accepted),
            key=lambda job: job.spec.label != "sleep-slow",
        )
        if not victims:
            self.world.invoke("a", records)
            return
        victim = victims[0]

        async def go() -> Any:
            handled = asyncio.create_task(self.world.invoke_async("a", records))
            await asyncio.sleep(delay)
            resp = await asyncio.to_thread(
                self.api, "POST", f"/v1/jobs/{victim.id}/cancel", victim.tenant
            )
            await handled
            return resp

        resp = self.fx.runner.run(go())
        assert resp.status_code in (200, 409), resp.text
        if resp.status_code == 200:
            if resp.json()["state"] == "cancelled":
                victim.cancelled = True
            else:
                assert resp.json()["cancel_requested"], resp.json()
                victim.cancel_pending = True

    @rule()
    def move_dead_letters_back(self) -> None:
        """Dead letters moved back as StartMessageMoveTask (the AWS console) does: new
        messages with the attributes kept, the rows untouched (moto has no move task)."""
        sqs = self.world.engines["a"].queue

        async def move() -> None:
            messages = await sqs.receive(
                url=sqs.settings.dlq, max_messages=10, wait_seconds=0, visibility=5
            )
            if messages:
                assert await sqs.send_moved(messages) == []
                await sqs.delete_dead_letters([m["ReceiptHandle"] for m in messages])

        self.fx.runner.run(move())

    @rule()
    def sweep(self) -> None:
        engine = self.world.engines["b"]
        swept_at = self.db_now()
        self.fx.runner.run(sweeper.sweep_once(engine.settings, engine.db, engine.queue))
        self.none_past_deadline(swept_at)

    @precondition(lambda self: any(job.deadline for job in self.accepted.values()))
    @rule()
    def pass_deadlines(self) -> None:
        """Wait (within the example's budget) for the earliest unfinished deadline, then
        run the sweeper's deadline pass alone."""
        due = self.sql.execute(
            "SELECT extract(epoch FROM min(deadline) - now()) AS s FROM jobs"
            " WHERE deadline IS NOT NULL AND NOT state = ANY(%s)",
            ([str(s) for s in FINAL],),
        ).fetchone()["s"]
        if due is not None and due > 0:
            pause = min(float(due) + 0.05, MAX_WAIT_PER_EXAMPLE - self.slept)
            if pause > 0:
                time.sleep(pause)
                self.slept += pause
        engine = self.world.engines["b"]
        swept_at = self.db_now()
        self.fx.runner.run(deadlines.sweep(engine.db, engine.queue, limit=500))
        self.none_past_deadline(swept_at)

    def db_now(self) -> Any:
        return self.sql.execute("SELECT now() AS now").fetchone()["now"]

    def none_past_deadline(self, swept_at: Any) -> None:
        """After the sweeper's deadline pass, no job whose deadline passed before it is
        unfinished (between steps no worker holds one)."""
        late = self.sql.execute(
            "SELECT id FROM jobs WHERE deadline <= %s AND NOT state = ANY(%s)",
            (swept_at, [str(s) for s in FINAL]),
        ).fetchall()
        assert not late, "\n".join(describe(self.sql, str(r["id"])) for r in late)

    @precondition(lambda self: self.slept < MAX_WAIT_PER_EXAMPLE)
    @rule(seconds=st.sampled_from([0.5, VISIBILITY_SECONDS + 0.2]))
    def let_time_pass(self, seconds: float) -> None:
        """Backoffs run out; hidden copies (a dropped receive, a hand-back, a duplicate of
        a live lease) come back."""
        time.sleep(seconds)
        self.slept += seconds

    # --- after every step --------------------------------------------------------------

    @invariant()
    def invariants_hold(self) -> None:
        rows = {
            str(r["id"]): r
            for r in self.sql.execute(
                "SELECT id, tenant, state, attempt, max_attempts, lease_expires_at FROM jobs"
            ).fetchall()
        }
        # Every 202 is a row, and nothing else is: a 409 or a replay writes no job.
        assert set(rows) == set(self.accepted), (sorted(rows), sorted(self.accepted))
        for job_id, job in self.accepted.items():
            row = rows[job_id]
            assert row["tenant"] == job.tenant, describe(self.sql, job_id)
            # The claim that finds the budget spent dead-letters without running.
            assert row["attempt"] <= row["max_attempts"] + 1, describe(self.sql, job_id)
            # Every handle() returned, so no worker holds a lease between steps.
            assert row["state"] not in (JobState.LEASED, JobState.RUNNING), (
                "a worker returned and left its lease behind\n" + describe(self.sql, job_id)
            )
            if job.cancelled:
                assert row["state"] == JobState.CANCELLED, describe(self.sql, job_id)
        # Every 201 to a message is a row, and nothing else is.
        stored = {
            (str(r["job_id"]), r["id"])
            for r in self.sql.execute("SELECT job_id, id FROM job_messages").fetchall()
        }
        sent = {(j, m) for j, a in self.accepted.items() for m, _ in a.messages}
        assert stored == sent, (sorted(stored), sorted(sent))
        if self.accepted:
            check_invariants(self.sql, self.fx.stack, list(self.accepted), settled=False)
        # A tenant sees its own jobs, all of them, and nobody else's.
        for tenant in TENANTS:
            listed = self.api("GET", "/v1/jobs", tenant, params={"limit": 200})
            assert listed.status_code == 200, listed.text
            mine = {j for j, a in self.accepted.items() if a.tenant == tenant}
            assert {j["id"] for j in listed.json()["items"]} == mine, tenant
        self.deadline_ends_hold()
        self.published_state_holds()
        for job_id, job in list(self.accepted.items())[-1:]:
            for path in ("", "/events", "/effects", "/messages", "/state"):
                resp = self.api("GET", f"/v1/jobs/{job_id}{path}", other(job.tenant))
                assert resp.status_code == 404, (path, resp.text)

    def deadline_ends_hold(self) -> None:
        """Each end by a deadline is a job submitted with one, past it, "deadline passed",
        and left no child unfinished (the cancelling trigger cancelled them)."""
        for row in self.sql.execute(
            "SELECT id, deadline, finished_at, last_error FROM jobs"
            " WHERE dead_lettered_by = 'deadline'"
        ).fetchall():
            job_id = str(row["id"])
            assert self.accepted[job_id].deadline, describe(self.sql, job_id)
            assert row["last_error"] == "deadline passed", describe(self.sql, job_id)
            assert row["deadline"] is not None, describe(self.sql, job_id)
            # Ended at it, not before (a worker's timer runs on its corrected clock).
            early = row["deadline"] - dt.timedelta(seconds=DEADLINE_GRACE_SECONDS)
            assert row["finished_at"] >= early, describe(self.sql, job_id)
            children = self.sql.execute(
                "SELECT id FROM jobs WHERE parent_id = %s AND NOT state = ANY(%s)",
                (job_id, [str(s) for s in FINAL]),
            ).fetchall()
            assert not children, describe(self.sql, job_id)

    def published_state_holds(self) -> None:
        """GET state: each key's version never goes back, and its value is the last one
        published (the newest state event on the job's stream, same version)."""
        for job_id, job in self.accepted.items():
            if job.spec.kind != "demo.publish":
                continue
            resp = self.api("GET", f"/v1/jobs/{job_id}/state", job.tenant)
            assert resp.status_code == 200, resp.text
            for item in resp.json()["items"]:
                key, version = item["key"], item["version"]
                seen = self.versions.get((job_id, key), 0)
                assert version >= seen, (key, version, seen, describe(self.sql, job_id))
                self.versions[(job_id, key)] = version
                last = self.sql.execute(
                    "SELECT data FROM job_output WHERE job_id = %s AND type = 'state'"
                    " AND key = %s ORDER BY (data->>'version')::bigint DESC LIMIT 1",
                    (job_id, key),
                ).fetchone()
                assert last is not None, (key, describe(self.sql, job_id))
                assert (last["data"]["value"], last["data"]["version"]) == (
                    item["value"],
                    version,
                ), (item, last["data"], describe(self.sql, job_id))

    # --- at the end of an example --------------------------------------------------------

    def drain(self) -> None:
        """Deliver until every job is final and the queue is empty, or fail after
        DRAIN_SECONDS naming the jobs still on their way."""
        deadline = time.monotonic() + DRAIN_SECONDS
        while True:
            depth = self.world.depth()
            waiting = [
                str(r["id"])
                for r in self.sql.execute(
                    "SELECT id FROM jobs WHERE NOT state = ANY(%s)", ([str(s) for s in FINAL],)
                ).fetchall()
            ]
            if not waiting and not any(depth.values()):
                return
            if time.monotonic() > deadline:
                pytest.fail(
                    f"not drained after {DRAIN_SECONDS:.0f} s: queue {depth}\n"
                    + "\n".join(describe(self.sql, j) for j in waiting),
                    pytrace=False,
                )
            if depth.get("ApproximateNumberOfMessages"):
                self.world.invoke("a", self.world.receive(10))
            else:
                time.sleep(0.2)  # only hidden copies left: they come back on their own

    def check_outcomes(self) -> list[str]:
        """Every job ended as its kind predicts, or cancelled when a cancel said so.
        Returns the dead-lettered ones, but those a deadline ended."""
        dead: list[str] = []
        for job_id, job in self.accepted.items():
            row = self.row(job_id)
            # A life its deadline ended used fewer attempts than a life that ran out of them.
            cut = lives_cut_short(timeline(self.sql, job_id)) if job.deadline else []
            expected = job.spec.outcome(row["max_attempts"], row["redrives"], cut)
            allowed = {expected}
            if job.cancelled:
                allowed = {JobState.CANCELLED}
            elif job.cancel_pending:
                allowed.add(JobState.CANCELLED)
            if job.deadline and row["dead_lettered_by"] == "deadline":
                allowed.add(JobState.DEAD_LETTERED)
            assert row["state"] in allowed, (
                f"{job.spec!r} (max_attempts {row['max_attempts']}) ended {row['state']}, "
                f"expected {sorted(allowed)}\n{describe(self.sql, job_id)}"
            )
            # A deadline end is not redriven here: the redrive rules do it mid-example, and
            # the end's redrive (its deadline cleared) has its own tests; this keeps the
            # teardown from waiting out approval-2s's callback.
            if row["state"] == JobState.DEAD_LETTERED and row["dead_lettered_by"] != "deadline":
                dead.append(job_id)
            if job.spec.kind == "demo.chat" and row["state"] == JobState.SUCCEEDED:
                first = [m for m, t in job.messages if t == "user"][:CHAT_MESSAGES]
                answered = [a["message"] for a in row["result"]["answers"]]
                assert answered == first, (answered, first, describe(self.sql, job_id))
            if job.spec.kind == "demo.publish" and row["state"] == JobState.SUCCEEDED:
                resp = self.api("GET", f"/v1/jobs/{job_id}/state", job.tenant)
                got = {i["key"]: i["value"] for i in resp.json()["items"]}
                assert got == PUBLISHED, (got, describe(self.sql, job_id))
        return dead

    def teardown(self) -> None:
        try:
            if not hasattr(self, "world"):
                return
            if sys.exc_info()[0] is not None:
                return  # a step failed (or Hypothesis stopped the run): report that
            self.top_up_messages()
            self.drain()
            if not self.accepted:
                return
            check_invariants(self.sql, self.fx.stack, list(self.accepted), settled=True)
            dead = self.check_outcomes()
            # Invariant 4: every dead letter can be redriven, and succeeds once its cause
            # is gone (the fake model's transient failures are used up by then).
            for job_id in dead:
                resp = self.api("POST", f"/v1/jobs/{job_id}/redrive", self.accepted[job_id].tenant)
                assert resp.status_code == 202, resp.text
            if dead:
                self.top_up_messages()
                self.drain()
                check_invariants(self.sql, self.fx.stack, list(self.accepted), settled=True)
                self.check_outcomes()
        finally:
            if hasattr(self, "world"):
                self.world.close()


# --- the test ---------------------------------------------------------------------------


def test_random_operations_keep_the_invariants(stack: Stack, sql: Any) -> None:
    keys = {tenant: stack.key(tenant, name="state-machine") for tenant in TENANTS}
    admin_key = stack.key("operators", admin=True, name="state-machine-admin")
    with asyncio.Runner() as runner:
        JobsMachine.fx = Fixtures(stack, sql, keys, admin_key, runner)
        try:
            run_state_machine_as_test(
                JobsMachine,
                settings=hypothesis.settings(
                    max_examples=EXAMPLES,
                    stateful_step_count=STEPS,
                    deadline=None,
                    derandomize=True,
                    database=None,
                    phases=(hypothesis.Phase.explicit, hypothesis.Phase.generate),
                    suppress_health_check=[
                        hypothesis.HealthCheck.too_slow,
                        hypothesis.HealthCheck.data_too_large,
                    ],
                    report_multiple_bugs=False,
                ),
            )
        finally:
            del JobsMachine.fx
