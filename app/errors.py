"""Exceptions: one root for the package; each docstring is the default message."""

from __future__ import annotations

from typing import Any


class TaskleaseError(Exception):
    """tasklease failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigError(TaskleaseError):
    """The configuration is invalid."""


class StoreError(TaskleaseError):
    """The database could not be reached or refused the statement."""


class QueueError(TaskleaseError):
    """The SQS-compatible endpoint could not be reached or refused the call."""


class JobError(TaskleaseError):
    """The job failed."""


class PermanentError(JobError):
    """The job failed in a way that another attempt cannot fix."""


class Retry(JobError):
    """The job asked to be retried."""

    def __init__(self, message: str | None = None, *, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


class Throttled(Retry):
    """The model provider asked to slow down (429, or 503 with Retry-After)."""

    def __init__(
        self,
        message: str | None = None,
        *,
        provider: str,
        model: str,
        status: int,
        delay: float | None = None,
    ) -> None:
        super().__init__(message, delay=delay)
        self.provider = provider
        self.model = model
        self.status = status

    def by(self) -> str:
        """Who throttled: "openai (gpt-4o-mini): 429"."""
        return f"{self.provider} ({self.model}): {self.status}"


class BudgetWait(TaskleaseError):
    """A model call would go past a model budget: the job waits (the lease handed back
    with ``delay``, no attempt used) instead of being refused by the provider."""

    def __init__(self, message: str | None = None, *, budget: str, delay: float) -> None:
        super().__init__(message)
        self.budget = budget  # "model" or "tenant_day"
        self.delay = delay


class LeaseLost(TaskleaseError):
    """The lease on this job moved to another worker; this worker stops and writes nothing."""


class Cancelled(TaskleaseError):
    """The job was cancelled while it ran."""


class DeadlinePassed(TaskleaseError):
    """The run's deadline passed while it ran: the attempt is stopped and the job ends."""


class HandBack(TaskleaseError):
    """The invocation ran out of time; the lease is handed back and the job resumes later."""


class BadRequest(TaskleaseError):
    """The request is invalid."""


class NotFound(TaskleaseError):
    """No such job."""


class Conflict(TaskleaseError):
    """The request conflicts with the job's current state."""


class TooManyRequests(TaskleaseError):
    """The tenant is over its limit; try again later."""

    def __init__(self, message: str | None = None, *, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = max(1, retry_after)


class Suspend(BaseException):
    """The job waits (a timer, a callback, its children): the attempt ends, the job
    becomes ``waiting`` and holds no worker. A BaseException, so that a kind's
    ``except Exception`` cannot swallow it."""

    def __init__(self, wait: Any) -> None:  # an app.kinds.waits.Wait
        super().__init__(wait)
        self.wait = wait


class CallbackFailed(PermanentError):
    """The outside party answered the callback with an error.

    The three wait failures are permanent: the answer (or its absence, or the children's
    outcome) is recorded, so another attempt would fail the same way. A kind that wants
    to go on catches them. ``error`` is the answer's error text, as it was sent."""

    def __init__(self, message: str | None = None, *, error: str | None = None) -> None:
        super().__init__(message)
        self.error = error


class CallbackTimedOut(PermanentError):
    """No answer came before the callback's deadline."""


class ReceiveTimedOut(PermanentError):
    """No message came on the topic before the receive's timeout (like CallbackTimedOut:
    recorded, so a replay raises it again; catch it to go on without one)."""


class GatherFailed(PermanentError):
    """Too many child jobs failed for the gather's rule to hold."""


class ReplayDiverged(PermanentError):
    """The code a job resumed on does not match the steps the job recorded: a recorded
    step reached as another kind of step, or the code ended with recorded steps never
    reached (docs/howto/kind-versions.md). Nothing of the step ran; the job stops."""
