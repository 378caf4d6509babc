"""A time as people write it for ``--since``: an amount of time ago, a day by name, or ISO 8601.

``7d``, ``2w``, ``36h`` count back from now; ``today`` and ``yesterday`` start at local midnight; an ISO
date or date-time without an offset is local time. :func:`since_value` also checks what a caller passes
(a datetime or such text) and that it is a time file times can be compared with.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from novelfind.errors import InputError

# ``since`` as people write it: an amount of time ago, or a day by name (its midnight, local time).
SINCE_UNITS = {"h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}
SINCE_DAYS = {"today": 0, "yesterday": 1}
_RELATIVE = re.compile(r"(\d{1,6})\s*([hdw])", re.IGNORECASE)


def now() -> datetime:
    """This moment, aware, in local time: what relative ``since`` values count back from."""
    return datetime.now().astimezone()


def parse_since(text: str, at: datetime | None = None) -> datetime:
    """The time ``since`` names (``at``: now): ``7d``, ``2w``, ``36h`` before ``at``; ``today`` and
    ``yesterday`` from local midnight; else an ISO 8601 date or date-time (naive: local time, ``Z`` or
    ``+02:00``: that offset). InputError for anything else, and for an amount of time that reaches back
    before the year 1 (``999999d``)."""
    value = text.strip()
    at = now() if at is None else at
    m = _RELATIVE.fullmatch(value)
    if m is not None:
        try:  # at most six digits: 999999w is 19,000 years, before the year 1 that datetime starts at
            return at - int(m.group(1)) * SINCE_UNITS[m.group(2).lower()]
        except OverflowError:
            raise InputError(
                f"since {text!r} is out of range: that long ago is before the year 1; use a shorter time "
                "or a date (2026-01-01)"
            ) from None
    if value.lower() in SINCE_DAYS:
        midnight = at.replace(hour=0, minute=0, second=0, microsecond=0)
        return midnight - timedelta(days=SINCE_DAYS[value.lower()])
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise InputError(
            f"since {text!r} is not a date: use 7d, 2w, 36h, today, yesterday, 2026-01-01, "
            "2026-01-01T10:00:00 or 2026-01-01T10:00:00+02:00"
        ) from None


def since_value(value: Any) -> datetime | None:
    """``since`` as a scan takes it: None, a datetime, or the text :func:`parse_since` reads; InputError
    for anything else, and for a time with no POSIX timestamp, which would fail only after every photo
    was extracted."""
    if isinstance(value, str):
        value = parse_since(value)
    if value is not None and not isinstance(value, datetime):
        raise InputError(f"since must be a datetime or a date's text, got {value!r}")
    if value is not None and not _is_timestamp(value):
        raise InputError(
            f"since {value.date().isoformat()} is out of range: not a time this system can "
            "compare file times with"
        )
    return value


def _is_timestamp(when: datetime) -> bool:
    """Whether ``when`` has a POSIX timestamp: ``0001-01-01`` in local time has none (its conversion to
    UTC falls before year 1)."""
    try:
        when.timestamp()
    except (OverflowError, OSError, ValueError):
        return False
    return True
