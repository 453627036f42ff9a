"""A fake OpenAI-compatible model server (``POST /v1/chat/completions``), deterministic,
for an agent's tests and local runs: ``serve_in_thread()`` starts one in this process
(``.url`` is its base URL, ending in /v1); ``python -m app.tools.fakemodel`` serves one on
its own. Not in the Lambda package: a tool for tests and ``make run``.
"""

from app.tools.fakemodel import RunningServer, create_app, serve_in_thread

__all__ = ["RunningServer", "create_app", "serve_in_thread"]
