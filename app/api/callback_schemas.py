"""The API's callback bodies: a job's callback as its owner reads it, and the answer and
heartbeat of ``POST /v1/callbacks/{token}`` (the token is the credential)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app import storable
from app.api.schemas import Storable
from app.services import callbacks


class CallbackPublic(BaseModel):
    """A job's callback as its owner sees it: never its token."""

    key: str
    state: Literal["pending", "succeeded", "failed", "timed_out"]
    timeout_seconds: int
    deadline: dt.datetime
    heartbeats: int
    created_at: dt.datetime
    answered_at: dt.datetime | None
    error: str | None
    details: Any = Field(
        None,
        description="what the callback asks, as the kind gave it (wait_for_callback's "
        'details, at most 8 KiB), e.g. an agent\'s tool call: {"tool": ..., "args": ...}',
    )
    result: Any  # last: the one field of any size


# --- callbacks (the token is the credential) -------------------------------------


class CallbackAnswer(BaseModel):
    """Exactly one of ``result`` (any JSON, null included) or ``error``."""

    model_config = ConfigDict(extra="forbid")

    result: Any = Field(None, examples=[{"approved": True}])
    error: Annotated[str | None, Storable] = Field(
        None, min_length=1, max_length=callbacks.MAX_ERROR_CHARS, examples=["rejected"]
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> CallbackAnswer:
        given = self.model_fields_set & {"result", "error"}
        if given == {"result", "error"}:
            raise ValueError("give result or error, not both")
        if not given:
            raise ValueError("give result (any JSON) or error (a message)")
        if "error" in given and (self.error is None or not self.error.strip()):
            raise ValueError("error must be a non-empty message")
        if "result" in given:
            problem = storable.unstorable(self.result)
            if problem:
                raise ValueError(f"result: {problem}")
        return self


class CallbackAnswered(BaseModel):
    """The callback's answer taken. ``callback_state`` is the callback's, not the job's:
    a woken job runs on and finishes later (GET /v1/jobs/{job_id})."""

    job_id: uuid.UUID
    key: str
    callback_state: Literal["succeeded", "failed"] = Field(
        description="the callback's state after this answer (not the job's): succeeded for "
        "a result, failed for an error"
    )
    job_woken: bool = Field(
        description="whether the answer woke the job (it was waiting on this callback)"
    )
    # Issue 30 item 10: these read as the job's state; kept for callers that read them.
    state: Literal["succeeded", "failed"] = Field(
        deprecated=True,
        description="deprecated: read callback_state (the same value, the callback's state)",
    )
    woken: bool = Field(deprecated=True, description="deprecated: read job_woken (the same value)")


class CallbackHeartbeat(BaseModel):
    deadline: dt.datetime = Field(description="the callback's new deadline")
