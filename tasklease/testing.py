"""Run a job kind in memory, without PostgreSQL or a queue, for its unit tests.

```python
from tasklease.testing import run_kind

run = await run_kind(summarize, {"doc_id": "D-1", "text": "A. B."}, crash_after_effect=1)
assert run.crashed_after == "summarize"  # attempt 1 died once effect 1 was recorded
assert run.replayed == ["summarize"]  # attempt 2 replayed it instead of running it again
```

``crash_after_effect=N`` kills the first attempt once its N-th effect is recorded;
``crash_inside_effect=N`` once the N-th effect's function returned but before its record
(that function runs again, as it would after a real crash there);
``crash_inside_stream=N`` once N chunks of a streamed answer are written. A kind that
waits ends the run with ``KindSuspended``: answer its callback, finish its children,
send it a message (``store.send(topic, body)``, for ``ctx.receive``) or advance the clock
on its ``store``, then ``resume`` it. What the kind published with
``ctx.set_state`` is ``run.state`` (key to value; ``store.state`` has the versions).
``deadline=`` or ``deadline_seconds=`` (default: the kind's) bound the whole run on the
store's clock: waits wake at it at the latest, and a run reaching it raises
``KindDeadlinePassed`` (the job dead-lettered by 'deadline', its children cancelled).
"""

from app.kinds.memory_deadline import KindDeadlinePassed
from app.kinds.memory_store import EffectStore, SimulatedCrash
from app.kinds.testing import KindRun, KindSuspended, run_kind

__all__ = [
    "EffectStore",
    "KindDeadlinePassed",
    "KindRun",
    "KindSuspended",
    "SimulatedCrash",
    "run_kind",
]
