"""Reading JSON, TOML and XML that someone else may have written, with bounded size and nesting.

The standard library's parsers recurse once per level of nesting: a planted picks manifest of 100,000
``[`` ends ``json.loads`` in ``RecursionError`` (and a C parser that recurses without Python's guard, as
libexiv2's XMP toolkit does, in a crash). Every file novelfind reads back (the picks manifest, the ignore
list, a config file, XMP sidecars, the record of tagged sidecars) goes through here: its size is checked,
its depth is measured *before* it is parsed (a scan of its brackets or tags, linear and without
recursion), and anything that cannot be read becomes :class:`UnreadableError`, a ``ValueError``, which
each caller turns into its documented behaviour (an empty manifest with one warning, a usage error
naming the file, a sidecar skipped with one line).

What novelfind writes is a few levels deep (the manifest: 3, the ignore list: 3, a config file: 2,
an XMP packet: about 10), so the bounds below leave a wide margin.
"""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ElementTree
from typing import Any

import numpy as np

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

MAX_DEPTH = 64  # levels of nesting a JSON or TOML document may have
MAX_XML_DEPTH = 256  # elements within elements in an XML document (an XMP packet has about 10)

# a JSON string (its escapes included), found left to right: brackets inside strings are no nesting
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


class UnreadableError(ValueError):
    """The document is too large, nested too deeply, or not valid; the message says which in a few words
    (the parser's own for a syntax error), to follow "is not valid JSON:" or "is damaged"."""


def _as_bytes(data: bytes | str) -> bytes:
    return data.encode("utf-8", "surrogateescape") if isinstance(data, str) else bytes(data)


def _check_size(raw: bytes, max_bytes: int) -> None:
    if len(raw) > max_bytes:
        raise UnreadableError(f"larger than {max_bytes} bytes")


def _bracket_depth(raw: bytes) -> int:
    """The deepest nesting of ``[ ] { }`` outside JSON strings (TOML's inline tables and arrays too):
    a running sum over the brackets alone, in numpy, so a 1 MB file of brackets costs milliseconds."""
    brackets = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    steps = np.frombuffer(brackets, np.uint8)
    change = np.where((steps == ord("[")) | (steps == ord("{")), 1, -1).astype(np.int64)
    return int(np.cumsum(change).max(initial=0))


def load_json(data: bytes | str, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON document in ``data``; UnreadableError when it is over ``max_bytes``, nested deeper than
    ``max_depth``, or not valid JSON (UTF-8; bytes that are not UTF-8 stay as surrogate escapes)."""
    raw = _as_bytes(data)
    _check_size(raw, max_bytes)
    depth = _bracket_depth(raw)
    if depth > max_depth:
        raise UnreadableError(f"nested {depth} levels deep (at most {max_depth} are read)")
    text = data if isinstance(data, str) else raw.decode("utf-8", "surrogateescape")
    try:
        return json.loads(text)
    except (ValueError, RecursionError, MemoryError) as err:
        raise UnreadableError(_first_line(err)) from None


def load_toml(data: bytes | str, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """The TOML document in ``data``; UnreadableError when it is over ``max_bytes``, nested deeper than
    ``max_depth``, not UTF-8, or not valid TOML.

    The depth is counted over every bracket (TOML's strings are not told apart here), so it is an upper
    bound: a document is refused only when its brackets alone reach ``max_depth``, which no real config
    file does.
    """
    raw = _as_bytes(data)
    _check_size(raw, max_bytes)
    depth = _bracket_depth(raw)
    if depth > max_depth:
        raise UnreadableError(f"nested {depth} levels deep (at most {max_depth} are read)")
    try:
        text = data if isinstance(data, str) else raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UnreadableError("not UTF-8 text") from None
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError, MemoryError) as err:
        raise UnreadableError(_first_line(err)) from None


def check_xml(data: bytes, *, max_bytes: int, max_depth: int = MAX_XML_DEPTH) -> None:
    """UnreadableError unless ``data`` is well-formed XML of at most ``max_bytes`` and ``max_depth`` levels.

    Parsed incrementally (expat, 64 KiB at a time) and stopped at the first element too deep, before
    anything builds a tree; expat refuses external entities here and bounds entity expansion.
    """
    raw = bytes(data)
    _check_size(raw, max_bytes)
    parser = ElementTree.XMLPullParser(events=("start", "end"))
    depth = 0
    try:
        for start in range(0, max(len(raw), 1), 1 << 16):
            parser.feed(raw[start : start + (1 << 16)])
            for event, element in parser.read_events():
                if event == "start":
                    depth += 1
                    if depth > max_depth:
                        raise UnreadableError(f"elements nested more than {max_depth} deep")
                else:
                    depth -= 1
                    element.clear()  # nothing is kept: this only checks
        parser.close()
    except ElementTree.ParseError as err:
        raise UnreadableError(f"not well-formed XML ({_first_line(err)})") from None
    except (RecursionError, MemoryError) as err:
        raise UnreadableError(f"cannot be parsed ({type(err).__name__})") from None


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return (text.splitlines()[0] if text else type(err).__name__)[:200]
