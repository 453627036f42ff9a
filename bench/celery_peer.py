"""The Celery peer: acks_late, prefetch 1, N worker processes (``-c 1`` each), the same
no-op task, on the same SQS endpoint (through the same counting proxy) when kombu's SQS
transport imports (it needs pycurl), else on the local Redis; with --transport redis, on
the same Redis server as tasklease (database 15)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
from rich.console import Console

from app.stack.embedded import terminate
from bench.phases import progress
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


def run(
    stack: BenchStack, jobs: int, workers: int, clients: int, max_seconds: float = 60
) -> dict[str, Any]:
    """N tasks; the clock stops at the last ack, or at ``max_seconds`` (rate = tasks done / time)."""
    broker, desc = _broker(stack)
    if broker is None:
        err.print(f"[yellow]celery: SKIPPED:[/] {desc}")
        return {"skipped": desc, "jobs_per_s": None}
    queue = f"{stack.queue_name}-celery"
    env = {**os.environ, "BENCH_CELERY_BROKER": broker, "BENCH_CELERY_QUEUE": queue}
    os.environ.update({"BENCH_CELERY_BROKER": broker, "BENCH_CELERY_QUEUE": queue})
    if broker.startswith("redis://") and (not stack.on_redis or stack.redis is not None):
        # Database 15 of the local Redis, or of the embedded one: never a given server's.
        import redis

        redis.Redis.from_url(broker).flushdb()
    procs: list[subprocess.Popen[bytes]] = []
    logs = [stack.logs / f"celery-{i}.log" for i in range(workers)]
    try:
        for i in range(workers):
            fh = stack.log(f"celery-{i}")
            args = [sys.executable, "-m", "celery", "-A", "bench.celery_app", "worker"]
            args += ["-c", "1", "-l", "INFO", "-Q", queue, "-n", f"bench{i}@%h"]
            args += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
            procs.append(
                subprocess.Popen(  # noqa: S603 - our own interpreter
                    args, stdout=fh, stderr=fh, env=env, start_new_session=True
                )
            )
        deadline = time.monotonic() + 60
        while not all(b"ready." in p.read_bytes() for p in logs if p.exists()) or not all(
            p.exists() for p in logs
        ):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                return {
                    "skipped": f"celery workers did not start (logs {stack.logs})",
                    "jobs_per_s": None,
                }
            time.sleep(0.2)

        from bench.celery_app import app, noop

        with app.connection_for_write() as conn:  # warm the producer (creates the queue)
            noop.apply_async(connection=conn)
        time.sleep(1.0)
        while _remaining(stack, broker, queue):
            time.sleep(0.2)
        stack.reset_counts()
        with progress() as bar:
            task = bar.add_task("celery: tasks done", total=jobs, rate="")
            t0 = time.perf_counter()
            with ThreadPoolExecutor(clients) as pool:
                list(pool.map(lambda _: noop.apply_async(), range(jobs)))
            t_submit = time.perf_counter() - t0
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
        calls = stack.counts()["calls"] if broker.startswith("sqs://") or stack.on_redis else {}
        if stack.on_redis:
            for own in ("LLEN", "HLEN"):
                calls[own] = calls.get(own, 0) - polls
            calls = {k: v for k, v in calls.items() if v > 0}
    finally:
        terminate(procs, grace=10)
    ran = sum(p.read_bytes().count(b"succeeded in") for p in logs if p.exists())
    # Sends per task submitted; the rest per task done (the clock may stop before the end).
    per = {k: v / (jobs if k.startswith("SendMessage") else max(1, done)) for k, v in calls.items()}
    deletes = calls.get("DeleteMessage", 0) + calls.get("DeleteMessageBatch", 0)
    partial = bool(calls) and not stack.on_redis and deletes < done * 0.9
    if stack.on_redis:
        from bench import redis_counts

        return {
            "broker": desc,
            "jobs": jobs,
            "done": done,
            "capped": (
                f"stopped at {max_seconds:.0f} s with {done}/{jobs} done: rate = done / time"
                if done < jobs
                else None
            ),
            "workers": workers,
            "worker_args": "-c 1 (prefork), acks_late=True, worker_prefetch_multiplier=1",
            "tasks_run_by_workers": ran - 1,
            "elapsed_s": round(elapsed, 3),
            "jobs_per_s": round(done / elapsed, 1),
            "submit_per_s": round(jobs / t_submit, 1),
            "redis_commands": calls,
            "redis_commands_per_job": (
                redis_counts.per_job(calls, done, scripts=False) if calls else None
            ),
        }
    return {
        "broker": desc,
        "sqs_counts_partial": (
            f"only {deletes} deletes counted for {done} tasks run: some of kombu's requests "
            "went to the queue URL's host directly, around the counting proxy"
            if partial
            else None
        ),
        "jobs": jobs,
        "done": done,
        "capped": (
            f"stopped at {max_seconds:.0f} s with {done}/{jobs} done: rate = done / time"
            if done < jobs
            else None
        ),
        "workers": workers,
        "worker_args": "-c 1 (prefork), acks_late=True, worker_prefetch_multiplier=1",
        "tasks_run_by_workers": ran - 1,  # less the warm-up task
        "elapsed_s": round(elapsed, 3),
        "jobs_per_s": round(done / elapsed, 1),
        "submit_per_s": round(jobs / t_submit, 1),
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
