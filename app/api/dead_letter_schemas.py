"""The API's dead-letter bodies: a redrive's request and what it did."""

from __future__ import annotations

import uuid
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from app.api.schemas import TENANT_PATTERN, Storable
from app.services import redrive


class RedriveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_ids: list[uuid.UUID] | None = Field(None, max_length=redrive.MAX_LIST)
    kind: Annotated[str | None, Storable] = Field(None, min_length=1, max_length=100)
    tenant: str | None = Field(None, pattern=TENANT_PATTERN)
    limit: int | None = Field(None, ge=1, le=redrive.MAX_LIST)
    force: bool = Field(False, description="redrive past the jobs' redrive budgets")


class RedriveSummary(BaseModel):
    mode: str
    selected: int
    moved: int
    reset: int
    sent_without_dead_letter: int
    stale_deleted: int
    left_in_dlq: int
    refused: list[uuid.UUID] = Field(
        description="jobs past their redrive budget, left dead-lettered (with a move task: "
        "their messages are deleted unrun when claimed)"
    )

    @classmethod
    def of(cls, report: redrive.RedriveReport) -> RedriveSummary:
        return cls(
            mode=report.mode,
            selected=len(report.selected),
            moved=report.moved,
            reset=report.reset,
            sent_without_dead_letter=report.sent_without_dead_letter,
            stale_deleted=report.stale_deleted,
            left_in_dlq=report.left_in_dlq,
            refused=report.refused,
        )
