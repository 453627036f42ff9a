"""Run an OpenAI Agents SDK ``agents.Agent`` inside a kind: every model response and
function tool call a recorded step, replayed (never repeated) after a crash or a
redelivery. Needs the extra: ``pip install 'tasklease[openai-agents]'``.

```python
from tasklease.openai_agents import durable_run, items_json

@kind("research.ask", timeout_seconds=300)
async def ask(ctx: JobContext[Deps], q: Question) -> list:
    result = await durable_run(ctx, agent, q.text, context=ctx.deps)
    return items_json(result)
```

docs/howto/openai-agents.md says what is recorded and how it compares with Temporal's
and DBOS's OpenAI Agents integrations.
"""

from app.integrations.openai_agents import NotifyApproval, durable_run, items_json

__all__ = ["NotifyApproval", "durable_run", "items_json"]
