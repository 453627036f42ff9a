"""A fake OpenAI-compatible model server for tests and ``make run``: deterministic
answers to ``POST /v1/chat/completions`` over real HTTP, so an agent framework's own
client (Pydantic AI's ``OpenAIChatModel``, the ``openai`` SDK) talks to it unchanged.

- A request that offers tools it has not called yet in this conversation is answered
  with a call to the next one, its arguments built from the tool's JSON schema;
  otherwise with a final text that quotes every tool's result.
- Every answer reports ``usage``; ``stream: true`` is answered as server-sent events,
  the usage in a last chunk if ``stream_options.include_usage`` asks for it (as OpenAI's).
- ``GET /v1/requests`` lists the requests answered (each with a digest of its messages,
  its time, its turn: the assistant messages before it, and its ``X-Tasklease-Job``
  header), so a test sees whether one was sent twice; ``POST /v1/throttle {"next": N}`` answers
  the next N requests with a 429 and Retry-After.

``python -m app.tools.fakemodel --port 8089`` serves it; ``serve_in_thread()`` starts one
in this process. A tool beside the runtime: never in the Lambda package.
"""

from app.tools.fakemodel.answers import answer
from app.tools.fakemodel.server import RunningServer, create_app, serve_in_thread

__all__ = ["RunningServer", "answer", "create_app", "serve_in_thread"]
