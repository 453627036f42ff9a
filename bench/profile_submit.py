"""The single-submission path alone, quicker than ``make bench``: the bench's stack,
the floor phase (bench/floor.py), and with ``--profile`` tasklease's API run under
pyinstrument while the same clients drive ``POST /v1/jobs`` (no worker running).

pyinstrument is not one of the project's dependencies; run it with::

    uv run --with pyinstrument python -m bench.profile_submit --jobs 1000 --profile
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from app.tools.stack import embedded
from app.tools.stack.stack import Process
from bench import floor
from bench.stack import BenchStack

err = Console(stderr=True)


def _profiled_api(stack: BenchStack, out: Path) -> tuple[Process, str]:
    """A second tasklease API, under pyinstrument's sampler (wall clock: the loop's idle
    wait shows as such), writing its text profile to ``out`` when it stops."""
    port = embedded.free_port()
    args = [sys.executable, "-m", "pyinstrument", "-r", "session", "-o", str(out)]
    args += ["-m", "app.cli", "api", "--port", str(port)]
    proc = Process("api-profiled", args, log_path=stack.logs / "api-profiled.log", env=stack.env)
    stack.procs.append(proc)
    url = f"http://127.0.0.1:{port}"
    embedded.wait_for_http(f"{url}/healthz", timeout=60, proc=proc)
    return proc, url


# Where a submission's time goes: (label, function, file ending), inclusive time.
PARTS = (
    ("the request, all of it (uvicorn's run_asgi)", "run_asgi", "httptools_impl.py"),
    (
        "  RequestBody middleware (size, media type, duplicate keys)",
        "__call__",
        "app/api/middleware.py",
    ),
    ("    its JSON parse for duplicate keys", "check", "app/api/middleware.py"),
    (
        "  FastAPI: dependencies and body validation",
        "solve_dependencies",
        "fastapi/dependencies/utils.py",
    ),
    ("    the API key (Submitter)", "_submitter", "app/api/security.py"),
    (
        "  FastAPI: response validation and serialization",
        "serialize_response",
        "fastapi/routing.py",
    ),
    ("  the route (create_job)", "create_job", "app/api/routes/jobs.py"),
    ("    tracing: the submit span", "request_span", "app/tracing.py"),
    ("    validation of the job (kind, payload, hash)", "validated", "app/services/submit.py"),
    ("    the INSERT statement (store.jobs.insert)", "insert", "app/store/jobs.py"),
    ("    metrics (submissions counter)", "count", "app/metrics.py"),
    ("    the outbox send after commit", "send_after_commit", "app/services/submit.py"),
    ("      SendMessageBatch (the transport)", "send_jobs", "app/transport/"),
    ("      the sent rows' UPDATE (record_sends)", "record_sends", "app/store/outbox.py"),
    ("    JobPublic.of (the answer's model)", "of", "app/api/schemas.py"),
    ("  logging (any logger call)", "_log", "logging/__init__.py"),
)


def summary(
    path: Path,
    parts: tuple[tuple[str, str, str], ...] = PARTS,
    within: tuple[str, str] = ("run_asgi", "httptools_impl.py"),
    per: int = 0,
) -> str:
    """The inclusive seconds of ``parts`` (shares of ``within``'s, and ms per item when
    ``per`` items were handled) and the top functions by self time under ``within``."""
    from pyinstrument.session import Session

    session = Session.load(path)
    root = session.root_frame()
    inclusive: dict[tuple[str, str], float] = {}
    own: dict[str, float] = {}

    def walk(frame: Any, path: frozenset[tuple[str, str]], serving: bool) -> None:
        key = (frame.function or "?", frame.file_path_short or "")
        serving = serving or (
            key[0] == within[0] and within[1] in key[1]
        )  # a request's (a job's), not start-up's
        if key not in path:
            inclusive[key] = inclusive.get(key, 0.0) + frame.time
        # pyinstrument's "[self]" leaves are their parent's own time.
        real = [c for c in frame.children if not c.function.startswith("[")]
        if serving:
            name = f"{key[0]}  {key[1]}:{frame.line_no}"
            own[name] = own.get(name, 0.0) + frame.time - sum(c.time for c in real)
        for child in real:
            walk(child, path | {key}, serving)

    if root is not None:
        walk(root, frozenset(), serving=False)
    total = (
        next(
            (t for (f, p), t in inclusive.items() if (f == within[0] and within[1] in p)),
            0.0,
        )
        or 1.0
    )
    lines = [f"profile: {session.duration:.2f} s wall, {session.cpu_time:.2f} s CPU"]
    for label, fn, where in parts:
        t = sum(v for (f, p), v in inclusive.items() if f == fn and where in p)
        each = f" {1000 * t / per:7.3f} ms" if per else ""
        lines.append(f"{t:7.3f} s {100 * t / total:5.1f}%{each}  {label}")
    lines.append(f"top functions by self time, under {within[0]}:")
    for name, t in sorted(own.items(), key=lambda kv: -kv[1])[:25]:
        lines.append(f"{t:7.3f} s  {name}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile_submit")
    p.add_argument("--jobs", type=int, default=500)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3, help="floor rounds (0: profile only)")
    p.add_argument("--profile", action="store_true", help="also profile the API (pyinstrument)")
    p.add_argument("--out", type=Path, default=Path(".tasklease/submit-profile.pyisession"))
    p.add_argument("--data-dir", type=Path, default=Path(".tasklease/bench"))
    args = p.parse_args(argv)
    stack = BenchStack("moto", args.data_dir, 2)
    try:
        stack.start_all()
        if args.rounds:
            result = asyncio.run(
                floor.run(stack, args.jobs, args.clients, args.workers, rounds=args.rounds)
            )
            print(
                json.dumps(
                    {k: v for k, v in result.items() if k not in ("floor", "tasklease_api_alone")},
                    indent=1,
                )
            )
            for k, v in floor.rows(result):
                print(f"{k}: {v}")
        if args.profile:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            proc, url = _profiled_api(stack, args.out)
            driven = asyncio.run(
                floor.drive(url, stack.api_headers, args.jobs, args.clients, "profiled API")
            )
            print(f"profiled API: {driven['req_per_s']} req/s (slowed by the sampler)")
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=30)
            print(summary(args.out))
            print(f"profile: {args.out} (pyinstrument --load {args.out} -r html: the tree)")
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
