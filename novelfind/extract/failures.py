"""The files a scan cannot read: each reported once, and remembered in the cache so that the next scan
does not report it again while it stays as it was.

:class:`FailureLog` takes every failure of a scan (the walk's and the extraction's) through :meth:`fail`:
one on the ignore list (``novelfind ignore broken.jpg``) is skipped without a word; one an earlier scan
reported and that has not changed since is a known failure (counted, not reported again); any other goes
to ``on_failure``. A recorded file stays in the record while it stays unreadable, also once it is put on
the ignore list, so that later scans neither decode it again nor load the model for it
(``stage.Stage.known_failures``); a file ignored before any scan reported it is not recorded (taken off
the list again, it is reported as new). Failures met before the cache is open (the walk's) wait for it
(:meth:`FailureLog.open`); :meth:`FailureLog.remember` writes the record back
(:mod:`novelfind.cache.failures`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from novelfind.errors import NovelfindError
from novelfind.media.ignore import IgnoreList
from novelfind.media.walk import FileList, ImageFile
from novelfind.picks import Failure


class FailureLog:
    """One scan's unreadable files, in the order met."""

    def __init__(
        self,
        on_failure: Callable[[Path, str], None] | None,
        on_warning: Callable[[str], None],
        ignore_list: IgnoreList | None = None,
    ) -> None:
        self.on_failure = on_failure
        self.on_warning = on_warning
        self.ignore_list = ignore_list
        self.failures: list[Failure] = []  # every file that could not be read, in the order met
        self.known_failures: list[Failure] = []  # of those, the ones an earlier scan reported (unchanged)
        self.stats: dict[Path, tuple[int, int]] = {}  # (size, mtime_ns) of each failure, (-1, -1): none
        self.known: dict[bytes, Any] | None = None  # the cache's record of unreadable files, once open
        self.pending: list[Failure] = []  # failures met before the cache was open (the walk's)
        self.ignored = 0  # unreadable files the user put on the ignore list: skipped silently
        self.ignored_failures: list[Failure] = []  # those files: still recorded when they were before

    def fail(self, path: Path, reason: str) -> None:
        """A file that could not be read (see the module's description)."""
        failure = Failure(Path(path), reason)
        try:
            st = os.stat(failure.path)
            stat = (st.st_size, st.st_mtime_ns)
        except OSError:
            stat = (-1, -1)
        self.stats[failure.path] = stat
        if self.on_ignore_list(failure.path, stat[0]):
            self.ignored += 1
            self.ignored_failures.append(failure)
            return
        self.failures.append(failure)
        if self.known is None:
            self.pending.append(failure)
        else:
            self.report(failure)

    def on_ignore_list(self, path: Path, size: int) -> bool:
        """Whether the unreadable file at ``path`` is on the ignore list (by the digest of its bytes)."""
        if self.ignore_list is None or size < 0:
            return False
        try:
            found = self.ignore_list.find([[ImageFile(path, size, 0)]])
        except NovelfindError:
            return False
        return bool(found.mask[0])

    def report(self, failure: Failure) -> None:
        known = self.known.get(os.fsencode(os.path.abspath(failure.path))) if self.known else None
        if known is not None and (known.size, known.mtime_ns) == self.stats[failure.path]:
            self.known_failures.append(failure)
        elif self.on_failure is not None:
            self.on_failure(failure.path, failure.reason)

    def open(self, cache: Any) -> None:
        """Read the cache's record of unreadable files (:mod:`novelfind.cache.failures`) and report the
        failures met so far against it."""
        try:
            self.known = cache.known_failures()
        except NovelfindError:
            self.known = {}  # an unreadable record: every failure is new
        for failure in self.pending:
            self.report(failure)
        self.pending.clear()

    def remember(self, cache: Any, files: FileList, roots: Sequence[Path]) -> None:
        """Record this run's unreadable files in the cache (and keep those recorded before that are on the
        ignore list now: a later scan skips them unread), and forget those read now (or gone) under
        ``roots``: a file fixed, or changed and readable, is reported again if it ever fails again."""
        known = self.known or {}
        every = [
            *self.failures,
            *(f for f in self.ignored_failures if os.fsencode(os.path.abspath(f.path)) in known),
        ]
        failed = {os.fsencode(os.path.abspath(f.path)) for f in every}
        rows = [(os.fsencode(os.path.abspath(f.path)), *self.stats[f.path], f.reason) for f in every]
        under = [os.fsencode(os.path.abspath(root)) for root in roots]
        forget = [
            path
            for path in known
            if path not in failed
            and any(path == root or path.startswith(root.rstrip(b"/") + b"/") for root in under)
        ]
        try:
            cache.record_failures(rows, forget)
        except NovelfindError as err:
            self.on_warning(f"cannot remember the unreadable files: {err}")
