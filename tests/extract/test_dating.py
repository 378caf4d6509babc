"""The capture dates that travel with the vectors: cache rows to dates and back, a reader that fails."""

from __future__ import annotations

import math

import pytest

from novelfind.extract import dating
from novelfind.media.dates import NONE, Taken

WHEN = 1.6e9  # 2020-09-13, a believable capture instant


def test_stored_rows_and_back():
    taken = Taken(WHEN, "exif", -7200)
    row = dating.row_of("abc", taken)
    assert row == ("abc", WHEN, -7200, "exif")
    assert dating.stored(row[1:]) == taken
    unknown = dating.row_of("abc", Taken(source="invalid"))
    assert unknown == ("abc", None, None, "invalid")
    back = dating.stored(unknown[1:])
    assert math.isnan(back.seconds) and back.source == "invalid" and back.offset is None
    # a source the cache never keeps (it comes from sidecars or file times): nothing known
    assert dating.stored((WHEN, 0, "file")) is NONE
    assert dating.stored((WHEN, 0, "xmp")) is NONE


def test_a_reader_that_raises_is_no_date():
    def broken(path, now=None):
        raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dating.dates, "image_date", broken)
        assert dating.embedded_date("x.jpg") is NONE
