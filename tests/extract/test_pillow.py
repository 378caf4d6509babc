"""The ``pillow`` decoder: worker processes decode each file as the scanning process would (the same
digest, the same pixels, the same reason for a bad file), in input order, and start only when there is
something to decode."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys

import numpy as np
import pytest
from common import child_env, make_photo

from novelfind.extract.decoders import pillow
from novelfind.extract.decoders.pillow import DECODE_TIMEOUT_S, ProcessDecoder
from novelfind.extract.stage import decode_file


@pytest.fixture
def paths(tmp_path) -> list[str]:
    files = [make_photo(tmp_path / f"p{i}.jpg", (30 * i, 90, 200 - 20 * i), seed=i) for i in range(4)]
    files.insert(2, make_photo(tmp_path / "q.png", (10, 200, 10), seed=9, size=(90, 300)))
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"\xff\xd8\xff\xe0 not really a JPEG")
    files.insert(1, broken)
    return [str(p) for p in files]


def assert_same(got, want) -> None:
    assert got.digest == want.digest and got.reason == want.reason
    if want.pixels is None:
        assert got.pixels is None
    else:
        assert got.pixels.dtype == np.uint8 and got.pixels.shape == (224, 224, 3)
        np.testing.assert_array_equal(got.pixels, want.pixels)


def test_workers_decode_as_this_process_does_in_input_order(paths):
    here = [decode_file(p, frozenset()) for p in paths]
    assert here[1].digest is None and here[1].reason  # the broken file has a reason
    decoder = ProcessDecoder(workers=2, window=3)
    try:
        results = list(decoder.decode(paths))
    finally:
        decoder.close()
    assert [i for i, _ in results] == list(range(len(paths)))
    for (_, got), want in zip(results, here, strict=True):
        assert_same(got, want)
    assert decoder.pool is None  # closed


def test_known_digests_are_hashed_not_decoded_and_decode_again_gives_their_pixels(paths):
    here = [decode_file(p, frozenset()) for p in paths]
    known = frozenset({here[0].digest, here[3].digest})
    decoder = ProcessDecoder(workers=0, window=2, known=known)
    try:
        results = dict(decoder.decode(paths))
        again = dict(decoder.decode_again([paths[0], paths[3]]))
    finally:
        decoder.close()
    assert decoder.workers == 1  # 0 still decodes in a process, under the time limit
    assert results[0].digest == here[0].digest and results[0].pixels is None
    assert results[3].digest == here[3].digest and results[3].pixels is None
    assert_same(results[2], here[2])
    assert_same(again[0], here[0]) and assert_same(again[1], here[3])


def test_nothing_to_decode_starts_no_pool():
    decoder = ProcessDecoder(workers=4, window=8)
    assert list(decoder.decode([])) == []
    assert decoder.pool is None and decoder.started is None
    decoder.terminate()  # nothing started: nothing to stop
    decoder.close()


def test_the_settings_are_bounded_and_the_time_limit_defaults():
    decoder = ProcessDecoder(workers=0, window=0)
    assert (decoder.workers, decoder.window, decoder.timeout) == (1, 1, DECODE_TIMEOUT_S)
    assert ProcessDecoder(3, 5, timeout=2.5).timeout == 2.5


def test_where_processes_cannot_start_the_files_are_decoded_here(paths):
    decoder = ProcessDecoder(workers=2, window=2)
    decoder.in_process = True
    results = list(decoder.decode(paths[:3]))
    assert decoder.pool is None
    for (i, got), path in zip(results, paths[:3], strict=True):
        assert_same(got, decode_file(path, frozenset()))
        assert i == paths.index(path)


# A program that decodes at its top level, with no ``if __name__ == "__main__":``: it notes each run of
# its top level in a file, so a worker that ran it again (Python's spawn and forkserver starts import
# ``__main__`` in every new process) shows there, as would the scan within a scan it would start.
UNGUARDED = """
import multiprocessing, sys
method, context, notes, *paths = NAMES
if method != "default":
    multiprocessing.set_start_method(method)
from novelfind.extract.decoders import pillow
if context == "spawn":  # a platform without forkserver
    pillow._mp_context = lambda: pillow._WORKER_CONTEXTS["spawn"]
with open(notes, "a") as f:
    f.write("top level\\n")
decoder = pillow.ProcessDecoder(workers=2, window=4)
got = [r.digest is not None for _, r in decoder.decode(paths)]
decoder.close()
print(got, decoder.in_process, decoder.pool_worked)
"""

STARTS = [
    (how, method, context)
    for how, method, context in [
        ("script", "default", "forkserver"),
        ("script", "spawn", "forkserver"),
        ("script", "forkserver", "forkserver"),
        ("script", "default", "spawn"),
        ("module", "default", "forkserver"),
        ("stdin", "default", "forkserver"),
        ("command", "spawn", "spawn"),
    ]
    if method in ("default", *multiprocessing.get_all_start_methods())
    and context in multiprocessing.get_all_start_methods()
]


@pytest.mark.parametrize(("how", "method", "context"), STARTS)
def test_workers_start_without_running_the_programs_top_level_again(paths, tmp_path, how, method, context):
    """A script, a module run with -m, code on stdin or after -c (a REPL's or a notebook's kind of
    ``__main__``), under any start method the program chose: the workers decode, the program's top level
    runs once, and nothing reaches stderr."""
    notes = tmp_path / "notes.txt"
    names = [method, context, str(notes), *paths]
    code = UNGUARDED.replace("NAMES", repr(names))
    (tmp_path / "unguarded.py").write_text(code)
    args = {
        "script": [str(tmp_path / "unguarded.py")],
        "module": ["-m", "unguarded"],
        "stdin": ["-"],
        "command": ["-c", code],
    }[how]
    proc = subprocess.run(
        [sys.executable, *args],
        input=code if how == "stdin" else None,
        cwd=tmp_path,
        env=child_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    ok = [decode_file(p, frozenset()).digest is not None for p in paths]
    assert proc.stdout.split("]")[0] + "]" == str(ok)
    assert proc.stdout.split("]")[1].split() == ["False", "True"]  # decoded in workers, not here
    assert notes.read_text() == "top level\n"


@pytest.mark.parametrize(
    "error", [OSError(11, "Resource temporarily unavailable"), RuntimeError("bootstrapping")]
)
def test_where_no_worker_can_start_the_files_are_decoded_here_with_one_warning(paths, monkeypatch, error):
    """A process limit reached, or a program that is itself a worker still starting up (Python refuses a
    process started then): the files are decoded in this process, in order, said by one warning."""

    def refuse(self):
        raise error

    monkeypatch.setattr(pillow._Worker, "start", refuse)
    decoder = ProcessDecoder(workers=2, window=3)
    with pytest.warns(RuntimeWarning, match="decode workers unavailable") as caught:
        results = list(decoder.decode(paths))
        again = list(decoder.decode(paths[:2]))  # later calls decode here at once, without a warning
    decoder.close()
    assert len(caught) == 1 and decoder.in_process and decoder.pool is None
    assert [i for i, _ in results] == list(range(len(paths)))
    for (_, got), path in zip(results, paths, strict=True):
        assert_same(got, decode_file(path, frozenset()))
    assert [i for i, _ in again] == [0, 1]
