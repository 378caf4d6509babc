"""``one_line`` and ``display``: a message stays one line, and a name in it cannot speak to the terminal,
while ordinary names (accents, other scripts, backslashes) read as they are."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from novelfind.base.safe_text import display, escaped, one_line


def test_ordinary_text_is_left_as_it_is():
    for text in ("IMG_0001.jpg", "Été à Paris/photo 1.jpg", "写真/猫.png", "a\\nb", "tab-less  spaces", ""):
        assert one_line(text) == text


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\n", "\\n"),
        ("\r", "\\r"),
        ("\t", "\\t"),
        ("\x1b", "\\e"),
        ("\x00", "\\x00"),
        ("\x07", "\\x07"),
        ("\x7f", "\\x7f"),
        ("\x85", "\\x85"),
        ("\x9f", "\\x9f"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
        ("\u202a", "\\u202a"),
        ("\u202e", "\\u202e"),
        ("\u2066", "\\u2066"),
        ("\u2069", "\\u2069"),
    ],
)
def test_each_unsafe_character_has_its_escape(raw, shown):
    assert one_line(f"a{raw}b") == f"a{shown}b"


def test_a_forged_warning_line_stays_on_the_line_of_the_name():
    name = "photo.jpg\nwarning: your library is corrupt\r\n"
    shown = one_line(f"cannot read {name}")
    assert shown.splitlines() == [shown]
    assert shown == "cannot read photo.jpg\\nwarning: your library is corrupt\\r\\n"


def test_escape_sequences_lose_their_escape_character():
    title = "\x1b]0;owned\x07"
    colour = "\x1b[31mred\x1b[0m"
    assert one_line(title) == "\\e]0;owned\\x07"
    assert one_line(colour) == "\\e[31mred\\e[0m"
    assert "\x1b" not in one_line(title + colour)


def test_bytes_of_a_file_name_that_are_not_utf8_show_as_those_bytes():
    name = os.fsdecode(b"caf\xe9-\xff.jpg")  # surrogate escapes on a UTF-8 file system
    assert one_line(name) == "caf\\xe9-\\xff.jpg"
    assert one_line("\ud800") == "\\ud800"  # a lone surrogate that is no escaped byte


def test_the_result_is_safe_to_print_and_escaping_is_not_undone_by_repeating():
    text = "x\ny\x1bz\u2028"
    once = one_line(text)
    assert one_line(once) == once
    assert once.encode("utf-8")  # no lone surrogates are left


def test_display_takes_paths_and_strings():
    assert display(Path("/photos/a\nb.jpg")) == "/photos/a\\nb.jpg"
    assert display("/photos/ok.jpg") == "/photos/ok.jpg"


def test_one_line_takes_any_object_by_its_text():
    assert one_line(ValueError("bad\nvalue")) == "bad\\nvalue"  # type: ignore[arg-type]


def test_escaped_uses_the_names_given_and_the_width_asked():
    assert escaped("\n", {"\n": "<NL>"}, 0x100) == "<NL>"
    assert escaped("\x85", {}, 0x80) == "\\u0085"
    assert escaped("\x85", {}, 0x100) == "\\x85"
    assert escaped("\udcff", {}, 0x80) == "\\xff"
