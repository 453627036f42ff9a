"""The Python client for the tasklease HTTP API, sync and async (httpx).

```python
from tasklease.client import Client

with Client("http://127.0.0.1:8000", api_key) as tl:
    job = tl.submit("hello.greet", {"name": "Ada"})
    for event in tl.stream(job.id):
        print(event.type, event.data)
    done = tl.wait(job.id, timeout=60)
```

Importing it loads only httpx, httpx-sse, pydantic and the standard library: none of
the server's dependencies (FastAPI, psycopg, boto3), so a caller needs none of them.
"""

from app.client import (
    FINISHED,
    APIError,
    AsyncCallbacks,
    AsyncClient,
    BadRequest,
    Callbacks,
    Child,
    Client,
    Conflict,
    ConnectionLost,
    Forbidden,
    Fork,
    Job,
    JobDetail,
    JobRequest,
    JobState,
    KeyStatus,
    KindFlow,
    KindInfo,
    KindRate,
    Message,
    MessageSent,
    NotFound,
    PayloadTooLarge,
    Priority,
    RateLimited,
    Rerun,
    StateValue,
    StreamEvent,
    StreamPage,
    Submitted,
    TaskleaseError,
    Timeout,
    Unauthorized,
    Unavailable,
    Unprocessable,
    WorkerInfo,
)

__all__ = [
    "FINISHED",
    "APIError",
    "AsyncCallbacks",
    "AsyncClient",
    "BadRequest",
    "Callbacks",
    "Child",
    "Client",
    "Conflict",
    "ConnectionLost",
    "Forbidden",
    "Fork",
    "Job",
    "JobDetail",
    "JobRequest",
    "JobState",
    "KeyStatus",
    "KindFlow",
    "KindInfo",
    "KindRate",
    "Message",
    "MessageSent",
    "NotFound",
    "PayloadTooLarge",
    "Priority",
    "RateLimited",
    "Rerun",
    "StateValue",
    "StreamEvent",
    "StreamPage",
    "Submitted",
    "TaskleaseError",
    "Timeout",
    "Unauthorized",
    "Unavailable",
    "Unprocessable",
    "WorkerInfo",
]
