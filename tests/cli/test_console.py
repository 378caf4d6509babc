"""What the command line prints: words, sizes, one line per message, the engine's output off stdout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from common import child_env

from novelfind.cli import console
from novelfind.cli.console import Console, human_size, plural


def test_plural_and_human_size():
    assert plural(1, "photo") == "1 photo"
    assert plural(0, "photo") == "0 photos"
    assert plural(2, "file") == "2 files"
    assert human_size(0) == "0 B"
    assert human_size(999) == "999 B"
    assert human_size(1000) == "1.0 KB"
    assert human_size(1_234_567) == "1.2 MB"
    assert human_size(5 * 10**9) == "5.0 GB"
    assert human_size(7 * 10**15) == "7000.0 TB"  # no unit past TB


def test_a_message_is_one_line_whatever_a_file_name_holds(capsys):
    console.stderr_line("cannot read evil\nerror: forged\x1b[2J.jpg")
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.endswith("\n") and "\x1b" not in err


def test_quiet_leaves_only_problems_and_unreadable_files(capsys):
    for quiet in (False, True):
        c = Console(quiet)
        c.unreadable(Path("/lib/a.jpg"), "truncated")
        c.problem("the report was not written")
        c.problem_note("the ignore list is empty now")
        c.warn("slow disk")
        c.note("waiting")
        c.info("33 photos found")
    out, err = capsys.readouterr()
    always = [
        "warning: cannot read /lib/a.jpg: truncated",
        "warning: the report was not written",
        "note: the ignore list is empty now",
    ]
    assert out == ""
    assert err.splitlines() == [*always, "warning: slow disk", "note: waiting", "33 photos found", *always]


def test_sigterm_is_an_interrupt_while_held_and_the_old_handler_comes_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), console.sigterm_interrupts():
        os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) == before


ENGINE = """
import os, sys
from novelfind.cli.console import redirect_engine_output
with redirect_engine_output(quiet=sys.argv[1] == "quiet"):
    os.write(1, b"engine out\\n")
    os.write(2, b"engine err\\n")
    print("novelfind's own", file=sys.stderr, flush=True)
os.write(1, b"results\\n")
"""


@pytest.mark.parametrize(
    ("mode", "stderr"),
    [("loud", "engine out\nengine err\nnovelfind's own\n"), ("quiet", "novelfind's own\n")],
)
def test_the_engines_stdout_goes_to_stderr_and_quiet_drops_it(tmp_path, mode, stderr):
    done = subprocess.run(
        [sys.executable, "-c", ENGINE, mode],
        capture_output=True,
        text=True,
        env=child_env(tmp_path),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "results\n"  # stdout carries the results only; its descriptor is back after
    assert done.stderr == stderr


def test_output_captured_by_a_caller_is_redirected_in_python(capsys):
    with console.redirect_engine_output(quiet=False):
        print("from the engine")
    assert capsys.readouterr() == ("", "from the engine\n")


def test_results_go_to_stdout_as_bytes(capfdbinary, monkeypatch):
    console.write_stdout(b"1\t0.5\t/lib/\xff.jpg\n")
    assert capfdbinary.readouterr().out == b"1\t0.5\t/lib/\xff.jpg\n"
    monkeypatch.setattr(sys, "stdout", None)
    console.write_stdout(b"nowhere")  # started with stdout closed: nothing, no error
