"""RFC 3339 times (SPEC §1.1): the one parser and the one formatter both sides use.

The reader is Go's ``time.Parse(time.RFC3339, …)``, because the reference parses every time a
request or a tokens file carries that way (``if-modified-since``, token ``expires``, LOOKUP's
``modified-after`` and ``modified-before``), and a time one side accepts the other must read the
same. That parser is more lenient than RFC 3339 in three places, kept here on purpose:

* the hour may be one digit (``T9:05:00Z``), as Go's ``15`` layout element allows;
* the fraction may follow a comma as well as a period (``00:00:00,5Z``), of any length;
* an offset's hour may be 24 and its minutes 60 (``+05:60`` is six hours ahead).

And strict in the others: ``T`` and ``Z`` upper case, seconds 0-59 (no leap second), hours
0-23, a real calendar day, and a zone always present. Go keeps nanoseconds where Python keeps
microseconds: extra digits are truncated, which no comparison with a whole-second ``modified``
can notice. Every result is an aware UTC datetime; an instant before year 1 or after 9999
(``0000-…`` is a valid Go year) is clamped to ``datetime.min`` or ``datetime.max``, which orders
the same against any time a store holds.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

__all__ = ["format_time", "parse_date", "parse_time"]

_TIME = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{1,2}):([0-9]{2}):([0-9]{2})"
    r"(?:[.,]([0-9]+))?(?:(Z)|([+-])([0-9]{2}):([0-9]{2}))"
)
_PLAIN_TIME = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?"
    r"(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
)
"""Where Go and ``datetime.fromisoformat`` read the same: two-digit fields, a short fraction
after a period, an offset under 24 hours."""
_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_EARLIEST = datetime.min.replace(tzinfo=UTC)
_LATEST = datetime.max.replace(tzinfo=UTC)
_GREGORIAN_CYCLE = 146097
"""Days in 400 years: year 0 (a leap year to Go) is read as year 400, one cycle later."""


def parse_time(text: str) -> datetime | None:
    """Go ``time.Parse(time.RFC3339, text)`` as an aware UTC datetime, or None where Go refuses.

    None rather than an exception: every caller words its own refusal (a filter's message, a
    tokens file's line), and ``if-modified-since`` ignores a bad value altogether.
    """
    if _PLAIN_TIME.fullmatch(text):  # the common form: datetime's own parser, in C
        try:
            moment = datetime.fromisoformat(text)
            return moment if moment.tzinfo is UTC else moment.astimezone(UTC)
        except (ValueError, OverflowError):
            pass  # a day the month lacks, an hour past 23, year 0, an instant before year 1
    match = _TIME.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = match.groups()
    clock = int(hour), int(minute), int(second)
    if clock[0] > 23 or clock[1] > 59 or clock[2] > 59:
        return None
    offset = 0
    if not zulu:
        if int(off_h) > 24 or int(off_m) > 60:
            return None
        offset = (int(off_h) * 60 + int(off_m)) * (-1 if sign == "-" else 1)
    micro = int(fraction[:6].ljust(6, "0")) if fraction else 0
    try:
        moment = datetime(int(year), int(month), int(day), *clock, micro, tzinfo=UTC)
    except ValueError:  # a day the month lacks, or year 0 (which Go has)
        days = _day_number(int(year), int(month), int(day))
        if days is None:
            return None
        h, m, s = clock
        return _instant(timedelta(days=days, hours=h, minutes=m - offset, seconds=s))
    if not offset:
        return moment
    try:
        return moment - timedelta(minutes=offset)
    except OverflowError:
        return _LATEST if offset < 0 else _EARLIEST


def parse_date(text: str) -> datetime | None:
    """Go ``time.Parse("2006-01-02", text)``: UTC midnight of that day, or None."""
    match = _DATE.fullmatch(text)
    if match is None:
        return None
    days = _day_number(*(int(part) for part in match.groups()))
    return None if days is None else _instant(timedelta(days=days))


def format_time(moment: datetime) -> str:
    """Go ``time.RFC3339`` of a UTC time in whole seconds, ``2026-01-01T00:00:00Z``: every time
    the server writes. A naive datetime is taken as UTC."""
    t = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}Z"


def _day_number(year: int, month: int, day: int) -> int | None:
    """Days from 0001-01-01 (negative in year 0), or None for a day the calendar lacks."""
    try:
        if year == 0:
            return date(year + 400, month, day).toordinal() - 1 - _GREGORIAN_CYCLE
        return date(year, month, day).toordinal() - 1
    except ValueError:
        return None


def _instant(since: timedelta) -> datetime:
    """``datetime.min`` plus ``since``, clamped to what a datetime can hold."""
    if since < timedelta():
        return _EARLIEST
    try:
        return _EARLIEST + since
    except OverflowError:
        return _LATEST
