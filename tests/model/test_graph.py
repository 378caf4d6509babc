"""The exported graph kept on disk: written through descriptors with its SHA-256, taken back only when it
is the user's file and its bytes are the recorded ones. A planted graph, a graph of another user, a link
or a FIFO at its name, a link swapped in for the temporary file: each is refused with one warning, nothing
is written through a link, and nothing blocks."""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import threading
from pathlib import Path

import pytest

from novelfind.base import atomic
from novelfind.model import graph
from novelfind.model.graph import GRAPH_RECORD, keep_graph, kept_graph
from novelfind.results import warnings_to

GRAPH = b"an exported graph" * 1000


@pytest.fixture
def models(tmp_path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir(mode=0o700)
    return folder


@pytest.fixture
def kept(models) -> Path:
    path = models / "m.onnx"
    keep_graph(path, GRAPH)
    return path


def within(seconds: float, action):
    """``action()`` in a thread, failing the test if it has not returned after ``seconds`` (a FIFO that
    blocks an open must fail the test, not hold the suite)."""
    out: list = []
    thread = threading.Thread(target=lambda: out.append(action()), daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"blocked for {seconds} s")
    return out[0]


def test_a_kept_graph_comes_back_with_its_record_both_the_users_alone(kept, models):
    assert kept_graph(kept) == GRAPH
    record = kept.with_name(kept.name + GRAPH_RECORD)
    assert record.read_text() == hashlib.sha256(GRAPH).hexdigest() + "\n"
    assert {p.name: p.stat().st_mode & 0o777 for p in models.iterdir()} == {
        "m.onnx": 0o600,
        "m.onnx.sha256": 0o600,
    }  # and no temporary file left


def test_nothing_kept_is_nothing_found_without_a_word(models, caplog):
    with caplog.at_level(logging.WARNING, logger="novelfind"):
        assert kept_graph(models / "m.onnx") is None
        assert kept_graph(models / "missing" / "m.onnx") is None
    assert caplog.records == []


def test_a_planted_graph_is_refused_with_one_warning_through_the_scans_callback(kept):
    """A graph that scores every photo 0, planted where the exported one was: it used to be loaded."""
    kept.write_bytes(b"a graph of someone else's")
    lines: list[str] = []
    with warnings_to(lines.append):
        assert kept_graph(kept) is None
    assert lines == [
        f"the exported model {kept} is not the one novelfind exported (its SHA-256 differs from the one "
        "recorded); exporting it again"
    ]


@pytest.mark.skipif(os.geteuid() != 0, reason="a file of another user is made by chown, as root")
@pytest.mark.parametrize("which", ["graph", "record"])
def test_a_graph_or_record_of_another_user_is_refused(kept, which, caplog):
    os.chown(kept if which == "graph" else kept.with_name(kept.name + GRAPH_RECORD), 1000, 1000)
    with caplog.at_level(logging.WARNING, logger="novelfind"):
        assert kept_graph(kept) is None
    assert len(caplog.records) == 1 and "belongs to another user (uid 1000)" in caplog.messages[0]


def test_a_graph_others_can_write_is_refused(kept, caplog):
    kept.chmod(0o666)
    with caplog.at_level(logging.WARNING, logger="novelfind"):
        assert kept_graph(kept) is None
    assert len(caplog.records) == 1 and "others can write it" in caplog.messages[0]


def test_a_graph_without_a_record_is_exported_again_quietly(kept, caplog):
    """What an earlier version kept: the user's own file, no record yet."""
    kept.with_name(kept.name + GRAPH_RECORD).unlink()
    with caplog.at_level(logging.WARNING, logger="novelfind"):
        assert kept_graph(kept) is None
    assert caplog.records == []


def test_a_fifo_at_the_graph_is_refused_without_blocking(models, caplog):
    os.mkfifo(models / "m.onnx")
    with caplog.at_level(logging.WARNING, logger="novelfind"):
        assert within(30, lambda: kept_graph(models / "m.onnx")) is None
    assert len(caplog.records) == 1 and "not a regular file" in caplog.messages[0]


def test_a_link_at_the_graph_is_never_read_nor_written_through(models, tmp_path, caplog):
    victim = tmp_path / "victim"
    victim.write_bytes(b"root's 600 file")
    victim.chmod(0o600)
    link = models / "m.onnx"
    link.symlink_to(victim)
    with caplog.at_level(logging.WARNING, logger="novelfind"):
        assert kept_graph(link) is None
    assert "symbolic link novelfind did not create" in caplog.messages[0]
    with pytest.raises(OSError, match="symbolic link"):
        keep_graph(link, GRAPH)
    assert victim.read_bytes() == b"root's 600 file" and link.is_symlink()


def test_a_link_swapped_in_for_the_temporary_file_is_never_written_through(models, tmp_path, monkeypatch):
    """Someone who can write the model folder swaps the temporary file for a link to a file of root's the
    moment it is made: the bytes still go to the file novelfind made (through its descriptor), and the
    rename is then found out."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"root's 600 file")
    victim.chmod(0o600)
    create = atomic._create_temp

    def swapped(dir_fd: int, name: str):
        fd, tmp = create(dir_fd, name)
        os.unlink(tmp, dir_fd=dir_fd)
        os.symlink(victim, tmp, dir_fd=dir_fd)
        return fd, tmp

    monkeypatch.setattr(atomic, "_create_temp", swapped)
    with pytest.raises(OSError, match="changed by someone else"):
        keep_graph(models / "m.onnx", GRAPH)
    assert victim.read_bytes() == b"root's 600 file"
    monkeypatch.undo()
    assert kept_graph(models / "m.onnx") is None  # what is there now is refused, not loaded


def test_the_export_writes_no_file(monkeypatch):
    """``torch.onnx.export`` is given a buffer: no name, its own inner temporary files included, that a
    link could stand in for."""
    torch = pytest.importorskip("torch")
    from novelfind.model import features

    class Tiny(torch.nn.Module):
        def forward(self, x):
            return x.to(torch.float32).mean(dim=(1, 2))  # (B, 3)

    written: list[tuple] = []
    watching = threading.Event()

    def hook(event: str, args: tuple) -> None:
        if not watching.is_set():
            return
        if event == "open" and len(args) > 1 and isinstance(args[1], str) and set(args[1]) & set("wax+"):
            written.append(args[:2])
        elif (
            event == "open"
            and len(args) > 2
            and isinstance(args[2], int)
            and args[2] & (os.O_WRONLY | os.O_RDWR)
        ):
            written.append(args[:1])
        elif event in (
            "os.mkdir",
            "os.rename",
            "os.symlink",
            "os.link",
            "tempfile.mkstemp",
            "tempfile.mkdtemp",
        ):
            written.append((event, *args[:1]))

    sys.addaudithook(hook)  # cannot be removed: it watches only while the event is set
    watching.set()
    try:
        data = features.export_onnx(Tiny())
    finally:
        watching.clear()
    assert written == []
    session = features.onnxruntime().InferenceSession(data, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["pixels"]  # the graph, made in memory


def test_reason_of_names_a_refused_link():
    import errno

    assert graph.reason_of(OSError(errno.ELOOP, "x")) == atomic.LINK_REFUSED
    assert graph.reason_of(OSError(errno.EACCES, "Permission denied")) == "Permission denied"
