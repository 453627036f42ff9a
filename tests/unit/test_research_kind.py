"""agent.research through the in-memory runner (app.kinds.testing): the waits it
suspends on, in order; the children run here as the worker would run them; the clock
and the callback answered by the test. Replays must return what was recorded: no model
call, notice or post twice."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import pytest_asyncio

from app import errors, kinds
from app.demos.research import ResearchRequest, ResearchResult, research, subquery
from app.demos.triage import TriageDeps, providers
from app.demos.triage import settings as triage_settings
from app.kinds.memory_store import EffectStore
from app.kinds.testing import KindRun, run_kind
from app.kinds.waits import Wait

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("clean_env")]

HOOK = "http://hook.test/hook"
PAYLOAD: dict[str, Any] = {
    "topic": "durable timers",
    "approval_timeout_seconds": 600,
    "callback_base_url": "http://127.0.0.1:8000",
}


@dataclass
class Job:
    """One agent.research job in memory: its store, deps and the webhook's deliveries."""

    store: EffectStore = field(default_factory=EffectStore)
    job_id: uuid.UUID = field(default_factory=uuid.uuid4)
    posts: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (key, body)
    deps: TriageDeps | None = None

    def __post_init__(self) -> None:
        def hook(request: httpx.Request) -> httpx.Response:
            key = request.headers["idempotency-key"]
            self.posts.append((key, json.loads(request.content)))
            return httpx.Response(200, json={"ok": True})

        settings = triage_settings.load(fake_model_latency_ms=0)
        self.deps = TriageDeps(
            model=providers.FakeProvider(settings),
            http=httpx.AsyncClient(transport=httpx.MockTransport(hook)),
            webhook_url=HOOK,
        )

    async def run(self, payload: dict[str, Any] | None = None) -> KindRun[ResearchResult] | Wait:
        """One attempt: the job's result, or the wait it suspended on."""
        try:
            return await run_kind(
                research, payload or PAYLOAD, deps=self.deps, store=self.store, job_id=self.job_id
            )
        except errors.Suspend as suspended:
            wait: Wait = suspended.wait
            return wait

    async def run_children(self, *, fail: tuple[int, ...] = ()) -> None:
        """Run each spawned child (agent.subquery) to its end and record its outcome."""
        failing = set(fail)
        for i, (key, kind, payload) in enumerate(self.store.spawned):
            assert kind == "agent.subquery" and key == f"query-{i}"
            child = str(uuid.uuid5(self.job_id, key))
            if i in failing:
                self.store.finish_child(child, error="model refused (on purpose)")
                continue
            done = await run_kind(subquery, payload, deps=self.deps)
            self.store.finish_child(child, result=done.stored)

    def events(self) -> list[str]:
        return [body["event"] for _, body in self.posts]


@pytest_asyncio.fixture
async def job() -> Any:
    made = Job()
    yield made
    assert made.deps is not None
    await made.deps.http.aclose()


@pytest.mark.asyncio
async def test_happy_path_gathers_two_waits_for_approval_sleeps_then_posts_once(
    job: Job,
) -> None:
    wait = await job.run()
    assert isinstance(wait, Wait) and wait.kind == "children" and wait.rule is not None
    assert (wait.rule.need, wait.rule.tolerate, len(wait.rule.children)) == (2, 1, 3)
    assert [k for k, _, _ in job.store.spawned] == ["query-0", "query-1", "query-2"]

    await job.run_children()
    wait = await job.run()
    assert isinstance(wait, Wait) and wait.kind == "callback" and wait.key == "approve"
    assert wait.wake_at == job.store.clock + dt.timedelta(seconds=600)
    ((key, notice),) = job.posts
    assert key == f"{job.job_id}:notify:approve"
    token = f"memory-token:{job.job_id}:approve"
    assert notice["event"] == "approval_requested" and notice["token"] == token
    assert notice["approve_url"] == f"http://127.0.0.1:8000/v1/callbacks/{token}"
    assert notice["answer_with"] == {"result": {"approved": True}}
    assert "Research on durable timers: 3 of 3 sub-queries." in notice["summary"]

    # Woken early (another message): still waiting, the notice not sent again.
    assert isinstance(await job.run(), Wait) and len(job.posts) == 1

    job.store.answer("approve", result={"approved": True, "by": "ana"})
    wait = await job.run()
    assert isinstance(wait, Wait) and wait.kind == "timer" and wait.key == "quiet-hour"
    assert wait.wake_at == job.store.clock + dt.timedelta(seconds=5)  # the demo's default

    job.store.advance(5)
    done = await job.run()
    assert isinstance(done, KindRun)
    assert done.result.status == "posted" and done.result.approval == {
        "approved": True,
        "by": "ana",
    }
    assert (done.result.answered, done.result.failed) == (3, 0)
    assert job.events() == ["approval_requested", "published"]
    assert job.posts[1][0] == f"{job.job_id}:post"
    # The last run replayed every step before the post; nothing ran twice.
    assert done.ran == ["post"]
    assert set(done.replayed) >= {
        "draft-text",
        "callback:approve",
        "notify:approve",
        "gather:answers",
    }


@pytest.mark.asyncio
async def test_no_approval_before_the_timeout_escalates_and_ends_saying_so(job: Job) -> None:
    await job.run()
    await job.run_children()
    assert isinstance(await job.run(), Wait)
    job.store.advance(600)
    done = await job.run()
    assert isinstance(done, KindRun)
    assert done.result.status == "escalated" and done.result.posted_at is None
    assert job.events() == ["approval_requested", "escalated"]
    assert job.posts[1][1]["reason"] == "no approval within 600 s"
    assert "escalate" in done.effects and "post" not in done.effects
    # A late answer changes nothing: the callback timed out.
    job.store.answer("approve", result={"approved": True})
    again = await job.run()
    assert isinstance(again, KindRun) and again.result.status == "escalated"
    assert again.ran == [] and len(job.posts) == 2


@pytest.mark.asyncio
async def test_one_sub_query_failing_is_tolerated(job: Job) -> None:
    await job.run()
    await job.run_children(fail=(1,))
    assert isinstance(await job.run(), Wait)
    job.store.answer("approve", result={"approved": True})
    await job.run()
    job.store.advance(5)
    done = await job.run()
    assert isinstance(done, KindRun) and done.result.status == "posted"
    assert (done.result.answered, done.result.failed) == (2, 1)
    assert "2 of 3 sub-queries" in done.result.summary


@pytest.mark.asyncio
async def test_two_sub_queries_failing_fail_the_job_for_good(job: Job) -> None:
    await job.run()
    await job.run_children(fail=(0, 2))
    with pytest.raises(errors.PermanentError, match=r"gather 'answers': 2 of 3 children failed"):
        await job.run()
    assert job.posts == []


@pytest.mark.asyncio
async def test_a_fake_model_refusal_fails_the_child_kind_for_good(job: Job) -> None:
    with pytest.raises(errors.PermanentError):
        await run_kind(subquery, {"topic": "t", "query": "[permanent] q"}, deps=job.deps)


@pytest.mark.asyncio
async def test_an_answer_that_does_not_approve_ends_rejected_without_posting(job: Job) -> None:
    await job.run()
    await job.run_children()
    await job.run()
    job.store.answer("approve", result={"approved": False, "why": "too vague"})
    done = await job.run()
    assert isinstance(done, KindRun) and done.result.status == "rejected"
    assert done.result.approval == {"approved": False, "why": "too vague"}
    assert job.events() == ["approval_requested"]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("crash", "notices"), [("crash_after_effect", 1), ("crash_inside_effect", 2)]
)
async def test_a_crash_at_the_notice_replays_it_or_sends_it_again_under_one_key(
    job: Job, crash: str, notices: int
) -> None:
    """Died once the notice was recorded: the next attempt replays it. Died after the
    webhook took it but before the record: it is sent again (at least once), under the
    same Idempotency-Key, with the same token."""
    await job.run()
    await job.run_children()
    # recorded so far: 3 spawns and the gather; then draft, callback:approve, notify:approve
    with pytest.raises(errors.Suspend) as suspended:
        await run_kind(
            research, PAYLOAD, deps=job.deps, store=job.store, job_id=job.job_id, **{crash: 7}
        )
    assert suspended.value.wait.kind == "callback"
    assert list(job.store.records)[-1] == "notify:approve"
    assert len(job.posts) == notices
    assert {key for key, _ in job.posts} == {f"{job.job_id}:notify:approve"}
    assert len({body["token"] for _, body in job.posts}) == 1


@pytest.mark.asyncio
async def test_the_quiet_hour_is_the_next_one_in_the_payload_s_time_zone(job: Job) -> None:
    job.store.clock = dt.datetime(2026, 1, 1, 12, 30, tzinfo=dt.UTC)  # 13:30 in Paris
    payload = {**PAYLOAD, "quiet_hour": 3, "timezone": "Europe/Paris"}
    await job.run(payload)
    await job.run_children()
    await job.run(payload)
    job.store.answer("approve", result={"approved": True})
    wait = await job.run(payload)
    assert isinstance(wait, Wait) and wait.kind == "timer"
    assert wait.wake_at == dt.datetime(2026, 1, 2, 2, 0, tzinfo=dt.UTC)  # 03:00 Paris
    job.store.advance(3600)
    assert isinstance(await job.run(payload), Wait)  # not due yet: still waiting
    job.store.clock = dt.datetime(2026, 1, 2, 2, 0, tzinfo=dt.UTC)
    done = await job.run(payload)
    assert isinstance(done, KindRun) and done.result.status == "posted"


@pytest.mark.parametrize(
    ("payload", "names"),
    [
        ({}, "payload.topic: Field required"),
        ({"topic": "x", "queries": ["a", "b"]}, "payload.queries: List should have at least 3"),
        ({"topic": "x", "queries": ["a", " ", "c"]}, "query 1 must be 1 to 500 characters"),
        ({"topic": "x", "timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"topic": "x", "quiet_hour": 24}, "payload.quiet_hour: Input should be less than"),
        ({"topic": "x", "approval_timeout_seconds": 0}, "payload.approval_timeout_seconds"),
        ({"topic": "x", "callback_base_url": "ftp://x"}, "payload.callback_base_url"),
        ({"topic": "x", "colour": "red"}, "payload.colour: Extra inputs are not permitted"),
    ],
)
def test_a_bad_payload_is_a_bad_request_naming_the_field(payload: Any, names: str) -> None:
    with pytest.raises(errors.BadRequest) as e:
        kinds.get("agent.research").parse(payload)
    assert "invalid payload for kind 'agent.research'" in str(e.value)
    assert names in str(e.value)


def test_both_kinds_are_built_ins_sharing_triage_s_deps() -> None:
    assert kinds.get("agent.research") is research and kinds.get("agent.subquery") is subquery
    assert research.deps is subquery.deps is kinds.get("support.triage").deps
    assert ResearchRequest(topic="t").sub_queries()[2] == "t: open questions"
