"""The Celery peer, in two profiles (bench/celery_app.py): ``strict`` (acks_late, prefetch 1,
N worker processes with ``-c 1``) and ``recommended`` (acks_late, prefetch multiplier 64,
``-c`` = CPUs, as Celery's docs advise for short tasks); the same no-op task, on the same
SQS endpoint (through the same counting proxy) when kombu's SQS transport imports (it needs
pycurl), else on the local Redis; with --transport redis, on the same Redis server as
tasklease (database 15)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
from rich.console import Console

from app.tools.stack.embedded import terminate
from bench import cost_per_job
from bench.cpu_meter import SELF, CpuMeter, peer_groups
from bench.measure import progress
from bench.stack import BenchStack

err = Console(stderr=True)


def _broker(stack: BenchStack) -> tuple[str, str] | tuple[None, str]:
    if stack.on_redis:
        parts = urllib.parse.urlsplit(stack.redis_url)
        url = urllib.parse.urlunsplit(parts._replace(path="/15"))
        return url, f"Redis (the same server as tasklease's, database 15: {url})"
    try:
        import kombu.transport.SQS  # noqa: F401
        import pycurl  # noqa: F401
    except ImportError as exc:
        why = f"kombu's SQS transport does not import ({exc})"
    else:
        host_port = stack.proxy_url.removeprefix("http://")
        return f"sqs://test:test@{host_port}", f"SQS ({stack.sqs}, through the counting proxy)"
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=1):
            return "redis://127.0.0.1:6379/15", f"Redis at 127.0.0.1:6379 ({why})"
    except OSError:
        return None, f"{why}, and no Redis answers at 127.0.0.1:6379"


def _remaining(stack: BenchStack, broker: str, queue: str) -> int:
    if broker.startswith("sqs://"):
        sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=stack.endpoint)
        url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
        a = sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(a["ApproximateNumberOfMessages"]) + int(
            a["ApproximateNumberOfMessagesNotVisible"]
        )
    import redis

    r = redis.Redis.from_url(broker)
    return int(r.llen(queue)) + int(r.hlen("unacked"))


def _start_workers(
    stack: BenchStack, env: dict[str, str], workers: int, concurrency: int, tag: str
) -> tuple[list[subprocess.Popen[bytes]], list[Path]] | str:
    """N ``celery worker`` processes with ``-c concurrency``, once all say ready (or why not)."""
    procs: list[subprocess.Popen[bytes]] = []
    logs = [stack.logs / f"celery-{tag}-{i}.log" for i in range(workers)]
    for i in range(workers):
        fh = stack.log(f"celery-{tag}-{i}")
        args = [sys.executable, "-m", "celery", "-A", "bench.celery_app", "worker"]
        args += ["-c", str(concurrency), "-l", "INFO", "-Q", env["BENCH_CELERY_QUEUE"]]
        args += ["-n", f"bench-{tag}{i}@%h"]
        args += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        procs.append(
            subprocess.Popen(  # noqa: S603 - our own interpreter
                args, stdout=fh, stderr=fh, env=env, start_new_session=True
            )
        )
    deadline = time.monotonic() + 60
    while not all(p.exists() and b"ready." in p.read_bytes() for p in logs):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            terminate(procs, grace=10)
            return f"celery workers did not start (logs {stack.logs})"
        time.sleep(0.2)
    return procs, logs


def _latency(sent: dict[str, float], done_log: Path) -> dict[str, float | None]:
    """Each task's finish (task_postrun, in the worker) less the time it was sent."""
    done: dict[str, float] = {}
    if done_log.exists():
        for line in done_log.read_text().splitlines():
            tid, _, at = line.partition(" ")
            done.setdefault(tid, float(at))
    ms = sorted((done[t] - s) * 1000 for t, s in sent.items() if t in done)
    if not ms:
        return {"p50": None, "p95": None, "p99": None}
    return {k: round(ms[min(len(ms) - 1, int(q * len(ms)))], 1) for k, q in PCT.items()}


PCT = {"p50": 0.5, "p95": 0.95, "p99": 0.99}


def run(
    stack: BenchStack,
    jobs: int,
    workers: int,
    clients: int,
    max_seconds: float = 60,
    profile: str = "strict",
) -> dict[str, Any]:
    """N tasks; the clock stops at the last ack, or at ``max_seconds`` (rate = tasks done / time)."""
    broker, desc = _broker(stack)
    if broker is None:
        err.print(f"[yellow]celery: SKIPPED:[/] {desc}")
        return {"skipped": desc, "jobs_per_s": None}
    queue = f"{stack.queue_name}-celery-{profile}"
    done_log = stack.logs / f"celery-{profile}-done.txt"
    own = {
        "BENCH_CELERY_BROKER": broker,
        "BENCH_CELERY_QUEUE": queue,
        "BENCH_CELERY_PROFILE": profile,
        "BENCH_CELERY_DONE_LOG": str(done_log),
    }
    env = {**os.environ, **own}
    os.environ.update(own)
    from bench import celery_app

    concurrency = celery_app.PROFILES[profile]["concurrency"]
    config = celery_app.settings(profile)
    # The producer in this process: the profile's settings, the new queue.
    celery_app.app.conf.update(
        task_default_queue=queue,
        worker_prefetch_multiplier=celery_app.PROFILES[profile]["worker_prefetch_multiplier"],
    )
    if broker.startswith("redis://") and (not stack.on_redis or stack.redis is not None):
        # Database 15 of the local Redis, or of the embedded one: never a given server's.
        import redis

        redis.Redis.from_url(broker).flushdb()
    started = _start_workers(stack, env, workers, concurrency, profile)
    if isinstance(started, str):
        return {"skipped": started, "jobs_per_s": None, "config": config}
    procs, logs = started
    try:
        noop = celery_app.noop
        with celery_app.app.connection_for_write() as conn:  # warm the producer (creates the queue)
            noop.apply_async(connection=conn, queue=queue)
        time.sleep(1.0)
        while _remaining(stack, broker, queue):
            time.sleep(0.2)
        stack.reset_counts()
        counted = broker.startswith("sqs://") or stack.on_redis  # the stack's own server
        groups = {"workers": [p.pid for p in procs], **peer_groups(stack)}
        if not counted:
            groups.pop("broker_server")
        groups.pop("pg_server")  # Celery uses no PostgreSQL
        meter = CpuMeter(groups).start()
        sent: dict[str, float] = {}

        def send(_: int) -> None:
            t = time.time()
            sent[noop.apply_async(queue=queue).id] = t

        with progress() as bar:
            task = bar.add_task(f"celery {profile}: done", total=jobs, rate="")
            t0 = time.perf_counter()
            producer = CpuMeter({"producer": [SELF]}).start()
            with ThreadPoolExecutor(clients) as pool:
                list(pool.map(send, range(jobs)))
            t_submit = time.perf_counter() - t0
            sending = producer.ms_per_job(jobs)
            polls = 0  # our LLEN + HLEN each: left out of the Redis counts
            while True:
                left = _remaining(stack, broker, queue)
                polls += 1
                done = jobs - left
                el = time.perf_counter() - t0
                bar.update(task, completed=done, rate=f"{done / el:7.1f} jobs/s")
                if left == 0 or el > max_seconds:
                    break
                time.sleep(0.1)
            elapsed = time.perf_counter() - t0
            done = jobs - left
        calls = stack.counts()["calls"] if counted else {}
        cpu_ms = meter.ms_per_job(max(1, done)) | {"producer_cpu_ms": sending["producer_cpu_ms"]}
        if stack.on_redis:
            for own_cmd in ("LLEN", "HLEN"):
                calls[own_cmd] = calls.get(own_cmd, 0) - polls
            calls = {k: v for k, v in calls.items() if v > 0}
    finally:
        terminate(procs, grace=10)
    ran = sum(p.read_bytes().count(b"succeeded in") for p in logs if p.exists())
    result: dict[str, Any] = {
        "profile": profile,
        "config": config,
        "broker": desc,
        "jobs": jobs,
        "done": done,
        "capped": (
            f"stopped at {max_seconds:.0f} s with {done}/{jobs} done: rate = done / time"
            if done < jobs
            else None
        ),
        "workers": workers,
        "worker_args": f"{workers} x celery worker -c {concurrency} (prefork)",
        "tasks_run_by_workers": ran - 1,  # less the warm-up task
        "elapsed_s": round(elapsed, 3),
        "jobs_per_s": round(done / elapsed, 1),
        "submit_per_s": round(jobs / t_submit, 1),
        "latency_ms": _latency(sent, done_log),
        # Sends per task sent, the rest per task done; no PostgreSQL (0). The SQS server's
        # CPU includes the benchmark's own depth polls (2 requests every 0.1 s).
        "cost_per_job": cost_per_job.measured(
            cpu_ms | {"pg_server_cpu_ms": 0.0},
            0.0,
            max(1, done),
            producer="producer",
            producer_jobs=jobs,
        ),
    }
    return result | _counts(stack, calls, jobs, done)


def _counts(stack: BenchStack, calls: dict[str, int], jobs: int, done: int) -> dict[str, Any]:
    """The broker requests (SQS) or commands (Redis) per job."""
    if stack.on_redis:
        from bench import redis_counts

        return {
            "redis_commands": calls,
            "redis_commands_per_job": (
                redis_counts.per_job(calls, done, scripts=False) if calls else None
            ),
        }
    # Sends per task submitted; the rest per task done (the clock may stop before the end).
    per = {k: v / (jobs if k.startswith("SendMessage") else max(1, done)) for k, v in calls.items()}
    deletes = calls.get("DeleteMessage", 0) + calls.get("DeleteMessageBatch", 0)
    partial = bool(calls) and deletes < done * 0.9
    return {
        "sqs_counts_partial": (
            f"only {deletes} deletes counted for {done} tasks run: some of kombu's requests "
            "went to the queue URL's host directly, around the counting proxy"
            if partial
            else None
        ),
        "sqs_requests": calls,  # raw counts
        "sqs_requests_per_job": (
            {
                "by_action": {k: round(per[k], 3) for k in sorted(per)},
                "total": round(sum(v for k, v in per.items() if k != "ReceiveMessage(empty)"), 3),
            }
            if calls
            else None
        ),
    }


def run_both(
    stack: BenchStack, jobs: int, workers: int, clients: int, max_seconds: float = 60
) -> dict[str, dict[str, Any]]:
    """The strict profile (today's) and the recommended one, one after the other."""
    return {
        p: run(stack, jobs, workers, clients, max_seconds, p) for p in ("strict", "recommended")
    }
