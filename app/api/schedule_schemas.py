"""The schedules' request and response bodies (POST/GET /v1/schedules)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from app.api.schemas import MAX_ATTEMPTS, TIMEOUT_SECONDS, Storable
from app.services import schedules
from app.settings import bounds


class ScheduleCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str | None, Storable] = Field(
        None,
        min_length=1,
        max_length=bounds.MAX_SCHEDULE_NAME_CHARS,
        description="optional; unique among the tenant's schedules",
    )
    cron: Annotated[str, Storable] = Field(
        min_length=1,
        max_length=bounds.MAX_CRON_CHARS,
        description="five fields (minute hour day-of-month month day-of-week) as Debian's "
        "cron reads them, or @hourly, @daily, @weekly, @monthly, @yearly",
        examples=["0 9 * * 1-5"],
    )
    timezone: Annotated[str, Storable] = Field(
        "UTC",
        min_length=1,
        max_length=bounds.MAX_TIMEZONE_CHARS,
        description="the IANA time zone the cron's fields are read in",
        examples=["Europe/Berlin"],
    )
    kind: str = Field(min_length=1, max_length=100, examples=["support.triage"])
    payload: dict[str, Any] = Field(
        description="each slot's job's payload, checked against the kind's schema now",
        examples=[{"ticket_id": "T-1", "subject": "Weekly digest", "body": "Summarise the week."}],
    )
    max_attempts: int | None = Field(None, ge=MAX_ATTEMPTS[0], le=MAX_ATTEMPTS[1])
    timeout_seconds: int | None = Field(None, ge=TIMEOUT_SECONDS[0], le=TIMEOUT_SECONDS[1])

    def request(self) -> schedules.ScheduleRequest:
        return schedules.ScheduleRequest(
            cron=self.cron,
            timezone=self.timezone,
            kind=self.kind,
            payload=self.payload,
            name=self.name,
            max_attempts=self.max_attempts,
            timeout_seconds=self.timeout_seconds,
        )


class SchedulePublic(BaseModel):
    id: uuid.UUID
    tenant: str = Field(description="the tenant of the key that created the schedule")
    name: str | None
    cron: str
    timezone: str
    description: str = Field(description="the cron expression in words")
    kind: str
    payload: dict[str, Any]
    max_attempts: int | None
    timeout_seconds: int | None
    enabled: bool = Field(description="false while paused")
    next_slot: dt.datetime | None = Field(
        description="the next slot that makes a job (null: the cron names no time left)"
    )
    upcoming: list[dt.datetime] = Field(
        description="the next slots, from next_slot, in the schedule's time zone "
        "(empty while paused: a resume starts from the first slot after it)"
    )
    last_slot: dt.datetime | None = Field(description="the last slot that made a job")
    last_job_id: uuid.UUID | None = Field(description="the job the last slot made")
    last_error: str | None = Field(description="why the last due slot made no job, if it did not")
    created_at: dt.datetime
    updated_at: dt.datetime

    @classmethod
    def of(cls, row: dict[str, Any]) -> SchedulePublic:
        return cls.model_validate({k: row[k] for k in cls.model_fields})
