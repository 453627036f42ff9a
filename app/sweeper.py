"""The sweeper: stalled leases, unsent outbox rows, lost messages.

Runs on a schedule (EventBridge -> handlers/sweeper.py on AWS, ``tasklease sweep``
locally). Every step is idempotent and safe to run from several places at once
(SKIP LOCKED); a duplicate message it sends is dropped by the claim.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from app import limits
from app.config import Settings
from app.db import Database, q
from app.queue import Queue

log = logging.getLogger(__name__)

STALL_GRACE_SECONDS = 1.0
SWEEP_LIMIT = 500


@dataclass
class SweepReport:
    stalled: int = 0
    outbox_sent: int = 0
    resent: int = 0

    def __str__(self) -> str:
        return f"stalled={self.stalled} outbox_sent={self.outbox_sent} resent={self.resent}"


async def relay_outbox(settings: Settings, db: Database, sqs: Queue) -> int:
    """Send outbox rows whose fast-path send did not happen, in batches of 10."""
    total = 0
    while True:
        async with db.transaction() as conn:
            cur = await conn.execute(
                q("take_unsent_outbox"),
                {"grace": settings.outbox_grace_seconds, "limit": limits.MAX_BATCH},
            )
            rows = await cur.fetchall()
            if not rows:
                return total
            failed = set(await sqs.send_jobs([r["job_id"] for r in rows]))
            sent = [r["id"] for r in rows if str(r["job_id"]) not in failed]
            if sent:
                await conn.execute(q("mark_outbox_sent"), {"ids": sent})
            total += len(sent)
            if failed:
                log.warning("outbox relay: send failed", extra={"count": len(failed)})
                return total


async def sweep_once(settings: Settings, db: Database, sqs: Queue) -> SweepReport:
    report = SweepReport()
    stalled = await db.fetch(
        q("mark_stalled"), {"grace": STALL_GRACE_SECONDS, "limit": SWEEP_LIMIT}
    )
    report.stalled = len(stalled)
    for row in stalled:
        log.warning(
            "lease expired with no heartbeat", extra={"job_id": row["id"], "state": "stalled"}
        )
    report.outbox_sent = await relay_outbox(settings, db, sqs)
    lost = await db.fetch(
        q("touch_lost"), {"age": settings.lost_message_seconds, "limit": SWEEP_LIMIT}
    )
    if lost:
        failed = await sqs.send_jobs([r["id"] for r in lost])
        report.resent = len(lost) - len(failed)
        log.info("re-sent messages for waiting jobs", extra={"count": report.resent})
    return report
