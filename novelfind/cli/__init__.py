"""The command line: parse the options, call the library, print, and turn errors into exit codes.

``group.py`` gathers the commands (``scan.py``, ``library.py``: ignore and failures, ``cache.py``) over
the Click plumbing of ``base.py``; ``console.py`` prints. Exit codes live in :mod:`novelfind.errors`.
``main`` is the console script ``novelfind`` and ``python -m novelfind``; it imports the commands when
called, so importing one module of the package does not load them all.
"""

from __future__ import annotations


def main() -> None:
    """Console-script entry point."""
    from novelfind.cli.group import main as run_group

    run_group()
