"""Run a ``pydantic_ai.Agent`` inside a kind: every model request and tool call a recorded
step, replayed (never repeated) after a crash or a redelivery. Needs the extra:
``pip install 'tasklease[pydantic-ai]'``.

```python
from tasklease.pydantic_ai import TaskleaseAgent

durable = TaskleaseAgent(agent)

@kind("research.ask", timeout_seconds=300)
async def ask(ctx: JobContext[Deps], q: Question) -> str:
    return (await durable.run(ctx, q.text, deps=ctx.deps)).output
```

docs/howto/pydantic-ai.md says what is recorded and how it compares with Pydantic AI's
Temporal and DBOS backends.
"""

from app.integrations.pydantic_ai import TaskleaseAgent, messages_from_json, messages_json

__all__ = ["TaskleaseAgent", "messages_from_json", "messages_json"]
