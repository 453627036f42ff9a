"""The bodies of the messages to a job (POST/GET /v1/jobs/{id}/messages)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app import store
from app.settings import bounds


class MessageCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topic: str = Field(
        min_length=1,
        max_length=bounds.MAX_TOPIC_CHARS,
        description="what ctx.receive(topic) the message is for",
        examples=["user"],
    )
    body: Any = Field(
        None,
        description=f"any JSON, up to {bounds.MAX_MESSAGE_BYTES} bytes (compact)",
        examples=[{"text": "and in French, please"}],
    )


class MessagePublic(BaseModel):
    id: int = Field(description="the order of the job's messages")
    job_id: uuid.UUID
    topic: str
    body: Any
    sent_at: dt.datetime
    consumed_at: dt.datetime | None = Field(
        description="when a receive of the job consumed it (none: unread)"
    )

    @classmethod
    def of(cls, message: store.messages.Message) -> MessagePublic:
        return cls(
            id=message.id,
            job_id=message.job_id,
            topic=message.topic,
            body=message.body,
            sent_at=message.created_at,
            consumed_at=message.consumed_at,
        )


class MessageSent(MessagePublic):
    job_woken: bool = Field(description="the message woke the job (it waited on the topic)")
