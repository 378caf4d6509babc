"""Names shown to a person: one message stays one line, and a file name cannot speak to the terminal.

A file name may hold any byte but ``/`` and NUL: a newline followed by ``warning: ...`` forges a line of
novelfind's own, an escape sequence sets the terminal's title or colours, and U+2028, U+2029 and U+0085
end a line for ``str.splitlines`` and many viewers. :func:`one_line` escapes all of them; the command
line passes every message it prints on stderr through it, whoever built the message, and messages the
library builds about outputs, sidecars, the cache and the config file name paths with :func:`display`
(for callers that print exceptions themselves). Written here rather than taken from a library: the
standard library's ``repr`` quotes and escapes every non-ASCII letter, which makes ordinary names
(``Été.jpg``) unreadable.

Backslashes are left as they are: this is for reading, not for parsing (the result formats of
:mod:`novelfind.outputs.formats` are the exact, reversible ones).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

# C0 controls, DEL, C1 controls (U+0085 among them), the Unicode line and paragraph separators, the
# bidirectional overrides and isolates (which reorder what follows them on screen), and lone surrogates
# (the bytes of a file name that are not UTF-8).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\e"}


def escaped(ch: str, named: Mapping[str, str], wide_from: int) -> str:
    """``ch`` written as an escape: its name in ``named``; an undecodable byte of a file name
    (surrogateescape) as ``\\xHH`` of that byte; a code point from ``wide_from`` up as ``\\uXXXX``; any
    other as ``\\xHH``."""
    if ch in named:
        return named[ch]
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}" if code >= wide_from else f"\\x{code:02x}"


def _escape(match: re.Match[str]) -> str:
    return escaped(match.group(), _NAMED, 0x100)


def one_line(text: str) -> str:
    """``text`` with every control character, line separator and bidirectional override escaped."""
    return _UNSAFE.sub(_escape, str(text))


def display(path: str | os.PathLike[str]) -> str:
    """A path as a message shows it: :func:`one_line` of its text."""
    return one_line(os.fspath(path))
