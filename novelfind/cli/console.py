"""What the commands print: stderr messages one line each, progress bars, results on stdout.

stdout carries results only; warnings, progress and the summary go to stderr, and ``-q`` leaves only
errors and unreadable files there. Also the scan's process-level plumbing: SIGTERM as Ctrl-C, and the
output of an engine with machinery of its own kept off stdout.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from novelfind.base.safe_text import one_line

if TYPE_CHECKING:
    from novelfind.results import Progress


def stderr_line(message: str) -> None:
    """Print one message on stderr as one line: every message novelfind prints there comes through here,
    so a file name cannot forge a line or speak to the terminal
    (:func:`novelfind.base.safe_text.one_line`)."""
    click.echo(one_line(message), err=True)


def plural(count: int, noun: str) -> str:
    """``1 photo``, ``2 photos``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def human_size(size: int) -> str:
    """``812 B``, ``3.4 KB``, ``1.2 MB``, ``5.0 GB`` (powers of 1000, as file managers show them)."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


@contextmanager
def redirect_engine_output(quiet: bool) -> Iterator[None]:
    """While an engine with machinery of its own runs (Ray: a core worker in this process, printing to
    the process's descriptors, and processes that inherit them): what it writes to stdout goes to stderr,
    since stdout carries results only, and with -q what it writes to either is dropped. novelfind's own
    messages keep going to the real stderr."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    try:
        out_fd, err_fd = sys.stdout.fileno(), sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # not real files (output captured by a caller)
        with redirect_stdout(sys.stderr):
            yield
        return
    saved_out, saved_err = os.dup(out_fd), os.dup(err_fd)
    previous = sys.stdout, sys.stderr
    sink = open(os.devnull, "w") if quiet else None
    try:
        if sink is None:
            os.dup2(err_fd, out_fd)
            sys.stdout = sys.stderr
        else:
            # novelfind writes to a new stream on the real stderr; the descriptors go nowhere. That stream
            # stays open: Ray's log handlers may hold it until the process ends.
            sys.stderr = open(
                os.dup(saved_err), "w", encoding=previous[1].encoding, errors="backslashreplace", buffering=1
            )
            sys.stdout = sink
            os.dup2(sink.fileno(), out_fd)
            os.dup2(sink.fileno(), err_fd)
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        sys.stdout, sys.stderr = previous
        os.dup2(saved_out, out_fd)
        os.dup2(saved_err, err_fd)
        os.close(saved_out)
        os.close(saved_err)
        if sink is not None:
            sink.close()


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM stops a scan like Ctrl-C: finished batches stay in the cache, exit code 130."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Console:
    """stderr messages; -q leaves only errors and unreadable files."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def unreadable(self, path: Path, reason: str) -> None:
        """A file that could not be read: always reported, once."""
        stderr_line(f"warning: cannot read {path}: {reason}")

    def problem(self, message: str) -> None:
        """A warning shown even with -q (something the run was asked to write was not written)."""
        stderr_line(f"warning: {message}")

    def problem_note(self, message: str) -> None:
        """A note shown even with -q: the run changed something the user relies on (a list emptied)."""
        stderr_line(f"note: {message}")

    def warn(self, message: str) -> None:
        if not self.quiet:
            stderr_line(f"warning: {message}")

    def note(self, message: str) -> None:
        if not self.quiet:
            stderr_line(f"note: {message}")

    def info(self, message: str) -> None:
        if not self.quiet:
            stderr_line(message)

    @contextmanager
    def progress_bars(self) -> Iterator[Any]:
        """An ``on_progress`` callback: tqdm bars on stderr for a person watching (not with -q, not
        into a file or pipe), and the note that the run waits for another one."""
        bars = ProgressBars(enabled=not self.quiet and sys.stderr.isatty(), console=self)
        try:
            yield bars
        finally:
            bars.close()


class ProgressBars:
    """Turns :class:`novelfind.results.Progress` events into tqdm bars on stderr, one per stage."""

    LABELS = {"walk": "walking", "extract": "extracting", "dates": "reading dates", "report": "report"}

    def __init__(self, *, enabled: bool, console: Console) -> None:
        self.enabled = enabled
        self.console = console
        self.bar: Any = None
        self.stage: str | None = None

    def __call__(self, event: Progress) -> None:
        if event.stage == "wait":
            self.console.note(f"waiting for another novelfind run writing {event.path}")
            return
        if not self.enabled or event.stage not in self.LABELS:
            return
        if event.stage != self.stage:
            self.close()
            from tqdm import tqdm

            self.bar = tqdm(
                total=event.total,
                unit="img",
                desc=self.LABELS[event.stage],
                file=sys.stderr,
                dynamic_ncols=True,
                leave=False,
            )
            self.stage = event.stage
        self.bar.update(event.done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.bar, self.stage = None, None


def write_stdout(data: bytes) -> None:
    """Results to stdout. A reader that stops early (``| head``) is not an error: the rest is dropped."""
    if sys.stdout is None:  # started with stdout closed
        return
    try:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
        os.close(devnull)
