"""What the client raises: one root, an API answer's status and message as an
``APIError`` subclass per status, and the client's own ``Timeout``."""

from __future__ import annotations

from typing import Any


class TaskleaseError(Exception):
    """A tasklease client call failed."""


class APIError(TaskleaseError):
    """The API answered with an error: its status, its message (the problem body's
    ``detail``) and the body as it came."""

    status: int = 0

    def __init__(self, status: int, message: str, body: Any = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.body = body


class BadRequest(APIError):
    """400: a body that is not JSON, or ambiguous credentials."""


class Unauthorized(APIError):
    """401: no valid API key."""


class Forbidden(APIError):
    """403: the key may not do this (an admin key's action, another tenant)."""


class NotFound(APIError):
    """404: no such job (or another tenant's), no such callback."""


class Conflict(APIError):
    """409: the job's state forbids it, a reused idempotency key, an answered callback."""


class PayloadTooLarge(APIError):
    """413: the body is over the API's limit."""


class Unprocessable(APIError):
    """422: the request is invalid; the message names the field."""


class RateLimited(APIError):
    """429: over a limit; ``retry_after`` is the seconds the API asks to wait (or None)."""

    def __init__(
        self, status: int, message: str, body: Any = None, retry_after: float | None = None
    ) -> None:
        super().__init__(status, message, body)
        self.retry_after = retry_after


class Unavailable(APIError):
    """503 (or any 5xx): the API cannot reach its database or queue."""


class Timeout(TaskleaseError):
    """``wait`` ran out of time before the job finished."""

    def __init__(self, job_id: str, state: str, seconds: float) -> None:
        super().__init__(f"job {job_id} is still {state} after {seconds:g} s")
        self.job_id = job_id
        self.state = state


class ConnectionLost(TaskleaseError):
    """The API could not be reached (or a stream could not be resumed)."""


BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: Unprocessable,
    429: RateLimited,
}
