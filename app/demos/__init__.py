"""The demo kinds, loaded like any user's kinds: ``TASKLEASE_KINDS=app.demos`` (``make
run``, the chaos gate, the bench and the tests name it). They are examples of what a
kind can do, not part of tasklease: a deployment that does not name them has none of
them.

- ``app.demos.basic``: demo.noop, demo.sleep, demo.flaky, demo.nap, demo.fanout,
  demo.approval (timers, callbacks, children), demo.publish (published state);
- ``app.demos.chat``: demo.chat (messages to a running job, ``ctx.receive``);
- ``app.demos.triage``: support.triage (a model call and a webhook, two effects);
- ``app.demos.research``: agent.research and agent.subquery (an agent that fans out,
  waits for a person and a timer);
- ``app.demos.writer``: demo.write (streamed model output, continued after a crash);
- ``app.demos.flow``: demo.converse, demo.reindex, demo.sync (flow control by key: one
  run per conversation, a debounce, a rate per key), demo.turn (one at a time per key, a
  no-op: the bench's keyed phase).

Not imported here: ``app.demos.revised_v1`` and ``app.demos.revised_v2``, demo.revised in
two versions (a process names the one it serves; the chaos gate deploys the second
half-way through its faults).
"""

# The kinds by value (the registry finds Kind objects among a module's names); the
# submodules keep their own names, so ``app.demos.triage`` stays the module.
from app.demos import basic, chat, flow, research, triage, writer
from app.demos.basic import approval, fanout, flaky, nap, noop, publish, sleep
from app.demos.chat import chat as chat_kind
from app.demos.flow import converse, reindex, sync, turn
from app.demos.research import research as research_kind
from app.demos.research import subquery
from app.demos.triage import triage as triage_kind
from app.demos.writer import write

__all__ = [
    "approval",
    "basic",
    "chat",
    "chat_kind",
    "converse",
    "fanout",
    "flaky",
    "flow",
    "nap",
    "noop",
    "publish",
    "reindex",
    "research",
    "research_kind",
    "sleep",
    "subquery",
    "sync",
    "triage",
    "triage_kind",
    "turn",
    "write",
    "writer",
]
