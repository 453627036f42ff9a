"""The bodies of POST /v1/jobs/{id}/rerun and /fork (app/services/reruns.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.api.schemas import JobPublic
from app.settings import bounds


class RerunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    payload: dict[str, Any] | None = Field(
        None,
        description="the new job's payload, validated against the kind's schema as a "
        "submission's is (default: the original's)",
    )


class ForkRequest(RerunRequest):
    step: str | None = Field(
        None,
        min_length=1,
        max_length=bounds.MAX_EFFECT_KEY_CHARS,
        description="the effect key to run from: the steps the original recorded before "
        "it are inherited, it and the ones after run again. Left out (or null): every step "
        "the original recorded is inherited and the new job runs from the one after, the "
        "step a dead letter failed in",
        examples=["post"],
    )


class ForkPublic(JobPublic):
    inherited: list[str] = Field(description="the steps the new job inherited, in order")
