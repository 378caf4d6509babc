"""The results-list formats (``--format``): TSV, CSV, JSON, JSON Lines and the path lists, with the
escaping that keeps one pick on one line.

The formats are described in ``docs/output-schema.md``. The HTML report and the contact sheet are in
:mod:`novelfind.outputs.report`; placing the picks in a folder is :mod:`novelfind.outputs.placement`.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from novelfind.base.safe_text import escaped
from novelfind.picks import Pick, iso_utc

RESULT_SCHEMA = "novelfind/results"
RESULT_SCHEMA_VERSION = 2  # 2: a pick is a moment (a representative and its members), K counts moments
FORMATS = ("tsv", "json", "jsonl", "csv", "paths", "paths0", "members", "members0")
CSV_COLUMNS = (
    "rank",
    "score",
    "path",
    "size",
    "mtime",
    "neighbour",
    "distance",
    "also",
    "member_count",
    "taken",
    "taken_source",
    "labels",
    "span_first",
    "span_last",
)  # columns are only ever appended
# one line per pick, for cut and awk: what a person needs to act on it. Columns are only ever appended;
# an unknown value is "-" (never an empty field, so that awk's default splitting keeps the columns)
TSV_COLUMNS = ("rank", "score", "path", "member_count", "taken", "span")
TSV_UNKNOWN = "-"


def format_results(
    picks: Sequence[Pick],
    fmt: str = "tsv",
    *,
    failures: Iterable[tuple[Path | str, str]] = (),
    run: Mapping[str, Any] | None = None,
) -> str:
    """Render the picks (best first) as one of :data:`FORMATS`.

    ``tsv`` and ``paths`` escape ``\\``, tab, newline and other control characters so that one
    line is always one pick; ``paths0`` is NUL-separated and exact; ``members`` and ``members0`` are
    ``paths`` and ``paths0`` with each pick followed by its moment's members (every photo of every
    moment); ``json``/``jsonl`` are the versioned schema of ``docs/output-schema.md``. ``failures``
    and ``run`` only appear in ``json`` and ``jsonl``. Raises ValueError for an unknown format.
    """
    picks = sorted(picks, key=lambda p: p.rank)
    if fmt == "tsv":
        return "".join("\t".join(_tsv_fields(p)) + "\n" for p in picks)
    if fmt in ("paths", "paths0", "members", "members0"):
        every = fmt.startswith("members")  # each pick followed by its members
        paths = [path for p in picks for path in (p.path, *(m.path for m in p.members if every))]
        if fmt.endswith("0"):
            return "".join(f"{path}\0" for path in paths)
        return "".join(f"{escape_field(str(path))}\n" for path in paths)
    if fmt == "csv":
        return _format_csv(picks)
    failure_rows = [{"path": str(path), "reason": str(reason)} for path, reason in failures]
    if fmt == "json":
        doc = {
            "schema": RESULT_SCHEMA,
            "version": RESULT_SCHEMA_VERSION,
            "run": _json_safe(dict(run or {})),
            "picks": [_pick_record(p) for p in picks],
            "failures": failure_rows,
        }
        return dumps_json(doc, indent=2) + "\n"
    if fmt == "jsonl":
        lines = [
            {
                "type": "run",
                "schema": RESULT_SCHEMA,
                "version": RESULT_SCHEMA_VERSION,
                "run": _json_safe(dict(run or {})),
            }
        ]
        lines += [{"type": "pick", **_pick_record(p)} for p in picks]
        lines += [{"type": "failure", **row} for row in failure_rows]
        return "".join(dumps_json(line) + "\n" for line in lines)
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
# Also C1 controls and U+2028 / U+2029: ``str.splitlines`` (and many viewers) end a line at U+0085,
# U+2028 and U+2029, so one pick would read as two.
_NEEDS_ESCAPE = re.compile(r"[\\\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_ESCAPE_TOKEN = re.compile(r"\\(\\|t|n|r|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4})")


def _escape_char(match: re.Match[str]) -> str:
    # from 0x80 up \uXXXX (a C1 control, a line separator, a lone surrogate): \xHH from 80 up stands for
    # an undecodable byte of the file name
    return escaped(match.group(), _ESCAPES, 0x80)


def escape_field(text: str) -> str:
    """Escape a path for the line formats: ``\\\\ \\t \\n \\r``, ``\\xHH`` for other C0 control
    characters and for bytes that are not UTF-8, ``\\uHHHH`` for C1 controls (U+0085) and the line
    separators U+2028 / U+2029. Ordinary names come out unchanged."""
    return _NEEDS_ESCAPE.sub(_escape_char, text)


def unescape_field(text: str) -> str:
    """Invert :func:`escape_field`; ``os.fsencode`` of the result gives the original bytes."""

    def one(match: re.Match[str]) -> str:
        token = match.group(1)
        if token in ("\\", "t", "n", "r"):
            return {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}[token]
        code = int(token[1:], 16)
        if token[0] == "x" and code >= 0x80:
            return chr(0xDC00 + code)
        return chr(code)

    return _ESCAPE_TOKEN.sub(one, text)


def _tsv_fields(p: Pick) -> list[str]:
    """One tsv line's fields, in the order of :data:`TSV_COLUMNS`."""
    fields = {
        "rank": str(p.rank),
        "score": _score(p.score),
        "path": escape_field(str(p.path)),
        "member_count": str(len(p.members)),
        "taken": p.taken or TSV_UNKNOWN,
        "span": span_text(p) or TSV_UNKNOWN,
    }
    return [fields[name] for name in TSV_COLUMNS]


def span_text(p: Pick) -> str | None:
    """The moment's time span as an ISO 8601 interval, ``FIRST/LAST`` (the JSON ``span``'s times); None
    without capture times."""
    span = _span(p)
    return None if span is None else f"{span['first']}/{span['last']}"


def _score(score: float) -> str:
    return f"{_finite_score(score):.6f}"


def _finite_score(value: Any) -> float:
    """A pick's score: a finite number, or an internal error (the ranking never gives a bound or NaN as a
    score; turning one into null or ``inf`` would hide the fault in the output)."""
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"internal error: a pick's score is {number}, not a finite number")
    return number


def _pick_record(p: Pick) -> dict[str, Any]:
    return {
        "rank": int(p.rank),
        "score": _finite_score(p.score),
        "path": str(p.path),
        "size": int(p.size),
        "mtime": iso_utc(p.mtime_ns),
        "mtime_ns": int(p.mtime_ns),
        "neighbour": None if p.neighbour is None else str(p.neighbour),
        "distance": None if p.distance is None else _finite(p.distance),
        "also": [str(path) for path in p.also],
        "kind": p.kind,
        "clip": None if p.clip is None else p.clip.as_json(),
        "member_count": len(p.members),
        "members": [str(m.path) for m in p.members],
        "taken": p.taken,
        "taken_source": p.taken_source,
        "members_taken": [m.taken for m in p.members],  # lined up with "members"
        "members_taken_source": [m.taken_source for m in p.members],
        "labels": [{"label": label.label, "p": round(float(label.p), 4)} for label in p.labels],
        "span": _span(p),
    }


def labels_text(p: Pick) -> str:
    """``telescope 0.41, planetarium 0.12``: the model's classes for a pick, for people (csv, report)."""
    return ", ".join(f"{label.label} {label.p:.2f}" for label in p.labels)


def span_times(p: Pick) -> tuple[str, str] | None:
    """The first and last capture time of the moment's dated photos, ISO 8601 without a zone (the
    camera's clock, as the ranking was given it: ``2024-06-04T20:05:00``); None without capture times."""
    if p.span is None:
        return None
    first, last = (datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") for t in p.span)
    return first, last


def _span(p: Pick) -> dict[str, Any] | None:
    """The moment's time span: first and last capture time (``span_times``) and how many photos it
    holds; null without capture times."""
    times = span_times(p)
    if times is None:
        return None
    return {"first": times[0], "last": times[1], "photos": 1 + len(p.members)}


def _finite(value: Any) -> float | None:
    """JSON has no NaN or infinity: those become null."""
    number = float(value)
    return number if math.isfinite(number) else None


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float) or (hasattr(obj, "dtype") and getattr(obj, "ndim", 1) == 0):
        try:
            return _finite(obj) if isinstance(obj, float) or obj.dtype.kind == "f" else obj
        except (TypeError, ValueError):
            return obj
    if isinstance(obj, Mapping):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def _format_csv(picks: Sequence[Pick]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")  # RFC 4180
    writer.writerow(CSV_COLUMNS)
    for p in picks:
        rec = _pick_record(p)
        writer.writerow(
            [
                rec["rank"],
                _score(p.score),
                rec["path"],
                rec["size"],
                rec["mtime"],
                "" if rec["neighbour"] is None else rec["neighbour"],
                "" if rec["distance"] is None else f"{rec['distance']:.6f}",
                json.dumps(rec["also"], ensure_ascii=False) if rec["also"] else "",
                rec["member_count"],
                rec["taken"] or "",
                rec["taken_source"],
                labels_text(p),
                *(span_times(p) or ("", "")),
            ]
        )
    return out.getvalue()


# Lone surrogates (undecodable file-name bytes), and the characters ``str.splitlines`` ends a line at
# that JSON leaves raw (U+0085, U+2028, U+2029): escaped, one JSON Lines record stays one line.
_JSON_ESCAPE = re.compile(r"[\x85\u2028\u2029\ud800-\udfff]")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if hasattr(obj, "tolist"):  # numpy arrays
        return obj.tolist()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, datetime):
        return obj.isoformat()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def dumps_json(obj: Any, indent: int | None = None) -> str:
    """JSON, UTF-8 readable; undecodable file-name bytes as ``\\udcXX`` escapes (round-trip
    with ``json.loads`` + ``os.fsencode``)."""
    text = json.dumps(obj, ensure_ascii=False, indent=indent, default=_json_default, allow_nan=False)
    return _JSON_ESCAPE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
