"""A typed client for the tasklease HTTP API, sync and async (httpx). It imports nothing
of the server: only httpx, httpx-sse, pydantic and the standard library (.importlinter).

    from app.client import Client

    with Client("http://127.0.0.1:8000", api_key) as tl:
        job = tl.submit("support.triage", {"ticket_id": "T-1", ...})
        for event in tl.stream(job.id):
            print(event.type, event.data)
        done = tl.wait(job.id, timeout=60)
"""

from app.client.async_clients import AsyncCallbacks, AsyncClient
from app.client.clients import Callbacks, Client
from app.client.errors import (
    APIError,
    BadRequest,
    Conflict,
    ConnectionLost,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    TaskleaseError,
    Timeout,
    Unauthorized,
    Unavailable,
    Unprocessable,
)
from app.client.models import (
    FINISHED,
    Child,
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
    Priority,
    Rerun,
    StateValue,
    StreamEvent,
    StreamPage,
    Submitted,
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
