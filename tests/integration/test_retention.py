"""Retention against real PostgreSQL (docs/explain/design.md#retention): a prune deletes the finished
jobs past their state's retention with every row of theirs, and touches nothing
unfinished, recent or still referenced; the counts by state stay equal to a scan."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from app import store
from app.services import retention
from app.settings.config import Settings
from tests.retention_data import (
    ROWS_OF_ONE_JOB,
    counts_by_scan,
    counts_maintained,
    old_job,
    rows_of,
)

pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]

DAY = 86_400
ALL = ROWS_OF_ONE_JOB
NONE = dict.fromkeys(ALL, 0)


def settings(url: str, **overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "database_url": url,
        "retain_succeeded_seconds": 7 * DAY,
        "retain_cancelled_seconds": 7 * DAY,
        "retain_dead_lettered_seconds": 14 * DAY,
        "dlq_retention_seconds": 14 * DAY,
        "idempotency_window_seconds": DAY,
    }
    return Settings(**(base | overrides))


@pytest.mark.asyncio
async def test_a_prune_deletes_old_finished_jobs_whole_and_nothing_else(
    database_url: str, sql: Any
) -> None:
    # Given finished jobs past their state's retention, and jobs a prune must not touch.
    gone = [
        old_job(sql, "succeeded", 8),
        old_job(sql, "cancelled", 30),
        old_job(sql, "dead_lettered", 15),
        old_job(sql, "succeeded", 40, key="paid-twice?"),  # its replay window long over
    ]
    waiting_parent = old_job(sql, "waiting", 40)
    running_parent = old_job(sql, "running", 40)
    finished_parent = old_job(sql, "succeeded", 40)
    dead_parent = old_job(sql, "dead_lettered", 10)  # a redrive replays its spawns
    kept = {
        "recent": old_job(sql, "succeeded", 6),
        "dead letter within the DLQ's retention": old_job(sql, "dead_lettered", 10),
        "queued a year": old_job(sql, "queued", 365),
        "running": running_parent,
        "waiting on children": waiting_parent,
        "key in its replay window": old_job(sql, "succeeded", 8, key="k", made_days=0.5),
        "child of a waiting parent": old_job(sql, "succeeded", 40, parent=waiting_parent),
        "child of a running parent": old_job(sql, "cancelled", 40, parent=running_parent),
        "parent of an unfinished child": finished_parent,
        "unfinished child": old_job(sql, "queued", 40, parent=finished_parent),
        "child of a dead-lettered parent": old_job(sql, "succeeded", 40, parent=dead_parent),
        "a dead letter cancelled within the DLQ's retention": old_job(
            sql, "cancelled", 10, dead_lettered_by="engine"
        ),
    }

    # When the prune runs in batches of two until nothing is left.
    s = settings(database_url, prune_batch_size=2)
    async with store.connect(database_url) as db:
        report = await retention.prune(s, db)
        again = await retention.prune(s, db)
        await store.gauges.fold(db)

    # Then the old finished ones are gone with every row; everything else is whole.
    assert rows_of(sql, gone) == NONE
    for why, job_id in kept.items():
        assert rows_of(sql, [job_id]) == ALL, why
    assert report.jobs() == 4 and report.jobs("succeeded") == 2
    assert report.rows["succeeded"] == {t: 2 * n for t, n in ALL.items()}
    assert report.rows["dead_lettered"] == ALL
    assert report.batches >= 4  # succeeded: 2 + the empty one; cancelled, dead_lettered
    assert again.jobs() == 0
    assert counts_maintained(sql) == counts_by_scan(sql)


@pytest.mark.asyncio
async def test_a_dry_run_counts_what_is_due_and_held_and_deletes_nothing(
    database_url: str, sql: Any
) -> None:
    parent = old_job(sql, "waiting", 40)
    ids = [
        old_job(sql, "succeeded", 9),
        old_job(sql, "succeeded", 20, key="fresh", made_days=0.2),
        old_job(sql, "succeeded", 20, parent=parent),
        old_job(sql, "cancelled", 1),
    ]
    before = rows_of(sql, ids)
    async with store.connect(database_url) as db:
        due = {d.state: d for d in await retention.due(settings(database_url), db)}
    assert (due["succeeded"].due, due["succeeded"].held) == (3, 2)
    assert (due["cancelled"].due, due["dead_lettered"].due) == (0, 0)
    assert rows_of(sql, ids) == before


@pytest.mark.asyncio
async def test_a_state_kept_forever_is_never_pruned(database_url: str, sql: Any) -> None:
    ids = [old_job(sql, "succeeded", 400), old_job(sql, "cancelled", 400)]
    s = settings(database_url, retain_succeeded_seconds=0)
    async with store.connect(database_url) as db:
        report = await retention.prune(s, db)
    assert rows_of(sql, ids[:1]) == ALL
    assert rows_of(sql, ids[1:]) == NONE
    assert set(report.rows) == {"cancelled", "dead_lettered"}


@pytest.mark.asyncio
async def test_the_counts_by_state_follow_every_write_and_a_fold_keeps_them(
    database_url: str, sql: Any
) -> None:
    # Given jobs written, moved and deleted by several statements, some of many rows.
    ids = [old_job(sql, "queued", 1, tenant=f"t{i % 3}") for i in range(9)]
    sql.execute(
        "UPDATE jobs SET state = 'running', lease_token = gen_random_uuid(), "
        "lease_expires_at = now() + interval '1 hour' WHERE id = ANY(%s::uuid[])",
        ([str(i) for i in ids[:5]],),
    )
    sql.execute(
        "UPDATE jobs SET state = 'succeeded', finished_at = now(), lease_token = NULL, "
        "lease_expires_at = NULL WHERE id = ANY(%s::uuid[])",
        ([str(i) for i in ids[:3]],),
    )
    sql.execute("UPDATE jobs SET updated_at = now()")  # no state moved: nothing appended
    sql.execute("DELETE FROM jobs WHERE id = %s", (ids[8],))
    assert counts_maintained(sql) == counts_by_scan(sql)

    # When the changes are folded, the totals alone say the same, and nothing is left over.
    async with store.connect(database_url) as db:
        folded = await store.gauges.fold(db)
        gauges = await store.gauges.jobs(db)
        overview = await store.streams.overview(db, "t0")
    assert folded > 0
    assert sql.execute("SELECT count(*) AS n FROM job_count_deltas").fetchone()["n"] == 0
    assert counts_maintained(sql) == counts_by_scan(sql)
    by_state: dict[str, int] = {}
    for (_, _, state), n in counts_by_scan(sql).items():
        by_state[state] = by_state.get(state, 0) + n
    assert {s: n for (s, _), n in gauges.counts.items()} == by_state
    t0 = {s: n for (t, _, s), n in counts_by_scan(sql).items() if t == "t0"}
    assert {s: n for s, n in overview.counts.items() if n} == t0
    assert gauges.oldest_queued_seconds is not None and gauges.oldest_queued_seconds > 3600

    # And a TRUNCATE empties them too.
    sql.execute("TRUNCATE jobs CASCADE")
    assert counts_maintained(sql) == {}


def test_a_dead_letter_kept_less_than_its_message_is_refused_at_start_up() -> None:
    with pytest.raises(ValueError, match="TASKLEASE_RETAIN_DEAD_LETTERED_SECONDS"):
        Settings(retain_dead_lettered_seconds=DAY, dlq_retention_seconds=4 * DAY)
    assert Settings(retain_dead_lettered_seconds=0).retention().keys() == {
        "succeeded",
        "cancelled",
    }


def test_the_prune_command_prints_what_it_would_do_and_what_it_did(
    database_url: str, sql: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from app.cli.main import cli

    ids = [old_job(sql, "succeeded", 40) for _ in range(3)]
    monkeypatch.setenv("TASKLEASE_DATABASE_URL", database_url)
    monkeypatch.setenv("TASKLEASE_PRUNE_BATCH_SIZE", "2")
    dry = CliRunner().invoke(cli, ["prune", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "nothing was deleted" in dry.output and rows_of(sql, ids)["jobs"] == 3
    done = CliRunner().invoke(cli, ["prune"])
    assert done.exit_code == 0, done.output
    assert "pruned in" in done.output and rows_of(sql, ids) == NONE
    assert uuid.UUID(str(ids[0]))  # the ids were real jobs
