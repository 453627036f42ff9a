"""Cron expressions in a time zone (app/services/cron.py, on cronsim): the slots before and
after a moment, daylight saving time as Debian's cron has it, and errors naming the field."""

from __future__ import annotations

import datetime as dt
import uuid
from zoneinfo import ZoneInfo

import pytest

from app import errors
from app.services import schedules
from app.services.cron import Cron

pytestmark = pytest.mark.unit

BERLIN = ZoneInfo("Europe/Berlin")


def utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=dt.UTC)  # type: ignore[misc]


def berlin(*args: int, fold: int = 0) -> dt.datetime:
    return dt.datetime(*args, tzinfo=BERLIN, fold=fold)  # type: ignore[misc]


def test_after_is_strictly_after_and_latest_is_at_or_before() -> None:
    cron = Cron.parse("*/15 * * * *", "UTC")
    on_a_slot = utc(2026, 12, 4, 10, 15)
    assert cron.after(on_a_slot) == utc(2026, 12, 4, 10, 30)
    assert cron.latest(on_a_slot) == on_a_slot
    just_past = on_a_slot + dt.timedelta(microseconds=500_000)
    assert cron.after(just_past) == utc(2026, 12, 4, 10, 30)
    assert cron.latest(just_past) == on_a_slot
    assert cron.latest(on_a_slot - dt.timedelta(microseconds=1)) == utc(2026, 12, 4, 10, 0)


def test_slots_are_read_in_the_time_zone_and_answered_in_utc() -> None:
    cron = Cron.parse("0 9 * * 1-5", "Europe/Berlin")
    friday_evening = utc(2026, 12, 4, 18, 0)  # a Friday
    assert cron.after(friday_evening) == utc(2026, 12, 7, 8, 0)  # Monday 09:00 CET
    assert cron.latest(friday_evening) == utc(2026, 12, 4, 8, 0)
    assert cron.upcoming(friday_evening, 2) == [berlin(2026, 12, 7, 9), berlin(2026, 12, 8, 9)]
    assert cron.describe() == "At 09:00 on Monday through Friday"


def test_a_slot_in_the_skipped_hour_runs_once_right_after_the_change() -> None:
    # 2026-03-29 in Berlin: 02:00 CET becomes 03:00 CEST; 02:30 does not exist.
    cron = Cron.parse("30 2 * * *", "Europe/Berlin")
    night_before = berlin(2026, 3, 28, 12)
    assert cron.upcoming(night_before, 3) == [
        berlin(2026, 3, 29, 3, 0),
        berlin(2026, 3, 30, 2, 30),
        berlin(2026, 3, 31, 2, 30),
    ]
    # Stepping back from after the change finds the same slot: one job for that night.
    assert cron.latest(berlin(2026, 3, 29, 3, 5)) == berlin(2026, 3, 29, 3, 0)


def test_a_slot_in_the_repeated_hour_runs_once_but_a_stepped_one_follows_real_time() -> None:
    # 2026-10-25 in Berlin: 03:00 CEST becomes 02:00 CET; 02:00-02:59 happens twice.
    fixed = Cron.parse("30 2 * * *", "Europe/Berlin")
    first, second = fixed.upcoming(berlin(2026, 10, 24, 12), 2)
    assert first == berlin(2026, 10, 25, 2, 30)
    assert first.utcoffset() == dt.timedelta(hours=2)  # the first 02:30 only
    assert second == berlin(2026, 10, 26, 2, 30)
    hourly = Cron.parse("0 * * * *", "Europe/Berlin")
    slots = hourly.upcoming(berlin(2026, 10, 25, 1, 30), 3)
    assert [(s.hour, s.utcoffset()) for s in slots] == [
        (2, dt.timedelta(hours=2)),
        (2, dt.timedelta(hours=1)),
        (3, dt.timedelta(hours=1)),
    ]


def test_the_two_slots_of_a_repeated_hour_have_two_idempotency_keys() -> None:
    sid = uuid.UUID(int=7)
    earlier = schedules.slot_key(sid, berlin(2026, 10, 25, 2, 0, fold=0))
    later = schedules.slot_key(sid, berlin(2026, 10, 25, 2, 0, fold=1))
    assert earlier == f"schedule:{sid}:2026-10-25T00:00:00+00:00"
    assert later == f"schedule:{sid}:2026-10-25T01:00:00+00:00"


def test_macros_and_spacing_are_stored_as_five_fields() -> None:
    assert Cron.parse("@daily", "UTC").expr == "0 0 * * *"
    assert Cron.parse("@HOURLY", "UTC").expr == "0 * * * *"
    assert Cron.parse("  0   9 * *  MON ", "UTC").expr == "0 9 * * MON"


def test_a_cron_with_no_slot_in_fifty_years_has_none() -> None:
    # Days 1 and 21 that are also the month's last Monday (the 22nd or later): never.
    cron = Cron.parse("* * */20 * 1L", "UTC")
    assert cron.after(utc(2026, 1, 1)) is None
    assert cron.latest(utc(2026, 1, 1)) is None


@pytest.mark.parametrize(
    ("expr", "tz", "message"),
    [
        ("61 * * * *", "UTC", "cron: Bad minute in '61 * * * *'"),
        ("* * * 13 *", "UTC", "cron: Bad month"),
        ("* * *", "UTC", "cron: '* * *' has 3 fields; a schedule's cron has five"),
        ("0 * * * * *", "UTC", "has 6 fields"),
        ("@reboot", "UTC", "has 1 fields"),
        ("* * * * *", "Mars/Olympus", "timezone: 'Mars/Olympus' is not an IANA time zone"),
        ("* * * * *", "America", "timezone: 'America'"),
        ("* * * * *", "../../etc/passwd", "timezone: '../../etc/passwd'"),
        ("* * * * *", "", "timezone: ''"),
    ],
)
def test_bad_input_names_the_field(expr: str, tz: str, message: str) -> None:
    with pytest.raises(errors.BadRequest) as caught:
        Cron.parse(expr, tz)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("expr", "zone", "now", "nxt", "last"),
    [
        # 01:10 EST, the second 01:xx of New York's fall-back night: 01:30 EDT (05:30Z)
        # is past; cronsim answered it as the next slot, and yesterday's as the latest.
        (
            "30 1 * * *",
            "America/New_York",
            utc(2026, 11, 1, 6, 10),
            utc(2026, 11, 2, 6, 30),
            utc(2026, 11, 1, 5, 30),
        ),
        (
            "30 1-3 * * *",
            "America/New_York",
            utc(2026, 11, 1, 6, 10),
            utc(2026, 11, 1, 7, 30),
            utc(2026, 11, 1, 5, 30),
        ),
        # 02:10 CET, the second 02:xx of Berlin's: 02:30 CEST (00:30Z) is past.
        (
            "30 2 * * *",
            "Europe/Berlin",
            utc(2026, 10, 25, 1, 10),
            utc(2026, 10, 26, 1, 30),
            utc(2026, 10, 25, 0, 30),
        ),
    ],
)
def test_inside_a_repeated_hour_after_is_never_in_the_past_and_latest_not_a_day_behind(
    expr: str, zone: str, now: dt.datetime, nxt: dt.datetime, last: dt.datetime
) -> None:
    """A schedule's next slot in the past made a sweep take it again and again (500 takes
    for one job); the day before's slot as the latest made a second job for one stretch."""
    cron = Cron.parse(expr, zone)
    assert cron.after(now) == nxt
    assert cron.latest(now) == last
