"""Reading documents someone else may have written: size and nesting are bounded before parsing, and
whatever cannot be read is one ``UnreadableError`` with a short reason."""

from __future__ import annotations

import pytest

from novelfind.base.safe_load import (
    MAX_DEPTH,
    MAX_XML_DEPTH,
    UnreadableError,
    check_xml,
    load_json,
    load_toml,
)


def test_json_round_trips_from_text_and_bytes():
    doc = {"version": 1, "items": [{"path": "/p/Été.jpg", "size": 3}], "ok": True}
    text = '{"version": 1, "items": [{"path": "/p/\\u00c9t\\u00e9.jpg", "size": 3}], "ok": true}'
    assert load_json(text, max_bytes=1000) == doc
    assert load_json(text.encode(), max_bytes=1000) == doc


def test_json_over_the_size_is_refused_at_the_size_and_not_one_byte_before():
    text = '"' + "x" * 98 + '"'  # 100 bytes
    assert load_json(text, max_bytes=100) == "x" * 98
    with pytest.raises(UnreadableError) as err:
        load_json(text, max_bytes=99)
    assert str(err.value) == "larger than 99 bytes"


def test_json_nested_too_deeply_is_refused_before_parsing():
    assert load_json("[" * MAX_DEPTH + "]" * MAX_DEPTH, max_bytes=10_000) is not None
    deep = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    with pytest.raises(UnreadableError) as err:
        load_json(deep, max_bytes=10_000)
    assert str(err.value) == f"nested {MAX_DEPTH + 1} levels deep (at most {MAX_DEPTH} are read)"
    with pytest.raises(UnreadableError, match=r"^nested 100000 levels deep \(at most 3 are read\)$"):
        load_json("[" * 100_000, max_bytes=1 << 20, max_depth=3)


def test_brackets_inside_json_strings_are_no_nesting():
    text = '{"a": "[[[[[[{{{{{{\\"[[[["}'
    assert load_json(text, max_bytes=1000, max_depth=1) == {"a": '[[[[[[{{{{{{"[[[['}


def test_json_that_is_not_valid_gives_the_parsers_first_line():
    with pytest.raises(UnreadableError) as err:
        load_json('{"a": ', max_bytes=1000)
    assert str(err.value).startswith("Expecting value")
    assert "\n" not in str(err.value)


def test_json_bytes_that_are_not_utf8_are_kept_as_escapes():
    assert load_json(b'["caf\xe9"]', max_bytes=100) == ["caf\udce9"]


def test_toml_round_trips_and_is_bounded_like_json():
    text = 'top = 3\n[scan]\nk = 10\nmethods = ["ads", "knn"]\n'
    assert load_toml(text, max_bytes=1000) == {"top": 3, "scan": {"k": 10, "methods": ["ads", "knn"]}}
    assert load_toml(text.encode(), max_bytes=1000)["scan"]["k"] == 10
    with pytest.raises(UnreadableError, match=r"^larger than 10 bytes$"):
        load_toml(text, max_bytes=10)
    deep = "x = " + "[" * 5 + "]" * 5 + "\n"
    with pytest.raises(UnreadableError, match=r"^nested 5 levels deep \(at most 4 are read\)$"):
        load_toml(deep, max_bytes=1000, max_depth=4)


def test_toml_that_is_not_utf8_or_not_valid_is_refused():
    with pytest.raises(UnreadableError) as err:
        load_toml(b'name = "caf\xe9"\n', max_bytes=1000)
    assert str(err.value) == "not UTF-8 text"
    with pytest.raises(UnreadableError) as err:
        load_toml("top = = 3\n", max_bytes=1000)
    assert str(err.value) and "\n" not in str(err.value)


def test_unreadable_is_a_value_error():
    assert issubclass(UnreadableError, ValueError)


def test_well_formed_xml_passes_and_returns_nothing():
    xmp = b'<?xml version="1.0"?><x:xmpmeta xmlns:x="adobe:ns:meta/"><a><b>text</b></a></x:xmpmeta>'
    assert check_xml(xmp, max_bytes=1000) is None


def test_xml_over_the_size_or_nested_too_deeply_is_refused():
    with pytest.raises(UnreadableError, match=r"^larger than 5 bytes$"):
        check_xml(b"<a></a>", max_bytes=5)
    n = MAX_XML_DEPTH
    check_xml(b"<a>" * n + b"</a>" * n, max_bytes=1 << 20)
    with pytest.raises(UnreadableError) as err:
        check_xml(b"<a>" * (n + 1) + b"</a>" * (n + 1), max_bytes=1 << 20)
    assert str(err.value) == f"elements nested more than {n} deep"


def test_deep_xml_is_refused_without_reading_it_all():
    """Stopped at the first element too deep: a document of a million open elements, never closed, is
    refused for its depth rather than as badly formed."""
    with pytest.raises(UnreadableError, match=r"^elements nested more than 10 deep$"):
        check_xml(b"<a>" * 1_000_000, max_bytes=1 << 23, max_depth=10)


@pytest.mark.parametrize("data", [b"", b"<a>", b"<a></b>", b"not xml", b"<a>&undefined;</a>"])
def test_xml_that_is_not_well_formed_is_refused_with_the_reason(data):
    with pytest.raises(UnreadableError) as err:
        check_xml(data, max_bytes=1000)
    assert str(err.value).startswith("not well-formed XML (")
