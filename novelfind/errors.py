"""Exit codes and the exceptions that carry them.

The core raises these; the command line turns them into one-line messages on stderr
and the matching exit code. Nothing else in the package decides an exit code.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # finished, every file read
    ERROR = 1  # could not finish (weights missing, output not writable, ...)
    USAGE = 2  # bad command line or input: missing folder, --k 0, unknown config key, an option whose
    #           optional dependency is not installed (--xmp without novelfind[xmp])
    PARTIAL = 3  # finished, but some files could not be read or sidecars written (listed on stderr)
    BUSY = 4  # another run holds the lock on the same output (with --no-wait)
    INTERRUPTED = 130  # stopped by Ctrl-C / SIGINT / SIGTERM; finished batches are kept


class NovelfindError(Exception):
    """An error the user can act on. The message is one line, without a traceback."""

    exit_code: ExitCode = ExitCode.ERROR


class InputError(NovelfindError, ValueError):
    """Bad input from the user: a missing folder, an impossible option value (also a ValueError)."""

    exit_code = ExitCode.USAGE


class ParameterError(InputError):
    """An impossible value of one parameter (``name``): the command line says where the value came from
    (the environment, a config file) when it was not typed."""

    def __init__(self, name: str, message: str) -> None:
        self.name = name
        super().__init__(message)


class NeedsError(ParameterError):
    """A parameter that takes effect only with another's value was given without it: ``xmp_keyword``
    without ``xmp``, ``epochs`` with a method that runs no solver, ``workers`` with the Ray engine. It
    keeps the names (``needs``: the other parameter; ``values``: those it takes effect with; ``chosen``:
    the one given, where said; ``also``: parameters that, set, give it effect as well), so the command
    line can say it in its flags (:meth:`said`)."""

    def __init__(
        self, name: str, needs: str, value: object, *, chosen: object = None, also: tuple[str, ...] = ()
    ) -> None:
        self.needs, self.value, self.chosen, self.also = needs, value, chosen, also
        self.name, self.values = name, value if isinstance(value, tuple) else (value,)
        super().__init__(name, self.said())

    def said(self, spell=lambda name, value: f"{name}={value!r}", named=lambda name: name) -> str:
        """The message, with ``spell(parameter, value)`` writing a parameter given a value and
        ``named(parameter)`` one that is set: ``epochs takes effect only with method='ads' or
        method='ads-paper', not method='cosine-knn'``."""
        with_ = " or ".join(spell(self.needs, v) for v in self.values)
        if self.also:
            with_ += f" or with {' or '.join(named(a) for a in self.also)}"
        not_ = "" if self.chosen is None else f", not {spell(self.needs, self.chosen)}"
        return f"{named(self.name)} takes effect only with {with_}{not_}"


class MissingExtraError(NovelfindError):
    """An option needs an optional dependency that is not installed (``pip install 'novelfind[xmp]'``)."""

    exit_code = ExitCode.USAGE


class WeightsError(NovelfindError):
    """The model weights could not be found or did not verify."""


class CacheError(NovelfindError):
    """The feature cache cannot be opened or written."""


class OutputError(NovelfindError):
    """A result file, report or copy destination cannot be written."""


class LockedError(NovelfindError):
    """Another run holds the lock."""

    exit_code = ExitCode.BUSY


class ClusterError(NovelfindError):
    """A compute cluster cannot be reached or used (extraction on Ray: no extra installed, no cluster at
    the address, no worker able to run, workers that kept failing)."""


class DecodeError(Exception):
    """One file could not be read as an image. ``str(err)`` is the reason.

    Not a NovelfindError: it never ends a scan, it is reported and the file is skipped.
    """


class FileRefused(DecodeError):
    """The file was not read: what is at its path now is not the regular file that was listed (a
    symbolic link renamed over it, a FIFO or device in its place, another size or modification time),
    as the library door (:mod:`novelfind.base.door`) found it. A scan reports it as it reports any file
    it cannot read; an output that meets it after the ranking (the report, the contact sheet) names it,
    as the copies do."""


class Interrupted(NovelfindError):
    """The run was stopped by a signal; what was finished is kept."""

    exit_code = ExitCode.INTERRUPTED
