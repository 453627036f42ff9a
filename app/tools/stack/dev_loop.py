"""``tasklease dev`` once its stack is up: the demo jobs and their table, then serving
until Ctrl-C, following the research job's approval and, with ``--reload``, restarting
the processes that load the kinds when their files change."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.markup import escape

from app.tools.stack import state
from app.tools.stack.demo import Approval, Follow, console, submit_demo, watch

if TYPE_CHECKING:
    from app.tools.stack.dev import DevStack
    from app.tools.stack.reload import KindWatcher


def run(
    stack: DevStack, *, demo: bool, exit_when_done: bool, watcher: KindWatcher | None = None
) -> int:
    approval: Approval | None = None
    if demo:
        ids, research = submit_demo(stack)
        console.print(
            f"submitted {len(ids)} support.triage jobs and 1 agent.research job "
            "(it fans out 3 child jobs, then waits for approval) through POST /v1/jobs",
            soft_wrap=True,
        )
        approval = Approval(stack, research, answer_it=exit_when_done)
        if not watch(stack, [*ids, research], approval):
            dead = stack.check()
            console.print(
                f"[red]the demo jobs did not settle[/]{' (exited: ' + ', '.join(dead) + ')' if dead else ''}"
            )
            return 1
        console.print(
            "[green]all demo jobs settled.[/] One retried after a transient model failure; "
            "one was dead-lettered (see [bold]tasklease jobs list --state dead_lettered[/]); "
            + (
                "the research job was approved, slept until its quiet hour and posted."
                if exit_when_done
                else "the research job waits for approval (the lines above answer it)."
            ),
            soft_wrap=True,
        )
    elif stack.wait_for_workers():
        console.print(f"[green]✓[/] {stack.workers} worker processes polling the queue")
    elif not stack.check():
        ready, started = stack.polling()
        console.print(
            f"[yellow]{ready}/{started} workers poll the queue after 120 s[/] "
            f"(logs in {escape(str(stack.logs_dir))})"
        )
    if exit_when_done:
        return 0
    console.print(
        f"\nAPI {stack.api_url}   OpenAPI docs {stack.api_url}/docs   — Ctrl-C to stop",
        soft_wrap=True,
    )
    cli = state.cli_name()
    console.print(
        f'another shell:  eval "$({cli} env)"   then   {cli} jobs list\n'
        '                curl -s $TASKLEASE_API_URL/v1/jobs -H "Authorization: Bearer $TASKLEASE_API_KEY"',
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    follow = Follow(stack, approval.job_id) if approval is not None else None
    while True:
        if follow is not None:
            follow.poll()
        changed = watcher.changed() if watcher is not None else []
        if changed:
            stack.reload(changed)
        dead = stack.check()
        if dead:
            console.print(
                f"[red]exited unexpectedly: {', '.join(dead)}[/] (logs in {escape(str(stack.logs_dir))})"
            )
            return 1
        time.sleep(1)
