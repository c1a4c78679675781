"""RFC 3339 times: Go ``time.Parse(time.RFC3339, …)``'s verdict and instant, pinned case by case
(the edge cases are the ones SPEC §1.1 lists), and the one formatter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from markproto.protocol.times import format_time, parse_date, parse_time

EARLIEST = datetime.min.replace(tzinfo=UTC)
LATEST = datetime.max.replace(tzinfo=UTC)


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


ACCEPTED = [
    ("2026-01-01T00:00:00Z", utc(2026, 1, 1)),
    ("2026-01-01T00:00:00.5Z", utc(2026, 1, 1, 0, 0, 0, 500000)),
    ("2026-01-01T00:00:00,5Z", utc(2026, 1, 1, 0, 0, 0, 500000)),  # Go takes a comma too
    ("2026-01-01T00:00:00.123456789Z", utc(2026, 1, 1, 0, 0, 0, 123456)),  # ns truncated
    ("2026-01-01T00:00:00.000000000000001Z", utc(2026, 1, 1)),  # any length
    ("2026-01-01T9:05:00Z", utc(2026, 1, 1, 9, 5)),  # a one-digit hour
    ("2026-01-01T12:00:00+05:30", utc(2026, 1, 1, 6, 30)),
    ("2026-01-01T12:00:00-00:30", utc(2026, 1, 1, 12, 30)),
    ("2026-01-01T12:00:00+05:60", utc(2026, 1, 1, 6)),  # minutes 60 is an hour
    ("2026-01-01T12:00:00+24:00", utc(2025, 12, 31, 12)),  # offset hour 24
    ("2026-01-01T12:00:00-24:60", utc(2026, 1, 2, 13)),  # 25 hours behind
    ("2024-02-29T00:00:00Z", utc(2024, 2, 29)),
    ("0000-02-29T00:00:00Z", EARLIEST),  # year 0 is a leap year to Go; clamped
    ("0001-01-01T00:00:00+00:01", EARLIEST),
    ("9999-12-31T23:59:59-00:01", LATEST),
    ("9999-12-31T23:59:59Z", utc(9999, 12, 31, 23, 59, 59)),
]

REFUSED = [
    "2026-01-01T24:00:00Z",  # hour 24
    "2026-01-01T23:59:60Z",  # leap second
    "2026-01-01T23:60:00Z",
    "2026-01-01t00:00:00Z",  # lowercase t
    "2026-01-01T00:00:00z",  # lowercase z
    "2026-01-01T00:00:00",  # missing offset
    "2026-01-01 00:00:00Z",
    "2026-01-01T00:00:00+25:00",
    "2026-01-01T00:00:00+05:61",
    "2026-01-01T00:00:00+0530",
    "2026-01-01T00:00:00+05",
    "2026-01-01T00:00:00.Z",  # a separator with no digit
    "2026-01-01T00:00:00,Z",
    "2026-01-01T00:0:00Z",  # only the hour may have one digit
    "2026-01-01T000:00:00Z",
    "2026-13-01T00:00:00Z",
    "2026-00-01T00:00:00Z",
    "2026-02-29T00:00:00Z",
    "2026-04-31T00:00:00Z",
    "2026-1-01T00:00:00Z",
    "26-01-01T00:00:00Z",
    "+2026-01-01T00:00:00Z",
    " 2026-01-01T00:00:00Z",
    "2026-01-01T00:00:00Z ",
    "2026-01-01T00:00:00ZZ",
    "2026-01-01",
    "",
    "２０２６-01-01T00:00:00Z",  # fullwidth digits are not digits to Go
]


@pytest.mark.parametrize(("text", "expected"), ACCEPTED)
def test_accepted(text: str, expected: datetime) -> None:
    parsed = parse_time(text)
    assert parsed == expected
    assert parsed is not None and parsed.tzinfo is UTC


@pytest.mark.parametrize("text", REFUSED)
def test_refused(text: str) -> None:
    assert parse_time(text) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-01", utc(2026, 1, 1)),
        ("2024-02-29", utc(2024, 2, 29)),
        ("0000-01-01", EARLIEST),
        ("2026-02-29", None),
        ("2026-1-1", None),
        ("2026-01-01T00:00:00Z", None),
        ("2026-01-01 ", None),
    ],
)
def test_parse_date(text: str, expected: datetime | None) -> None:
    assert parse_date(text) == expected


def test_format_is_utc_whole_seconds() -> None:
    assert format_time(utc(2026, 3, 4, 5, 6, 7, 891011)) == "2026-03-04T05:06:07Z"
    tz = timezone(timedelta(hours=2))
    assert format_time(datetime(2026, 1, 1, 1, 0, tzinfo=tz)) == "2025-12-31T23:00:00Z"
    assert format_time(datetime(2026, 1, 1)) == "2026-01-01T00:00:00Z"
    assert format_time(utc(999, 1, 1)) == "0999-01-01T00:00:00Z"


MOMENTS = st.datetimes(
    min_value=datetime(1, 1, 3), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)
OFFSETS = st.integers(min_value=-(24 * 60 + 60), max_value=24 * 60 + 60)


@given(MOMENTS)
def test_format_then_parse_is_the_second(moment: datetime) -> None:
    assert parse_time(format_time(moment)) == moment.replace(microsecond=0)


@given(MOMENTS, OFFSETS, st.sampled_from([".", ","]))
def test_any_offset_names_the_same_instant(moment: datetime, minutes: int, sep: str) -> None:
    """Written in any offset Go accepts (up to 24:60 either way), the instant is the same."""
    local = (moment + timedelta(minutes=minutes)).replace(tzinfo=None)
    sign = "-" if minutes < 0 else "+"
    hours, mins = divmod(abs(minutes), 60)
    if hours == 25:  # 24:60 is the same offset
        hours, mins = 24, 60
    text = f"{local:%Y-%m-%dT%H:%M:%S}{sep}{moment.microsecond:06d}{sign}{hours:02d}:{mins:02d}"
    if local.year < 1000:
        text = f"{local.year:04d}{text[text.index('-') :]}"
    assert parse_time(text) == moment


@given(st.text(max_size=40))
def test_never_raises(text: str) -> None:
    parsed = parse_time(text)
    assert parsed is None or parsed.tzinfo is UTC
