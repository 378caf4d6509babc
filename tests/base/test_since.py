"""``since`` as people write it, on its own: the forms read, what is refused with which words, and the
checks :func:`since_value` makes of what a caller passes."""

from __future__ import annotations

import time
from datetime import date, datetime, timedelta, timezone

import pytest

from novelfind.base import since
from novelfind.base.since import now, parse_since, since_value
from novelfind.errors import InputError

AT = datetime(2026, 3, 10, 0, 0, 0, 1, tzinfo=timezone(timedelta(hours=-5)))  # a microsecond past midnight


def test_amounts_take_spacing_case_and_up_to_six_digits():
    assert parse_since(" 3 D ", AT) == AT - timedelta(days=3)
    assert parse_since("0h", AT) == AT
    assert parse_since("999999h", AT) == AT - timedelta(hours=999999)
    with pytest.raises(InputError, match="is not a date"):
        parse_since("1000000d", AT)  # seven digits: no amount anyone means
    with pytest.raises(InputError, match="is not a date"):
        parse_since("3m", AT)  # minutes and months are not offered: which would "m" be?


def test_named_days_start_at_midnight_in_the_zone_of_the_moment_given():
    assert parse_since("TODAY", AT) == datetime(2026, 3, 10, tzinfo=AT.tzinfo)
    assert parse_since(" yesterday ", AT) == datetime(2026, 3, 9, tzinfo=AT.tzinfo)
    assert parse_since("yesterday", AT).utcoffset() == timedelta(hours=-5)


def test_text_that_is_no_time_is_refused_with_the_forms_offered():
    with pytest.raises(InputError) as refused:
        parse_since(" next week", AT)
    assert str(refused.value) == (
        "since ' next week' is not a date: use 7d, 2w, 36h, today, yesterday, 2026-01-01, "
        "2026-01-01T10:00:00 or 2026-01-01T10:00:00+02:00"
    )
    assert isinstance(refused.value, ValueError)  # an InputError is also a ValueError


def test_relative_forms_count_back_from_now_in_local_time(monkeypatch):
    assert now().tzinfo is not None
    monkeypatch.setattr(since, "now", lambda: AT)
    assert parse_since("36h") == AT - timedelta(hours=36)
    assert since_value("1w") == AT - timedelta(weeks=1)


def test_since_value_takes_none_a_datetime_or_text_and_nothing_else():
    assert since_value(None) is None
    assert since_value(AT) is AT
    assert since_value("2026-01-01T10:00:00+02:00") == datetime(2026, 1, 1, 8, tzinfo=timezone.utc)
    for value, shown in ((5, "5"), (date(2026, 1, 1), "datetime.date(2026, 1, 1)"), (b"7d", "b'7d'")):
        with pytest.raises(InputError) as refused:
            since_value(value)
        assert str(refused.value) == f"since must be a datetime or a date's text, got {shown}"


def test_a_time_without_a_timestamp_is_refused_before_any_work(monkeypatch):
    """Local midnight of 0001-01-01 east of UTC falls before year 1 in UTC."""
    try:
        with monkeypatch.context() as patch:
            patch.setenv("TZ", "Etc/GMT-14")  # UTC+14
            time.tzset()
            with pytest.raises(InputError) as refused:
                since_value("0001-01-01")
            assert since_value("0001-01-02T00:00:00+00:00").year == 1  # an aware time has one
    finally:
        time.tzset()
    assert str(refused.value) == (
        "since 0001-01-01 is out of range: not a time this system can compare file times with"
    )


@pytest.mark.parametrize("text", ["999999d", "999999w", "800000w"])
def test_an_amount_that_reaches_back_before_year_1_is_out_of_range(monkeypatch, text):
    monkeypatch.setattr(since, "now", lambda: AT)
    with pytest.raises(InputError) as refused:
        since_value(text)
    assert str(refused.value) == (
        f"since {text!r} is out of range: that long ago is before the year 1; use a shorter time or a "
        "date (2026-01-01)"
    )
    assert parse_since("99999d", AT).year == 1752  # the longest that is still a date is one


@pytest.mark.parametrize(
    "text, words",
    [
        ("999999d", "is out of range"),
        ("999999w", "is out of range"),
        (f"{10**30}h", "is not a date"),
        ("-5d", "is not a date"),
        ("-999999w", "is not a date"),
        ("99999999999-01-01", "is not a date"),
    ],
)
def test_absurd_since_values_are_a_one_line_usage_error(text, words):
    from click.testing import CliRunner

    from novelfind.cli.group import cli

    result = CliRunner().invoke(cli, ["scan", ".", f"--since={text}"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: Invalid value for '--since': since ")
    assert words in lines[0] and "Traceback" not in result.output
