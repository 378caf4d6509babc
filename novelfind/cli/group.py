"""The ``novelfind`` group: its help, ``--version``, and its commands (``--help`` lists them by name).

Each command lives in its own module (:mod:`novelfind.cli.scan`, :mod:`novelfind.cli.library`,
:mod:`novelfind.cli.cache`); this one gathers them, so nothing below it imports the group.
"""

from __future__ import annotations

import click

from novelfind import __version__
from novelfind.cli.base import NovelfindGroup
from novelfind.cli.cache import cache
from novelfind.cli.library import failures_command, ignore
from novelfind.cli.scan import scan


@click.group(cls=NovelfindGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="novelfind", message="%(prog)s %(version)s")
def cli() -> None:
    """Find the most novel photos in a large library.

    \b
    Examples:
      novelfind scan ~/Pictures --k 100
      novelfind scan ~/Pictures --k 20 --report novel.html --copy-to ~/novel
      novelfind scan ~/Pictures --since 2026-01-01 --xmp --ignore-picks
      novelfind ignore --list
      novelfind failures
      novelfind cache info
    """


for command in (scan, ignore, failures_command, cache):
    cli.add_command(command)


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name="novelfind")
