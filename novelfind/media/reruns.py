"""Re-running a line: what the last run of each line with ``ignore_picks`` ranked, so that a run with
nothing new since leaves the outputs, the tags and the ignore list as they were.

A *line* is a scan run again and again the same way: the README's Sunday line from cron, and the same line
run by hand to check it. It is named by its folders and options (:func:`line_name`, given them by
``results.line_options``): all but ``since``, which a cron line writes as a date that moves each day, and
the settings that only change how fast or where it runs. With ``ignore_picks`` a line puts its picks on the
ignore list, so its next run would find them ignored and pick the next photos down the ranking, then the
next, until the whole window was picked. So each run of such a line records the photos of its window (those
taken since ``since``, or every photo) in :class:`LineRecord`; the next run of the same line takes as
candidates only the photos of its window that are new since (``LineRecord.considered`` is False for them)
and not on the ignore list (``ignore.select``). With none, nothing is ranked and the outputs stay as they
were (``Selection.nothing_new``). Every photo still counts as part of the library: new photos are ranked
against all of them.

A photo is known here by its path, size and modification time (a 64-bit hash of the three): one moved,
renamed or changed since counts as new. The record is user data beside the ignore list it goes with
(``ignored.json``: ``ignored.lines.json``), one entry per line (the ``MAX_LINES`` run last) holding the
keys it considered as one sorted array (base64 of little-endian uint64: 8 bytes a photo, so a line over
ten million photos takes about 110 MB), read and written as the list is: under a lock file, atomically.
One that cannot be read is passed over with a warning (every photo of the window counts as new) and
written anew.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from novelfind.base import atomic, safe_load
from novelfind.base.atomic import write_atomic
from novelfind.base.lock import RunLock
from novelfind.errors import NovelfindError
from novelfind.media.walk import FileList

FORMAT_VERSION = 1
MAX_LINES = 64  # lines remembered; the one run longest ago is forgotten first
_RECORD_LIMIT = 1 << 30  # bytes: a line over a million photos takes about 11 MB


def record_path(ignore_list: str | os.PathLike[str]) -> Path:
    """Where the runs of the lines that use the ignore list ``ignore_list`` are recorded: beside it."""
    path = Path(ignore_list)
    return path.with_name(path.stem + ".lines.json")


def line_name(options: Mapping[str, Any]) -> str:
    """The name of the line with these folders and options (JSON values): a hash of them, 32 hex digits."""
    text = json.dumps(options, sort_keys=True, ensure_ascii=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def photo_keys(files: FileList) -> np.ndarray:
    """uint64 (N,): each photo's key in the record, from the file it is read from: its path, size and
    modification time, hashed."""
    return np.fromiter(
        (
            int.from_bytes(hashlib.blake2b(b"%s\0%d\0%d" % record, digest_size=8).digest(), "little")
            for record in files.records()
        ),
        dtype=np.uint64,
        count=len(files),
    )


def _packed(keys: np.ndarray) -> str:
    return base64.b64encode(np.unique(keys).astype("<u8").tobytes()).decode("ascii")


def _unpacked(text: str) -> np.ndarray:
    raw = base64.b64decode(text.encode("ascii"), validate=True)
    if len(raw) % 8:
        raise ValueError("keys of another length")
    return np.frombuffer(raw, dtype="<u8").astype(np.uint64)


class LineRecord:
    """The runs of one line (``line``, :func:`line_name`) in the record file ``path``, for the photos
    whose keys are ``keys`` (uint64 (N,), :func:`photo_keys`, row i for photo i).

    ``considered``: bool (N,), True for the photos the line's last run had in its window (all False for
    a line never run). ``on_warning`` hears of a record that cannot be read or written; the scan goes on.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        line: str,
        keys: np.ndarray,
        on_warning: Callable[[str], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.line = line
        self.keys = np.asarray(keys, dtype=np.uint64)
        self.on_warning = on_warning
        entry = self._load(warn=True).get(line)
        seen = _unpacked(entry["considered"]) if entry is not None else np.zeros(0, np.uint64)
        self.considered = np.isin(self.keys, seen)

    def _warn(self, message: str) -> None:
        if self.on_warning is not None:
            self.on_warning(message)

    def _load(self, *, warn: bool) -> dict[str, dict[str, Any]]:
        """The lines recorded; {} when there is no record, or (said once, with ``warn``) a damaged one."""
        try:
            raw = atomic.read_limited(self.path, _RECORD_LIMIT, follow_link=True)
        except (FileNotFoundError, NotADirectoryError):
            return {}
        except OSError as e:
            problem = e.strerror or str(e)
        else:
            try:
                doc = safe_load.load_json(raw, max_bytes=_RECORD_LIMIT)
                if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
                    raise ValueError("not a record of novelfind's")
                lines = doc["lines"]
                for entry in lines.values():
                    if not isinstance(entry.get("run"), str):
                        raise ValueError("an entry is not a line's")
                    _unpacked(entry["considered"])
                return lines
            except (ValueError, KeyError, AttributeError, TypeError, binascii.Error) as e:
                problem = f"damaged ({e})"
        if warn:
            self._warn(
                f"the record of earlier runs {self.path} cannot be read ({problem}): every photo since "
                "counts as new, and this run records itself anew"
            )
        return {}

    def remember(self, in_window: np.ndarray) -> None:
        """Record this run of the line: the photos ``in_window`` (bool (N,)) are those it considered."""
        considered = _packed(self.keys[np.asarray(in_window, dtype=bool)])
        run = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with RunLock(self.path.with_name(self.path.name + ".lock"), wait=True, label=str(self.path)):
                others = [item for item in self._load(warn=False).items() if item[0] != self.line]
                others.sort(key=lambda item: item[1]["run"], reverse=True)  # the one run last first
                this = {"run": run, "photos": int(np.count_nonzero(in_window)), "considered": considered}
                kept = [*others[: MAX_LINES - 1], (self.line, this)]
                doc = {"version": FORMAT_VERSION, "lines": dict(sorted(kept))}
                write_atomic(self.path, json.dumps(doc, separators=(",", ":")) + "\n")
        except (OSError, NovelfindError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            self._warn(
                f"cannot record this run in {self.path} ({reason}): the next run of the line counts every "
                "photo as new"
            )
