"""The worker function's peak memory per kind (``make cost``; ``python -m bench.cost
--memory-only`` measures only this, into an existing figures file).

Lambda's ``Max Memory Used`` is the execution environment's resident memory, and the
Python runtime runs the handler in its own process: so each kind's figure is the peak
resident set (/proc's ``VmHWM``) of a fresh process that does what a worker
execution environment does: import ``handlers.worker`` (its settings read, as at a cold
start), then run backlog-sized batches of that kind's jobs through the handler. The
parent (bench/cost.py's stack and API) submits the jobs, receives the batches from the
real queue and deletes what the handler did not report failed; the child reads each
batch on stdin and answers on stdout, so nothing of the bench (boto3, moto, the API,
the bench package's stack tools) is in the process measured: the child is this file
run by path, importing only the standard library before ``handlers.worker``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


class Context:
    """What Lambda passes as ``context``: the parts the engine and Mangum read."""

    function_name = "tasklease-cost"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:tasklease-cost"
    memory_limit_in_mb = 1024
    log_group_name = "/aws/lambda/tasklease-cost"
    log_stream_name = "2026/01/01/[$LATEST]cost"

    def __init__(self, timeout_seconds: float = 300) -> None:
        self.aws_request_id = str(uuid.uuid4())
        self.deadline = time.monotonic() + timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.monotonic()) * 1000))


def _rss_mb() -> float:
    """This process's peak resident set so far: /proc's VmHWM (KiB), the high-water mark
    of this program's own memory. Not getrusage's ru_maxrss: Linux carries the forking
    parent's peak across exec into it, so a child of the bench would report the bench's."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError("/proc/self/status has no VmHWM: the peak memory is measured on Linux")


def child() -> int:
    """One worker execution environment: batches in on stdin (one JSON list of records a
    line), the handler's answer out on stdout; at end of input, the peaks."""
    started_mb = _rss_mb()
    # The answers go on a copy of stdout; the handler's own stdout (EMF lines) and logs
    # go to stderr, which the parent keeps in a file.
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    import importlib

    worker = importlib.import_module("handlers.worker")
    imported_mb = _rss_mb()
    invocations = 0
    for line in sys.stdin:
        records = json.loads(line)
        resp = worker.handler({"Records": records}, Context())
        invocations += 1
        answers.write(json.dumps({"batchItemFailures": resp["batchItemFailures"]}) + "\n")
    answers.write(
        json.dumps(
            {
                "interpreter_mb": started_mb,
                "after_import_mb": imported_mb,
                "peak_rss_mb": _rss_mb(),
                "invocations": invocations,
            }
        )
        + "\n"
    )
    answers.close()
    return 0


def measure(source: Any, jobs: int, max_messages: int) -> dict[str, Any]:
    """Drain ``jobs`` jobs already on the queue through a fresh worker process, batches
    of up to ``max_messages``; the child's peaks. ``source`` is bench/cost_lambda.py's
    EventSource (it receives and deletes, outside the process measured)."""
    with tempfile.TemporaryFile("w+") as logs:
        try:
            return _drive(source, jobs, max_messages, logs)
        except RuntimeError as exc:
            logs.seek(0)
            raise RuntimeError(f"{exc}; its output:\n{logs.read()[-3000:]}") from exc


def _drive(source: Any, jobs: int, max_messages: int, logs: Any) -> dict[str, Any]:
    proc = subprocess.Popen(  # noqa: S603 - this interpreter, this module
        # By path, not -m: the bench package (imported by -m) brings the stack's tools.
        [sys.executable, str(Path(__file__).resolve())],
        cwd=ROOT,
        env=dict(os.environ),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=logs,
        text=True,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        done, empty = 0, 0
        while done < jobs:
            records = source.receive(max_messages)
            if not records:
                empty += 1
                if empty > 15:
                    raise RuntimeError(f"the queue went quiet with {jobs - done} jobs left")
                continue
            proc.stdin.write(json.dumps(records) + "\n")
            proc.stdin.flush()
            answer = proc.stdout.readline()
            if not answer:
                raise RuntimeError("the worker process ended before answering its batch")
            failures = json.loads(answer)["batchItemFailures"]
            source.delete(records, failures)
            done += len(records) - len(failures)
        proc.stdin.close()
        last = proc.stdout.readline()
        if not last:
            raise RuntimeError("the worker process ended without its peaks")
        peaks: dict[str, Any] = json.loads(last)
    finally:
        if not proc.stdin.closed:
            proc.stdin.close()
        proc.wait(timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"the worker process exited {proc.returncode}")
    return {
        "jobs": jobs,
        "max_records_per_invocation": max_messages,
        **peaks,
        "method": "VmHWM of a fresh process: handlers.worker imported, the jobs run",
    }


if __name__ == "__main__":
    # Run by path: the repository, not bench/, is where imports are found.
    sys.path[0] = str(ROOT)
    sys.exit(child())
