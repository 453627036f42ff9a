"""Cron expressions read in an IANA time zone: the slots a schedule names.

Parsing and stepping are cronsim's (healthchecks.io's cron library, which follows
Debian's cron, DST quirks included): nothing here parses cron by hand. What this module
adds is the shape a schedule needs: five fields only, the usual @-macros, errors that
name the field, and slots as UTC instants.

Daylight saving time, as Debian's cron does it (and cronsim with it), for an expression
with a fixed minute and hour (``30 2 * * *``): a slot that falls in the hour the clock
skips runs once, right after the change (03:00 for 02:30); a slot that falls in the
hour the clock repeats runs once, at its first occurrence. An expression whose minute
or hour is a star or a step (``*/15 * * * *``, ``0 * * * *``) follows real time: every
slot of the repeated hour runs, none of the skipped one.
"""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from app import errors
from app.settings import bounds

FIELDS = "minute hour day-of-month month day-of-week"
# Debian cron's nicknames, as the five fields they stand for (@reboot has no slot).
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Slots one lookup walks at most (a repeated hour holds a few).
STEPS = 100
_SECOND = dt.timedelta(seconds=1)


def zone(name: str) -> ZoneInfo:
    """The IANA time zone called ``name``, or BadRequest naming the field."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        # OSError: a name that is a folder of the database ("America"), not a zone.
        raise errors.BadRequest(
            f"timezone: {name!r} is not an IANA time zone name (such as 'UTC', "
            "'Europe/Berlin' or 'America/New_York')"
        ) from exc


@dataclass(frozen=True)
class Cron:
    """A valid five-field cron expression and the time zone its fields are read in."""

    expr: str  # as stored: the macro spelled out, single spaces
    zone: ZoneInfo

    @classmethod
    def parse(cls, expr: str, timezone: str) -> Cron:
        """The expression checked by cronsim, or BadRequest naming ``cron`` (or
        ``timezone``) and what is wrong."""
        tz = zone(timezone)
        words = expr.split()
        if len(words) == 1 and words[0].lower() in MACROS:
            words = MACROS[words[0].lower()].split()
        text = " ".join(words)
        if len(words) != len(FIELDS.split()):
            raise errors.BadRequest(
                f"cron: {expr!r} has {len(words)} fields; a schedule's cron has five "
                f"({FIELDS}) or is one of {', '.join(MACROS)}"
            )
        if len(text) > bounds.MAX_CRON_CHARS:
            raise errors.BadRequest(f"cron: at most {bounds.MAX_CRON_CHARS} characters")
        try:
            CronSim(text, dt.datetime.now(tz))
        except CronSimError as exc:
            raise errors.BadRequest(f"cron: {exc} in {expr!r} (fields: {FIELDS})") from exc
        return cls(text, tz)

    def after(self, moment: dt.datetime) -> dt.datetime | None:
        """The first slot strictly after ``moment``, in UTC; None when there is none in
        the next 50 years (cronsim's horizon: "* * 30 2 *" never matches)."""
        # cronsim drops the microseconds, then steps one second forward; on a fall-back
        # night it can answer a time in the repeated hour that is already past (a fixed
        # hour and minute lose the fold), so the first slot later than ``moment`` wins.
        for slot in itertools.islice(CronSim(self.expr, moment.astimezone(self.zone)), STEPS):
            if slot.astimezone(dt.UTC) > moment:
                return slot.astimezone(dt.UTC)
        return None

    def latest(self, moment: dt.datetime) -> dt.datetime | None:
        """The last slot at or before ``moment``, in UTC (None: none in 50 years)."""
        # Reversed, cronsim steps one second back first: from the next whole second, the
        # first slot it finds is at or before ``moment``.
        start = moment.replace(microsecond=0) + _SECOND
        found: dt.datetime | None = None
        for slot in itertools.islice(
            CronSim(self.expr, start.astimezone(self.zone), reverse=True), STEPS
        ):
            if slot.astimezone(dt.UTC) <= moment:
                found = slot.astimezone(dt.UTC)
                break
        if found is None:
            return None
        # On a fall-back night the reversed walk can skip the repeated hour's slot and
        # answer the day before's: walk forward from it to the last one at or before.
        for _ in range(STEPS):
            following = self.after(found)
            if following is None or following > moment:
                break
            found = following
        return found

    def upcoming(self, moment: dt.datetime, count: int) -> list[dt.datetime]:
        """The next ``count`` slots after ``moment``, in the schedule's time zone."""
        slots = CronSim(self.expr, moment.astimezone(self.zone))
        out: list[dt.datetime] = []
        for slot in slots:
            out.append(slot.astimezone(self.zone))
            if len(out) == count:
                break
        return out

    def describe(self) -> str:
        """The expression in words ("At 09:00 on Monday through Friday")."""
        return CronSim(self.expr, dt.datetime.now(self.zone)).explain()
