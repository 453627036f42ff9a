"""Named steps where a process may die, and a test-only switch that kills it there.

``TASKLEASE_CRASH_AT=<point>[,<point>...]`` makes the process SIGKILL itself when it
reaches a named point. It only works together with
``TASKLEASE_ALLOW_CRASH_POINTS=kill-this-process`` and never inside AWS Lambda,
so it cannot be switched on by accident in production.

``after_effect@<key>`` (or ``inside_effect@<key>``) arms the point for one effect only:
the process dies once that effect is recorded (before, for inside_effect), not at the
first one, e.g. after the second of an agent's tool calls.
"""

from __future__ import annotations

import enum
import logging
import os
import signal

log = logging.getLogger(__name__)

CONSENT = "kill-this-process"


class Point(enum.StrEnum):
    AFTER_RECEIVE = "after_receive"  # local event source: received, before the handler
    AFTER_CLAIM = "after_claim"
    INSIDE_EFFECT = "inside_effect"  # the outside call returned, nothing recorded yet
    AFTER_EFFECT = "after_effect"  # the effect is recorded
    # A streamed answer's batch of chunks is written, the answer not finished nor recorded.
    INSIDE_STREAM = "inside_stream"
    # A worker got the cancel notification of a job it runs and read its flag; the job
    # is neither stopped nor marked cancelled yet.
    AFTER_CANCEL_NOTIFY = "after_cancel_notify"
    BEFORE_COMPLETION = "before_completion"
    AFTER_COMPLETION = "after_completion"  # the row says succeeded, the message is not deleted
    WHILE_DEAD_LETTERING = "while_dead_lettering"  # DLQ message sent, row not yet marked
    # The provider throttled the call: the row says retrying (no attempt used), the
    # message's visibility not yet set to the provider's delay.
    AFTER_THROTTLE = "after_throttle"
    # A worker found its job past its deadline (at the claim, or its attempt stopped at
    # the deadline); the end (dead_lettered, children cancelled) is not written yet.
    BEFORE_DEADLINE_END = "before_deadline_end"
    # Sweeper: jobs past their deadline ended (committed); their parents' wake-ups not sent.
    AFTER_DEADLINE_SWEPT = "after_deadline_swept"
    # A redrive past the job's redrive budget was refused; the message is not deleted yet.
    AFTER_REDRIVE_REFUSED = "after_redrive_refused"
    # A job pinned to a version of its kind this worker does not serve was handed back
    # (queued, its attempt given back, unrun, its message due back in 10 s); the message
    # not deleted (docs/howto/kind-versions.md).
    AFTER_VERSION_HANDED_BACK = "after_version_handed_back"
    # API: job committed, message not sent (a delayed job: its wake-up not marked nor sent)
    AFTER_OUTBOX_COMMIT = "after_outbox_commit"
    # API: messages sent (a long-running API: the requests answered), their outbox rows
    # not yet marked sent; the relay sends them again after its grace.
    BEFORE_SENDS_RECORDED = "before_sends_recorded"
    # Waits (docs/explain/design.md#waits):
    AFTER_SUSPEND = "after_suspend"  # the row says waiting; wake-up not sent, message not deleted
    AFTER_WAKE_MARKED = "after_wake_marked"  # sweeper: wake-up marked sent, not sent yet
    AFTER_CALLBACK_ANSWER = "after_callback_answer"  # API: answer committed, job's message not sent
    # API: a message to a job committed (the job, waiting on its topic, woken in that
    # transaction); the job's message not sent.
    AFTER_MESSAGE_SENT = "after_message_sent"
    # Worker: a receive marked a message consumed (by its key); the step not recorded.
    AFTER_MESSAGE_TAKEN = "after_message_taken"
    # A child's finish committed (its parent woken in that transaction); nothing sent.
    AFTER_CHILD_FINISHED = "after_child_finished"
    # Sweeper: a schedule's slot made its job and moved next_slot (committed together);
    # the job's message is not sent, the sweep not done.
    AFTER_SCHEDULE_MATERIALISED = "after_schedule_materialised"
    # A lease ended and parked jobs of its tenant were released (unparked, outbox rows
    # committed); their messages are not sent yet.
    AFTER_RELEASE = "after_release"
    # Flow control by key (docs/howto/flow-control.md): a job parked behind its key was
    # released as a job of its key ended (unparked, outbox row committed), not sent yet.
    AFTER_KEY_RELEASE = "after_key_release"
    # API: a newer job of a debounced key committed with the earlier ones it replaced
    # cancelled; its delayed wake-up neither marked nor sent.
    AFTER_DEBOUNCE_REPLACED = "after_debounce_replaced"
    # API: a new job committed with the active ones of its key cancelled (if_active
    # cancel_active; a running one's cancel asked); its message not sent.
    AFTER_ACTIVE_CANCELLED = "after_active_cancelled"
    # ctx.set_state's write committed (the key's row and its stream row); the kind's code
    # has not gone on.
    AFTER_STATE_PUBLISHED = "after_state_published"
    # A prune batch committed (jobs deleted with their rows); the next batch not begun.
    AFTER_PRUNE_BATCH = "after_prune_batch"
    # A fork committed (the new job and the effects it inherited, copied); its message
    # is not sent yet.
    AFTER_FORK_INSERTED = "after_fork_inserted"
    # A bulk action's batch committed (its jobs acted on, the cursor and the counts moved
    # past them); the next batch not begun.
    AFTER_BULK_BATCH = "after_bulk_batch"
    # A bulk re-run's batch made its re-runs (committed by the submit path); the cursor
    # and counts not moved past them yet.
    AFTER_BULK_RERUNS = "after_bulk_reruns"
    # `tasklease migrate`: a migration's transactional part committed, and a statement of
    # its online part (CREATE INDEX CONCURRENTLY) has put its index in the catalog, not
    # yet valid; the file is not recorded as applied.
    DURING_ONLINE_MIGRATION = "during_online_migration"
    # Sweeper: due alerts taken (locked, not marked), nothing sent yet.
    BEFORE_ALERT_SENT = "before_alert_sent"
    # Sweeper: alerts delivered (the receivers answered 2xx), not yet marked delivered:
    # the next sweep sends them again with the same webhook-id.
    AFTER_ALERT_SENT = "after_alert_sent"


def _armed() -> frozenset[str]:
    wanted = os.environ.get("TASKLEASE_CRASH_AT", "")
    if not wanted:
        return frozenset()
    if os.environ.get("TASKLEASE_ALLOW_CRASH_POINTS") != CONSENT:
        raise RuntimeError(
            "TASKLEASE_CRASH_AT is set but TASKLEASE_ALLOW_CRASH_POINTS is not "
            f"{CONSENT!r}: crash points are for tests only"
        )
    if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
        raise RuntimeError("TASKLEASE_CRASH_AT must not be set inside AWS Lambda")
    names = {n.strip() for n in wanted.split(",") if n.strip()}
    unknown = {n.split("@", 1)[0] for n in names} - {p.value for p in Point}
    if unknown:
        raise RuntimeError(
            f"TASKLEASE_CRASH_AT names unknown points {sorted(unknown)}; "
            f"known: {[p.value for p in Point]}"
        )
    return frozenset(names)


ARMED = _armed()


def hit(point: Point, **fields: object) -> None:
    """Die here, at once and without cleanup, when this point is armed."""
    if point.value in ARMED or f"{point.value}@{fields.get('effect')}" in ARMED:
        log.warning("crash point %s reached: SIGKILL", point.value, extra=dict(fields))
        os.kill(os.getpid(), signal.SIGKILL)
