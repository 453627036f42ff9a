"""The Python client (app/client) against a real API process and a real worker process,
sync and async: every method, the API's errors as exceptions with their status and
message, ``wait`` until finished or timed out, ``stream`` resumed across a dropped
connection (a TCP proxy closing it mid-stream) with no event repeated or skipped, and
``tasklease submit --wait`` as a user runs it. One API, one worker for the module."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import re
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from app import client
from tests.conftest import Stack
from tests.integration.test_api_waits import token_of

# What this module checks does not depend on the carrier: it runs on moto only.
pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]

SLOW = {"steps": 6, "seconds": 0.25}  # demo.sleep: six progress events over ~1.5 s


class Proxy:
    """A TCP proxy to the API whose connections the test can cut: a dropped link."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self.upstream = (host, int(port))
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.accepted = 0
        self.requests: list[bytes] = []  # each connection's first bytes: a request's head
        self.live: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.server.accept()
            except OSError:
                return
            up = socket.create_connection(self.upstream)
            with self.lock:
                self.accepted += 1
                self.live += [down, up]
            head = b""
            while b"\r\n\r\n" not in head and (more := down.recv(65536)):
                head += more
            self.requests.append(head)
            up.sendall(head)
            threading.Thread(target=self._pump, args=(down, up), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, down), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def drop(self) -> None:
        """Cut every open connection, as a restarted load balancer would."""
        with self.lock:
            live, self.live = self.live, []
        for s in live:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.server.close()
        self.drop()


@pytest.fixture(scope="module")
def api_url(module_stack: Stack) -> str:
    url = module_stack.api()
    module_stack.worker(concurrency=4)
    return url


@pytest.fixture(scope="module")
def key(module_stack: Stack) -> str:
    return module_stack.key("acme")


@pytest.fixture
def tl(api_url: str, key: str) -> Iterator[client.Client]:
    with client.Client(api_url, key, timeout=10) as c:
        yield c


@pytest.fixture
def proxy(api_url: str) -> Iterator[Proxy]:
    p = Proxy(api_url)
    yield p
    p.close()


# --- sync -------------------------------------------------------------------------


def test_submit_get_wait_and_a_batch(tl: client.Client) -> None:
    job = tl.submit("demo.sleep", {"steps": 2}, idempotency_key=f"k-{uuid.uuid4()}")
    assert isinstance(job, client.Job) and job.kind == "demo.sleep" and job.tenant == "acme"
    seen: list[client.StreamEvent] = []
    done = tl.wait(job.id, timeout=60, on_event=seen.append)
    assert done.state == client.JobState.SUCCEEDED and done.result["steps"] == 2
    assert [e.data["note"] for e in seen if e.type == "progress"] == ["step 1 of 2", "step 2 of 2"]
    assert isinstance(tl.get(job.id), client.JobDetail) and tl.get(job.id).children_count == 0

    jobs = tl.submit_many(
        [
            client.JobRequest(kind="demo.noop", payload={"n": 1}),
            {"kind": "demo.flaky", "payload": {"fail_attempts": 0}, "max_attempts": 2},
        ]
    )
    assert [j.kind for j in jobs] == ["demo.noop", "demo.flaky"]
    assert jobs[1].max_attempts == 2
    assert {tl.wait(j.id, timeout=60).state for j in jobs} == {client.JobState.SUCCEEDED}


def test_the_same_idempotency_key_gives_the_same_job(tl: client.Client) -> None:
    key = f"same-{uuid.uuid4()}"
    first = tl.submit("demo.noop", {}, idempotency_key=key)
    assert tl.submit("demo.noop", {}, idempotency_key=key).id == first.id
    with pytest.raises(client.Conflict) as caught:
        tl.submit("demo.noop", {"other": True}, idempotency_key=key)
    assert caught.value.status == 409 and "idempotency" in caught.value.message.lower()


def test_api_errors_carry_status_and_message(tl: client.Client, api_url: str) -> None:
    missing = uuid.uuid4()
    with pytest.raises(client.NotFound) as nf:
        tl.get(missing)
    assert nf.value.status == 404 and str(missing) in nf.value.message
    with pytest.raises(client.Unprocessable) as bad:
        tl.submit("demo.noop", {}, max_attempts=0)
    assert bad.value.status == 422 and "body.max_attempts" in bad.value.message
    assert "allowed" in bad.value.message
    with pytest.raises(client.Unprocessable, match=r"demo\.nope"):
        tl.submit("demo.nope", {})
    with client.Client(api_url, "tl_not_a_key") as stranger, pytest.raises(client.Unauthorized):
        stranger.get(missing)
    with pytest.raises(client.NotFound):
        tl.callbacks.complete("no-such-token", result=True)
    with pytest.raises(ValueError, match="exactly one"):
        tl.callbacks.complete("t", result=1, error="no")
    nowhere = client.Client("http://127.0.0.1:9", "k", timeout=2)
    with nowhere, pytest.raises(client.ConnectionLost, match=r"127\.0\.0\.1:9"):
        nowhere.get(missing)


def test_wait_times_out_naming_the_job_and_its_state_then_cancel(tl: client.Client) -> None:
    job = tl.submit("demo.nap", {"seconds": 3600})
    with pytest.raises(client.Timeout) as caught:
        tl.wait(job.id, timeout=1.5)
    assert caught.value.job_id == str(job.id)
    assert str(job.id) in str(caught.value) and caught.value.state in (
        "queued",
        "leased",
        "running",
        "waiting",
    )
    cancelled = tl.cancel(job.id)
    assert cancelled.state in (
        client.JobState.CANCELLED,
        client.JobState.RUNNING,
        client.JobState.LEASED,
        client.JobState.QUEUED,
    )
    assert tl.wait(job.id, timeout=60).state == client.JobState.CANCELLED
    with pytest.raises(client.Conflict) as again:
        tl.cancel(job.id)
    assert again.value.status == 409


def test_a_delayed_submission_waits_on_a_timer(tl: client.Client) -> None:
    an_hour = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    later = tl.submit("demo.noop", {}, run_at=an_hour)
    soon = tl.submit("demo.noop", {}, delay_seconds=3600)
    for job in (later, soon):
        assert job.state == client.JobState.WAITING
        assert job.waiting_for is not None and job.waiting_for.kind == "timer"
        assert tl.cancel(job.id).state == client.JobState.CANCELLED
    with pytest.raises(client.Unprocessable, match="not both"):
        tl.submit("demo.noop", {}, run_at=an_hour, delay_seconds=1)


def test_a_deadline_is_submitted_and_shown(tl: client.Client) -> None:
    a_day = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).replace(microsecond=0)
    job = tl.submit("demo.noop", {}, deadline=a_day)
    assert job.deadline == a_day and tl.get(job.id).deadline == a_day
    batch = tl.submit_many([{"kind": "demo.noop", "payload": {}, "deadline_seconds": 60}])
    assert batch[0].deadline is not None
    with pytest.raises(client.Unprocessable, match="deadline"):
        tl.submit("demo.noop", {}, deadline=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))


def test_a_callback_is_heartbeaten_and_completed(tl: client.Client, module_stack: Stack) -> None:
    job = tl.submit("demo.approval", {"timeout_seconds": 600})
    for event in tl.stream(job.id):
        if event.type == "transition" and event.data["to_state"] == "waiting":
            break
    token = token_of(module_stack, job.id)
    with client.Client(tl.http.base_url.__str__(), None) as party:  # the token is enough
        assert party.callbacks.heartbeat(token).deadline > job.created_at
        answered = party.callbacks.complete(token, result={"ok": True})
        assert answered.job_woken and answered.callback_state == "succeeded"
        assert answered.job_id == job.id
        # Issue 30 item 10: the old names still read, and say they are deprecated.
        with pytest.warns(DeprecationWarning, match="job_woken"):
            assert answered.woken is True
        with pytest.warns(DeprecationWarning, match="callback_state"):
            assert answered.state == "succeeded"
        with pytest.raises(client.Conflict):
            party.callbacks.complete(token, error="too late")
    done = tl.wait(job.id, timeout=60)
    assert done.state == client.JobState.SUCCEEDED and done.result["answer"] == {"ok": True}


def test_messages_are_sent_once_per_key_and_read_in_order_sync_and_async(
    tl: client.Client, api_url: str, key: str
) -> None:
    job = tl.submit("demo.chat", {"messages": 2})
    first = tl.send_message(job.id, "user", {"text": "hi"}, idempotency_key="m-1")
    again = tl.send_message(job.id, "user", {"text": "hi"}, idempotency_key="m-1")
    assert again.id == first.id and first.job_id == job.id

    async def send_async() -> client.MessageSent:
        async with client.AsyncClient(api_url, key, timeout=10) as atl:
            return await atl.send_message(job.id, "user", "bye")

    second = asyncio.run(send_async())
    done = tl.wait(job.id, timeout=60)
    assert [a["message"] for a in done.result["answers"]] == [first.id, second.id]
    assert [(m.body, m.consumed_at is not None) for m in tl.messages(job.id)] == [
        ({"text": "hi"}, True),
        ("bye", True),
    ]
    with pytest.raises(client.Conflict, match="is succeeded"):
        tl.send_message(job.id, "user", "too late")


def test_a_dead_letter_is_waited_for_and_redriven(
    tl: client.Client, api_url: str, module_stack: Stack
) -> None:
    job = tl.submit("demo.flaky", {"permanent": True})
    dead = tl.wait(job.id, timeout=60)
    assert dead.state == client.JobState.DEAD_LETTERED and "permanent" in (dead.last_error or "")
    with pytest.raises(client.Forbidden) as forbidden:
        tl.redrive(job.id, force=True)
    assert forbidden.value.status == 403 and "admin" in forbidden.value.message
    back = tl.redrive(job.id)
    assert back.redrives == 1 and back.state != client.JobState.DEAD_LETTERED
    admin = module_stack.key("ops", admin=True)
    with client.Client(api_url, admin) as ops:
        assert ops.wait(job.id, timeout=60).state == client.JobState.DEAD_LETTERED
        assert ops.redrive(job.id, force=True).redrives == 2


def test_a_dead_letter_is_rerun_and_a_finished_job_forked(tl: client.Client) -> None:
    dead = tl.wait(tl.submit("demo.flaky", {"permanent": True}).id, timeout=60)
    again = tl.rerun(dead.id, {"permanent": False, "fail_attempts": 0})
    assert again.rerun_of == dead.id
    assert tl.wait(again.id, timeout=60).state == client.JobState.SUCCEEDED
    assert [r.id for r in tl.get(dead.id).reruns] == [again.id]
    with pytest.raises(client.Unprocessable) as bad:
        tl.rerun(dead.id, {"permanent": "often"})
    assert "permanent" in bad.value.message

    done = tl.wait(tl.submit("demo.sleep", {"steps": 3}).id, timeout=60)
    fork = tl.fork(done.id, "step-2")
    assert (fork.forked_from, fork.fork_step, fork.inherited) == (
        done.id,
        "step-2",
        ["step-0", "step-1"],
    )
    assert tl.wait(fork.id, timeout=60).result == {"steps": 3, "replayed": 2}
    with pytest.raises(client.NotFound) as unknown:
        tl.fork(done.id, "step-9")
    assert "no step 'step-9'" in unknown.value.message


def full_stream(tl: client.Client, job_id: Any) -> list[str]:
    return [e.id for e in tl.stream(job_id)]


def test_a_stream_resumes_after_a_dropped_connection(
    tl: client.Client, proxy: Proxy, key: str
) -> None:
    job = tl.submit("demo.sleep", SLOW)
    got: list[client.StreamEvent] = []
    with client.Client(proxy.url, key, timeout=10) as through:
        for event in through.stream(job.id):
            got.append(event)
            if len(got) in (2, 5):  # cut the link twice, while the job still runs
                proxy.drop()
    assert proxy.accepted >= 3, "the proxy saw no reconnection"
    ids = [e.id for e in got]
    # Each reconnection asked for what follows the last event it had (not from the start;
    # that may be past the cut: what was in flight arrived before the link closed).
    asked = [re.search(rb"(?im)^last-event-id: (\S+)", r) for r in proxy.requests[1:]]
    assert all(asked), proxy.requests
    resumed_after = [ids.index(m.group(1).decode()) for m in asked if m]
    assert resumed_after[0] >= 1 and resumed_after[1] >= 4, resumed_after
    assert ids == full_stream(tl, job.id), "an event was repeated or skipped"
    assert got[-1].data["to_state"] == "succeeded"
    # Resuming after a given event id hands out the rest only.
    assert [e.id for e in tl.stream(job.id, after=ids[3])] == ids[4:]


def test_a_stream_of_another_tenants_job_is_not_found(
    tl: client.Client, api_url: str, module_stack: Stack
) -> None:
    job = tl.submit("demo.noop", {})
    other = client.Client(api_url, module_stack.key("other"))
    with other, pytest.raises(client.NotFound):
        list(other.stream(job.id))


# --- async ------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_the_async_client(api_url: str, key: str, proxy: Proxy, tl: client.Client) -> None:
    nap_key = uuid.uuid4().hex[:8]
    async with client.AsyncClient(api_url, key, timeout=10) as atl:
        job = await atl.submit("demo.sleep", SLOW, max_attempts=3, timeout_seconds=60)
        assert job.max_attempts == 3 and job.timeout_seconds == 60
        [a, b] = await atl.submit_many([{"kind": "demo.noop", "payload": {}}] * 2)
        assert a.id != b.id
        async with client.AsyncClient(proxy.url, key, timeout=10) as through:
            got = []
            async for event in through.stream(job.id):
                got.append(event.id)
                if len(got) == 3:
                    proxy.drop()
        assert proxy.accepted >= 2
        assert got == full_stream(tl, job.id)
        done = await atl.wait(job.id, timeout=60)
        assert done.state == client.JobState.SUCCEEDED and (await atl.get(job.id)).id == job.id
        with pytest.raises(client.Conflict):
            await atl.cancel(job.id)
        with pytest.raises(client.Conflict):
            await atl.redrive(job.id)
        with pytest.raises(client.NotFound) as nf:
            await atl.get(uuid.uuid4())
        assert nf.value.status == 404
        nap = await atl.submit("demo.nap", {"seconds": 3600}, key=f"k-{nap_key}")
        assert nap.key == f"k-{nap_key}" and not nap.dropped
        # Its key's active job answers a drop_new submission (nothing new is written).
        same = await atl.submit("demo.nap", {"seconds": 1}, key=nap.key, if_active="drop_new")
        assert same.dropped and same.id == nap.id
        with pytest.raises(client.Timeout, match=str(nap.id)):
            await atl.wait(nap.id, timeout=1)
        await atl.cancel(nap.id)
        with pytest.raises(client.NotFound):
            await atl.callbacks.heartbeat("no-such-token")


NOOP_PATH = [
    (None, "queued"),
    ("queued", "leased"),
    ("leased", "running"),
    ("running", "succeeded"),
]


@pytest.mark.asyncio
async def test_stream_all_follows_the_tenants_jobs_across_a_dropped_connection(
    api_url: str, key: str, proxy: Proxy, module_stack: Stack
) -> None:
    got: list[client.StreamEvent] = []

    def path(job_id: uuid.UUID) -> list[tuple[str | None, str]]:
        return [
            (e.data["from_state"], e.data["to_state"])
            for e in got
            if e.job_id == job_id and e.type == "transition"
        ]

    async def shown(done: Any, seconds: float) -> bool:
        for _ in range(int(seconds * 10)):
            if done():
                return True
            await asyncio.sleep(0.1)
        return False

    async with (
        client.AsyncClient(api_url, key, timeout=10) as atl,
        client.AsyncClient(api_url, module_stack.key("other"), timeout=10) as other,
        client.AsyncClient(proxy.url, key, timeout=10) as through,
    ):

        async def read() -> None:
            async for event in through.stream_all():
                got.append(event)

        reader = asyncio.create_task(read())
        try:
            # The stream starts "now" when it connects: submit until a job is seen whole.
            for _ in range(20):
                first = await atl.submit("demo.noop", {})
                if await shown(lambda job=first.id: path(job) == NOOP_PATH, 3):
                    break
            else:
                pytest.fail("stream_all showed none of 20 jobs whole")
            foreign = await other.submit("demo.noop", {})
            proxy.drop()  # cut the link between two jobs
            second = await atl.submit("demo.noop", {})
            assert await shown(lambda: path(second.id) == NOOP_PATH, 30), got
            assert (await other.wait(foreign.id, timeout=30)).state == client.JobState.SUCCEEDED
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
    assert proxy.accepted >= 2, "the proxy saw no reconnection"
    assert all(b"/v1/stream" in r for r in proxy.requests)
    assert re.search(rb"(?im)^last-event-id: \S+", proxy.requests[1]), proxy.requests[1]
    ids = [e.id for e in got]
    assert len(ids) == len(set(ids)), "an event was handed out twice"
    assert all(e.tenant == "acme" for e in got) and foreign.id not in {e.job_id for e in got}


def test_published_state_is_read_and_waited_for(tl: client.Client) -> None:
    job = tl.submit("demo.publish", {"steps": 3, "seconds": 0.3})
    first = tl.wait_state(job.id, "done", timeout=60)  # once set
    assert first.version >= 1 and first.value == first.version
    later = tl.wait_state(job.id, "done", after_version=first.version, timeout=60)
    assert later.version > first.version
    tl.wait(job.id, timeout=60)
    state = tl.state(job.id)
    assert {k: (v.value, v.version) for k, v in state.items()} == {
        "done": (3, 3),
        "phase": ("finished", 2),
    }
    changes = [(e.data["key"], e.data["version"]) for e in tl.stream(job.id) if e.type == "state"]
    assert changes == [("phase", 1), ("done", 1), ("done", 2), ("done", 3), ("phase", 2)]
    # A finished job: the key as it is (compare the version), or NotFound when unset.
    assert tl.wait_state(job.id, "done", after_version=9, timeout=60).version == 3
    with pytest.raises(client.NotFound, match="'never'"):
        tl.wait_state(job.id, "never", timeout=60)
    # An unfinished job: Timeout, naming the key.
    nap = tl.submit("demo.nap", {"seconds": 3600})
    with pytest.raises(client.Timeout, match="'never' unset"):
        tl.wait_state(nap.id, "never", timeout=0.5)
    tl.cancel(nap.id)


@pytest.mark.asyncio
async def test_the_async_client_reads_published_state(api_url: str, key: str) -> None:
    async with client.AsyncClient(api_url, key, timeout=10) as atl:
        job = await atl.submit("demo.publish", {"steps": 2})
        got = await atl.wait_state(job.id, "phase", after_version=1, timeout=60)
        assert (got.value, got.version) == ("finished", 2)
        assert (await atl.state(job.id))["done"].value == 2


# --- tasklease submit --wait --------------------------------------------------------


def cli(module_stack: Stack, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in module_stack.env.items() if not k.startswith("TASKLEASE_API_")}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "submit", *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=os.getcwd(),
    )


def test_submit_wait_prints_progress_and_the_result(
    module_stack: Stack, api_url: str, key: str
) -> None:
    env = {"TASKLEASE_API_URL": api_url, "TASKLEASE_API_KEY": key}
    ok = cli(module_stack, "demo.sleep", "--payload", '{"steps": 2}', "--wait", **env)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["steps"] == 2
    assert "step 2 of 2" in ok.stderr and "succeeded" in ok.stderr

    dead = cli(module_stack, "demo.flaky", "--payload", '{"permanent": true}', "--wait", **env)
    assert dead.returncode == 1 and dead.stdout == ""
    assert "dead_lettered" in dead.stderr and "permanent failure on purpose" in dead.stderr

    slow = cli(
        module_stack,
        "demo.nap",
        "--payload",
        '{"seconds": 3600}',
        "--wait",
        "--wait-timeout",
        "1",
        **env,
    )
    assert slow.returncode == 1 and "after 1 s" in slow.stderr

    bad = cli(
        module_stack,
        "demo.noop",
        "--max-attempts",
        "1",
        "--wait",
        **{**env, "TASKLEASE_API_KEY": "tl_wrong"},
    )
    assert bad.returncode == 1 and "401" in bad.stderr


def test_submit_wait_names_what_is_missing(module_stack: Stack, api_url: str) -> None:
    done = cli(module_stack, "demo.noop", "--wait", TASKLEASE_API_URL=api_url)
    assert done.returncode == 2
    assert "TASKLEASE_API_KEY" in done.stderr and "TASKLEASE_API_URL" not in done.stderr


def test_a_key_and_if_active_are_submitted_and_a_drop_or_replay_is_said(
    tl: client.Client,
) -> None:
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    payload = {"conversation": conversation, "text": "hi"}
    # An hour from now: the first job stays active (waiting on its timer) for the test.
    first = tl.submit("demo.converse", payload, delay_seconds=3600)
    assert first.key == conversation and not first.dropped and not first.replayed
    try:
        again = tl.submit("demo.converse", payload, if_active="drop_new")
        assert again.dropped and not again.replayed
        assert again.id == first.id, "answered with the key's active job"
        given = tl.submit("demo.noop", {}, key="k-given", delay_seconds=3600)
        assert given.key == "k-given" and tl.get(given.id).key == "k-given"
        tl.cancel(given.id)
        same = f"once-{uuid.uuid4().hex[:8]}"
        made = tl.submit("demo.noop", {}, idempotency_key=same)
        replay = tl.submit("demo.noop", {}, idempotency_key=same)
        assert (made.replayed, replay.replayed, replay.id) == (False, True, made.id)
        assert not replay.dropped
        batch = tl.submit_many(
            [
                client.JobRequest(kind="demo.converse", payload=payload, if_active="drop_new"),
                {"kind": "demo.noop", "payload": {}, "idempotency_key": same},
            ]
        )
        assert [(j.dropped, j.replayed) for j in batch] == [(True, False), (False, True)]
        assert batch[0].id == first.id and batch[1].id == made.id
        with pytest.raises(client.Conflict, match=str(first.id)):
            tl.submit("demo.converse", payload, if_active="reject")
    finally:
        tl.cancel(first.id)

    flows = {k.name: k.flow for k in tl.kinds()}
    converse = flows["demo.converse"]
    assert converse is not None and converse.keyed and converse.concurrency == 1
    sync = flows["demo.sync"]
    assert sync is not None and sync.rate is not None
    assert (sync.rate.limit, sync.rate.per_seconds) == (2, 1.0)
