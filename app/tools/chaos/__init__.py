"""``tasklease chaos``: the chaos gate (issue 3, docs/explain/design.md#invariants).

Starts a stack of its own in a fresh data directory (embedded PostgreSQL, moto's
SQS server or LocalStack, or an embedded Redis with --transport redis, webhook
receiver, API, K workers, sweeper), submits N jobs
through the API (``support.triage`` tickets, waiting work: naps, approvals the
harness answers once, twice or never, fan-outs, and agent runs: demo.agent and
demo.openai_agent, Pydantic AI and OpenAI Agents SDK agents over HTTP to the fake model
server, a process of the run's) while the fake
model injects transient
and permanent failures and some workers answer slower than the visibility
timeout, SIGKILLs a random worker every few seconds, restarts the SQS server once
(moto loses every message: a broker that drops messages), or Redis with its AOF and/or
without persistence (faults.py), and PostgreSQL once,
then drains, redrives the dead letters whose cause was transient (with that
cause gone), drains again, and checks the outcome the way Jepsen's queue checker
does: from the database, the fake model's call log and the webhook's deliveries,
every job per kind (children included), with no wait left stuck.
Exit code: 0 all invariants hold, 1 some do not, 3 a server could not start, 4 the run
could not complete (a fault could not be injected), 130 interrupted.

The package: config (settings, exit codes, the run's record), stack (the shared local
stack with killable worker slots), workload (tickets, waiting work, submitting
clients), answers (the approvals' outside party), agents (what an uninterrupted agent
run gives, the agent model's log), faults, recovery (what a carrier restart lost and
when it was made good), checker (also used by tests/invariants.py; per_kind and
per_agent hold its checks of each kind), report, and run (``main``, what
``tasklease chaos`` calls).
"""

from app.tools.chaos.config import (
    EXIT_ABORTED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_VIOLATED,
    Config,
)
from app.tools.chaos.run import main

__all__ = [
    "EXIT_ABORTED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_UNAVAILABLE",
    "EXIT_VIOLATED",
    "Config",
    "main",
]
