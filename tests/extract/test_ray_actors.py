"""The Ray engine's worker side without a cluster: model files on a node, a worker's batch, its rows."""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
import pytest

from novelfind import __version__
from novelfind.extract import stage
from novelfind.extract.engines import ray_actors
from novelfind.extract.engines.ray_actors import ExtractWorker, ModelSpec, ResultBatch
from novelfind.media.dates import Taken
from novelfind.media.decode import INPUT_SIZE


def spec(**changes) -> ModelSpec:
    base = ModelSpec("pooled", "cpu", None, "0" * 64, None, "1" * 64, decode_threads=1)
    return dataclasses.replace(base, **changes)


def test_model_files_are_written_once_checked_by_sha256(tmp_path, monkeypatch):
    data = b"onnx graph bytes"
    path = tmp_path / "node" / "m.onnx"
    assert ray_actors._materialise(path, data, ray_actors.sha256_of(data)) == path
    assert path.read_bytes() == data
    # already there with the right bytes: not written again
    monkeypatch.setattr(ray_actors.atomic, "write_bytes", lambda *a: pytest.fail("written again"))
    assert ray_actors._materialise(path, data, ray_actors.sha256_of(data)) == path
    monkeypatch.undo()
    # a stale file is replaced
    new = b"the next model"
    ray_actors._materialise(path, new, ray_actors.sha256_of(new))
    assert path.read_bytes() == new


def test_damaged_model_bytes_are_refused(tmp_path):
    path = tmp_path / "w.pth"
    with pytest.raises(RuntimeError, match=r"^model bytes for w\.pth arrived damaged \(sha256 mismatch\)$"):
        ray_actors._materialise(path, b"cut sho", ray_actors.sha256_of(b"cut short"))
    assert not path.exists()


def test_the_model_spec_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec().device = "cuda"  # type: ignore[misc]


def test_a_worker_of_another_version_refuses_to_start():
    with pytest.raises(RuntimeError) as err:
        ExtractWorker(spec(), frozenset(), "0.0.0-other")
    assert str(err.value) == (
        f"novelfind {__version__} on this node, 0.0.0-other on the driver: "
        "install the same version on every node"
    )


class Encoder:
    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.batches: list[tuple[int, ...]] = []

    def encode(self, pixels: np.ndarray) -> np.ndarray:
        self.batches.append(pixels.shape)
        return np.tile(pixels[:, 0, 0, :1].astype(np.float32), (1, self.dim))  # each row: its first pixel


def worker(known=frozenset()) -> ExtractWorker:
    """A worker as Ray would build it, without Ray: a stand-in model, this node's id."""
    w = ExtractWorker.__new__(ExtractWorker)
    w.extractor, w.dim, w.known, w.node, w.pool = Encoder(4), 4, known, "node-1", None
    return w


def test_a_worker_batch_comes_back_as_result_rows(monkeypatch):
    pixels = np.full((INPUT_SIZE, INPUT_SIZE, 3), 7, np.uint8)
    decoded = {
        "a.jpg": stage.Decoded("d-a", pixels, taken=Taken(1.6e9, "exif", 3600)),
        "known.jpg": stage.Decoded("d-k", None, taken=Taken(1.5e9, "exif-local")),
        "bad\udcff.jpg": stage.Decoded(None, reason="bad\udcff.jpg: truncated"),
    }
    monkeypatch.setattr(stage, "decode_file", lambda path, known: decoded[path])
    w = worker()
    names = ["a.jpg", "known.jpg", "bad\udcff.jpg"]
    block = w({"pos": np.array([4, 0, 9]), "path": np.array([os.fsencode(n) for n in names], dtype=object)})
    assert w.extractor.batches == [(1, INPUT_SIZE, INPUT_SIZE, 3)]  # only the decoded pixels meet the model
    rows = ray_actors.to_result(block)
    assert len(rows) == 3 and rows.nodes == ["node-1"] * 3
    items = list(rows.items())
    assert [(pos, digest, reason) for pos, digest, _, reason in items] == [
        (4, "d-a", None),
        (0, "d-k", None),
        (9, None, "bad\udcff.jpg: truncated"),  # the reason's bytes survive
    ]
    np.testing.assert_array_equal(items[0][2], [7.0] * 4)
    assert items[1][2] is None and items[2][2] is None
    assert rows.taken[0] == Taken(1.6e9, "exif", 3600)
    assert rows.taken[1].seconds == 1.5e9 and rows.taken[1].offset is None
    assert rows.taken[2] is None


def test_to_result_drops_a_reason_beside_a_digest_and_subset_keeps_rows_in_order():
    block = {
        "pos": np.array([1, 2, 3]),
        "digest": np.array([b"x", b"", b"z"], dtype=object),
        "vector": np.arange(6, dtype=np.float64).reshape(3, 2),
        "has_vector": np.array([1, 0, 0]),
        "reason": np.array([b"stray", b"unreadable", b""], dtype=object),
        "node": np.array([b"n1", b"n2", b"n3"], dtype=object),
        "taken": np.array([math.nan, math.nan, 2e9]),
        "offset": np.array([math.nan, math.nan, -3600.0]),
        "source": np.array([b"", b"", b"raw"], dtype=object),
        "clip": np.array([b"", b"", b""], dtype=object),
    }
    rows = ray_actors.to_result(block)
    assert rows.vectors.dtype == np.float32 and rows.has_vector.dtype == bool
    assert rows.reasons == [None, "unreadable", None]
    assert rows.taken == [None, None, Taken(2e9, "raw", -3600)]
    part = ray_actors.subset(rows, np.array([True, False, True]))
    assert isinstance(part, ResultBatch) and len(part) == 2
    assert part.positions.tolist() == [1, 3] and part.digests == ["x", "z"] and part.nodes == ["n1", "n3"]
    assert part.vectors.tolist() == [[0.0, 1.0], [4.0, 5.0]] and part.has_vector.tolist() == [True, False]
    assert part.taken == [None, Taken(2e9, "raw", -3600)]


def test_a_clip_s_frames_meet_the_model_apart_and_come_back_as_one_vector_with_its_record(monkeypatch):
    """A clip on a worker is read as on this machine: its frames are a batch of their own, made one
    vector by the frame rule, and its record (frame times, moment) travels back with the vector."""
    from novelfind.media import video

    frames = np.zeros((3, INPUT_SIZE, INPUT_SIZE, 3), np.uint8)
    frames[:, 0, 0, 0] = [10, 200, 30]  # the stand-in model's vector of a frame is its first pixel
    photo = np.full((INPUT_SIZE, INPUT_SIZE, 3), 7, np.uint8)
    decoded = {
        "a.jpg": stage.Decoded("d-a", photo),
        "v.mp4": stage.Decoded("d-v", video.ClipFrames(frames, (0.5, 1.5, 2.5), 3.0)),
    }
    monkeypatch.setattr(stage, "decode_file", lambda path, known: decoded[path])
    w = worker()
    block = w({"pos": np.array([0, 1]), "path": np.array([b"a.jpg", b"v.mp4"], dtype=object)})
    assert sorted(w.extractor.batches) == [(1, INPUT_SIZE, INPUT_SIZE, 3), (3, INPUT_SIZE, INPUT_SIZE, 3)]
    rows = ray_actors.to_result(block)
    want, info = video.ClipFrames(frames, (0.5, 1.5, 2.5), 3.0).vector(Encoder(4).encode)
    assert rows.clips[0] is None and rows.clips[1] == info
    assert info.times == (0.5, 1.5, 2.5) and info.rule == video.RULE
    np.testing.assert_array_equal(rows.vectors[1], want)
    assert rows.has_vector.tolist() == [True, True]
    assert ray_actors.subset(rows, np.array([False, True])).clips == [info]


def test_a_worker_says_which_file_it_read_and_the_driver_fails_one_changed_since_the_walk(
    tmp_path, monkeypatch
):
    """The node's decode records the size and time of the file its bytes came from; the driver checks it
    against the walk, as the local stage does: a file rewritten in between is reported and not cached."""
    from stage_fakes import DictCache, MeanColour

    from novelfind.extract.engines.ray import _take_results
    from novelfind.media.walk import FileList, ImageFile

    pixels = np.full((INPUT_SIZE, INPUT_SIZE, 3), 7, np.uint8)
    decoded = {
        "a.jpg": stage.Decoded("d-a", pixels, seen=(10, 20)),
        "b.jpg": stage.Decoded("d-b", pixels, seen=(11, 99)),  # another file than the walk listed
    }
    monkeypatch.setattr(stage, "decode_file", lambda path, known: decoded[path])
    w = worker()
    names = ["a.jpg", "b.jpg"]
    block = w({"pos": np.array([0, 1]), "path": np.array([os.fsencode(n) for n in names], dtype=object)})
    rows = ray_actors.to_result(block)
    assert rows.seen == [(10, 20), (11, 99)]
    assert ray_actors.subset(rows, np.array([False, True])).seen == [(11, 99)]
    files = [ImageFile(tmp_path / "a.jpg", 10, 20), ImageFile(tmp_path / "b.jpg", 11, 21)]
    failed: list[tuple] = []
    cache = DictCache()
    extractor = MeanColour()
    extractor.dim = 4
    driver = stage.Stage(
        FileList(files), extractor, cache, 8, None, lambda p, r: failed.append((p, r)), None, True
    )
    assert _take_results(driver, iter([rows]), [0, 1]) == []
    assert failed == [(files[1].path, stage.CHANGED_WHILE_READ)]
    assert set(cache.files) == {str(files[0].path)}  # nothing cached under the walk's stat of b.jpg


def test_the_nodes_model_folder_is_this_accounts_alone(tmp_path, monkeypatch):
    """The shipped weights are checked, then loaded by name: their folder must be one no other account can
    write. One planted there by another account (here: made writable by all) is passed over."""
    import stat as stat_module
    import tempfile

    from novelfind.extract.engines import ray_actors

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    mine = ray_actors.node_dir()
    assert mine == tmp_path / f"{ray_actors.NODE_DIR}-{os.geteuid()}"
    assert stat_module.S_IMODE(mine.stat().st_mode) == 0o700
    os.chmod(mine, 0o777)  # as a folder another account made would be
    other = ray_actors.node_dir()
    assert other != mine and stat_module.S_IMODE(other.stat().st_mode) == 0o700
