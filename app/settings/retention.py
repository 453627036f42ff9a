"""How long finished jobs are kept (docs/explain/design.md#retention): the settings, and the rule that
a dead letter outlives its message in the DLQ. A part of ``app.settings.config.Settings``."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings

DAY = 86_400
# Ten years: "keep" is 0 (forever), not a huge number.
MAX_KEEP_SECONDS = 3650 * DAY


class RetentionSettings(BaseSettings):
    """Seconds a job is kept after it finished, by state; 0 keeps it forever. A job goes
    with its events, effects, output, outbox rows and callbacks."""

    retain_succeeded_seconds: int = Field(
        30 * DAY,
        ge=0,
        le=MAX_KEEP_SECONDS,
        description="how long a succeeded job is kept after it finished (0: forever), with its events, effects, output and callbacks",
    )
    retain_cancelled_seconds: int = Field(
        30 * DAY,
        ge=0,
        le=MAX_KEEP_SECONDS,
        description="how long a cancelled job is kept after it finished (0: forever)",
    )
    # Kept until redriven or past this; never less than the DLQ keeps its message
    # (TASKLEASE_DLQ_RETENTION_SECONDS), so no dead letter outlives its job.
    retain_dead_lettered_seconds: int = Field(
        30 * DAY,
        ge=0,
        le=MAX_KEEP_SECONDS,
        description="how long a dead-lettered job is kept unless redriven (0: forever); never less than TASKLEASE_DLQ_RETENTION_SECONDS, so no dead letter outlives its job",
    )
    # A job with an Idempotency-Key is kept at least this long after it was made, so a
    # replay within it always answers that job. A replay of a pruned job's key makes a
    # new job.
    idempotency_window_seconds: int = Field(
        DAY,
        ge=0,
        le=MAX_KEEP_SECONDS,
        description="a job with an Idempotency-Key is kept at least this long after it was made, so a replay within it answers that job; a replay of a pruned job's key makes a new job",
    )
    # Jobs one prune statement deletes at most (with their rows): its time and locks.
    prune_batch_size: int = Field(
        500,
        ge=1,
        le=10_000,
        description="jobs one prune statement deletes at most, with their rows (bounds its time and locks)",
    )
    # Batches of each state the sweeper runs per pass (0: the sweeper never prunes;
    # `tasklease prune` still does).
    prune_batches_per_sweep: int = Field(
        10,
        ge=0,
        le=10_000,
        description="prune batches of each state the sweeper runs per pass (0: the sweeper never prunes; `tasklease prune` still does)",
    )

    # Workers' rows (migration 0026) not seen for this long are deleted by the prune.
    retain_workers_seconds: int = Field(
        7 * DAY,
        ge=0,
        le=MAX_KEEP_SECONDS,
        description="how long a worker's row (or a Lambda environment's) is kept after it was last seen (0: forever)",
    )
    # Bulk operations (POST /v1/bulk) finished this long ago are deleted by the prune.
    retain_bulk_operations_seconds: int = Field(
        30 * DAY,
        ge=0,
        le=MAX_KEEP_SECONDS,
        description="how long a finished bulk operation's row (its counts, GET /v1/bulk/{id}) is kept (0: forever)",
    )
    # Bulk actions (POST /v1/bulk): jobs per batch (one transaction with the cursor), and
    # the lease a runner holds an operation by; past it the sweeper takes over.
    bulk_batch_size: int = Field(
        100,
        ge=1,
        le=1000,
        description="jobs a bulk action (POST /v1/bulk) acts on per transaction, its cursor committed with them",
    )
    bulk_lease_seconds: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="how long a bulk action's runner holds it between batches; past it (the runner died) the sweeper resumes it from its cursor",
    )

    @model_validator(mode="after")
    def _dead_letters_outlive_their_messages(self) -> Self:
        keep = self.retain_dead_lettered_seconds
        dlq = getattr(self, "dlq_retention_seconds", 0)
        if 0 < keep < dlq:
            raise ValueError(
                f"TASKLEASE_RETAIN_DEAD_LETTERED_SECONDS ({keep}) must be 0 (forever) or at "
                f"least TASKLEASE_DLQ_RETENTION_SECONDS ({dlq}): a dead letter's job is kept "
                "as long as its message may still be in the DLQ"
            )
        return self

    def retention(self) -> dict[str, float]:
        """State -> seconds kept, for the states that are pruned (not kept forever)."""
        keeps = {
            "succeeded": self.retain_succeeded_seconds,
            "cancelled": self.retain_cancelled_seconds,
            "dead_lettered": self.retain_dead_lettered_seconds,
        }
        return {state: float(keep) for state, keep in keeps.items() if keep > 0}
