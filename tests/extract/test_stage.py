"""The extraction stage (novelfind.extract): cache hits by stat and by digest, batching, failures, worker
pool, interruption."""

from __future__ import annotations

import multiprocessing
import os

import numpy as np
import pytest
from PIL import Image
from stage_fakes import DictCache, MeanColour, make_library, stat

from novelfind.errors import CacheError
from novelfind.extract import decoders, stage
from novelfind.extract.decoders import pillow
from novelfind.extract.engines.local import extract
from novelfind.media import decode, raw


def test_extracts_in_walk_order_with_failures(tmp_path):
    files = make_library(tmp_path, 7, bad=(2, 5))
    cache, model = DictCache(), MeanColour()
    seen = []
    res = extract(files, model, cache, batch_size=3, workers=0, on_failure=lambda p, r: seen.append((p, r)))
    assert [f.path for f in res.files] == [files[i].path for i in (0, 1, 3, 4, 6)]
    assert res.features.shape == (5, 11) and res.features.dtype == np.float32
    assert [p for p, _ in res.failures] == [files[2].path, files[5].path]
    assert seen == res.failures and res.failures[0][1] == "not a recognised image format"
    assert (res.from_cache, res.extracted) == (0, 5)
    # row i belongs to file i: the first three features are that file's mean colour
    px = np.asarray(Image.open(files[3].path).convert("RGB").resize((224, 224)), np.float32) / 255
    np.testing.assert_allclose(res.features[2, :3], px.mean(axis=(0, 1)), atol=0.02)
    # batches of at most 3 committed one transaction each; failures never cached
    assert cache.transactions == [3, 2]
    assert str(files[2].path) not in cache.files


def test_rescan_reads_no_image_data(tmp_path, monkeypatch):
    files = make_library(tmp_path, 6)
    cache, model = DictCache(), MeanColour()
    first = extract(files, model, cache, workers=0)

    def no_read(path):
        raise AssertionError(f"read {path}")

    monkeypatch.setattr(decode, "read_for_model", no_read)  # what kinds.PHOTO and kinds.RAW read with
    monkeypatch.setattr(raw, "read_for_model", no_read)
    model.calls = 0
    again = extract(files, model, cache, workers=2)
    assert (again.from_cache, again.extracted, model.calls) == (6, 0, 0)
    np.testing.assert_array_equal(again.features, first.features)
    assert not multiprocessing.active_children()  # no pool started for an all-hit scan


def test_a_float16_cache_gives_the_first_scan_the_vectors_later_scans_read(tmp_path):
    from novelfind.cache import FeatureCache

    files = make_library(tmp_path / "photos", 6)
    with FeatureCache(tmp_path / "c.sqlite", MeanColour.model_key, dtype="float16") as cache:
        first = extract(files, MeanColour(), cache, workers=0)
        again = extract(files, MeanColour(), cache, workers=0)
    assert (first.extracted, again.from_cache) == (6, 6)
    np.testing.assert_array_equal(first.features, again.features)  # rounded once, the same both times
    raw = extract(files, MeanColour(), DictCache(), workers=0).features
    assert 0 < np.abs(first.features - raw).max() <= 2**-11 * np.abs(raw).max()  # float16 rounding


def test_vectors_left_in_the_cache_read_back_as_the_kept_ones(tmp_path, monkeypatch):
    """keep_vectors=False: no N x dim matrix; hits are checked without reading a vector."""
    from novelfind.cache import FeatureCache

    files = make_library(tmp_path / "photos", 9, bad=(4,))
    with FeatureCache(tmp_path / "c.sqlite", MeanColour.model_key) as cache:
        extract(files[:5], MeanColour(), cache, workers=0)  # some of the library seen before
        kept = extract(files, MeanColour(), cache, workers=0)
        monkeypatch.setattr(cache, "get_many_by_stat", None)  # a hit must not read its vector
        left = extract(files, MeanColour(), cache, workers=0, keep_vectors=False)
        monkeypatch.undo()
        assert left.features is None and left.files == kept.files and left.failures == kept.failures
        assert (left.from_cache, left.extracted) == (8, 0)
        back = np.concatenate(list(cache.rows_by_stat(left.files, chunk=3)))  # (8, dim)
        np.testing.assert_array_equal(back, kept.features)
        # a first scan that keeps nothing stores everything it made
        with FeatureCache(tmp_path / "new.sqlite", MeanColour.model_key) as new:
            fresh = extract(files, MeanColour(), new, workers=0, keep_vectors=False)
        assert (fresh.features, fresh.extracted) == (None, 8)
    with FeatureCache(tmp_path / "new.sqlite", MeanColour.model_key) as new:
        np.testing.assert_array_equal(np.concatenate(list(new.rows_by_stat(fresh.files))), kept.features)
        assert new.has_many_by_stat(files, MeanColour.dim).tolist() == [i != 4 for i in range(9)]
        assert not new.has_many_by_stat(files, MeanColour.dim + 1).any()  # another length: not a hit
        files[0].path.write_bytes(b"changed")
        with pytest.raises(CacheError, match="is no longer in the feature cache"):
            list(new.rows_by_stat([stat(files[0].path)]))


def test_stat_lookups_are_chunked(tmp_path, monkeypatch):
    files = make_library(tmp_path, 5)
    cache = DictCache()
    monkeypatch.setattr(stage, "STAT_CHUNK", 2)
    extract(files, MeanColour(), cache, workers=0)
    assert cache.stat_calls == 3


def test_changed_file_reextracted_moved_file_reused(tmp_path):
    files = make_library(tmp_path / "lib", 4)
    cache, model = DictCache(), MeanColour()
    extract(files, model, cache, workers=0)
    # change one file's content, move another
    Image.new("RGB", (30, 30), (255, 0, 0)).save(files[0].path)
    moved = tmp_path / "lib" / "sub" / "renamed.png"
    moved.parent.mkdir()
    os.replace(files[1].path, moved)
    now = [stat(files[0].path), stat(moved), files[2], files[3]]
    model.images = 0
    res = extract(now, model, cache, workers=0)
    assert model.images == 1  # only the changed file went through the model
    assert (res.from_cache, res.extracted) == (3, 1)
    np.testing.assert_allclose(res.features[0, :3], [1.0, 0.0, 0.0], atol=0.01)
    assert str(moved) in cache.files  # the new path is recorded: next time a stat hit


@pytest.mark.parametrize("workers", [0, 2])
def test_moved_and_touched_files_are_hashed_not_decoded(tmp_path, monkeypatch, workers):
    files = make_library(tmp_path / "lib", 5)
    cache, model = DictCache(), MeanColour()
    first = extract(files, model, cache, workers=0)
    moved = tmp_path / "lib" / "sub" / "renamed.png"
    moved.parent.mkdir()
    os.replace(files[1].path, moved)
    os.utime(files[2].path, ns=(files[2].mtime_ns + 10**9, files[2].mtime_ns + 10**9))  # touched
    Image.new("RGB", (30, 30), (0, 0, 255)).save(tmp_path / "lib" / "new.png")
    new = stat(tmp_path / "lib" / "new.png")
    now = [files[0], stat(moved), stat(files[2].path), files[3], files[4], new]
    decoded = tmp_path / "decoded.log"
    monkeypatch.setenv("NOVELFIND_TEST_DECODE_LOG", str(decoded))
    monkeypatch.setattr(decode, "_decode_bytes", logging_decode)
    # the decode processes (one with workers 0) see the test module's patch when forked from here
    monkeypatch.setattr(pillow, "_mp_context", lambda: multiprocessing.get_context("fork"))
    model.images = 0
    res = extract(now, model, cache, workers=workers)
    assert decoded.read_text().split() == [new.path.name]  # only the new file was decoded
    assert model.images == 1
    assert (res.from_cache, res.extracted) == (5, 1)
    np.testing.assert_array_equal(res.features[:5], first.features)


_real_decode_bytes = decode._decode_bytes


def logging_decode(data, name, *args, **kwargs):
    with open(os.environ["NOVELFIND_TEST_DECODE_LOG"], "a") as fh:
        fh.write(name + "\n")
    return _real_decode_bytes(data, name, *args, **kwargs)


def test_non_finite_vectors_are_failures_not_cached(tmp_path):
    files = make_library(tmp_path, 3)

    class NaNModel(MeanColour):
        def __call__(self, batch):
            out = super().__call__(batch)
            out[1, 0] = np.nan
            return out

    cache = DictCache()
    res = extract(files, NaNModel(), cache, workers=0)
    assert [p for p, _ in res.failures] == [files[1].path]
    assert str(files[1].path) not in cache.files and res.extracted == 2


def test_empty_input():
    res = extract([], MeanColour(), DictCache())
    assert res.features.shape == (0, 11) and res.files == [] and res.failures == []


def test_worker_pool_matches_in_process(tmp_path):
    files = make_library(tmp_path, 20, bad=(7,))
    inproc = extract(files, MeanColour(), DictCache(), batch_size=4, workers=0)
    pooled = extract(files, MeanColour(), DictCache(), batch_size=4, workers=2)
    assert [f.path for f in pooled.files] == [f.path for f in inproc.files]
    np.testing.assert_array_equal(pooled.features, inproc.features)
    assert pooled.failures == inproc.failures
    assert not multiprocessing.active_children()


def test_interrupt_keeps_committed_batches_and_stops_workers(tmp_path):
    files = make_library(tmp_path, 24)
    cache = DictCache()
    with pytest.raises(KeyboardInterrupt):
        extract(files, MeanColour(interrupt_on_call=3), cache, batch_size=4, workers=2)
    assert cache.transactions == [4, 4]  # two finished batches kept, the third lost
    assert not multiprocessing.active_children()
    res = extract(files, MeanColour(), cache, batch_size=4, workers=0)
    assert (res.from_cache, res.extracted) == (8, 16)


def test_decoder_window_bounds_work_in_flight(tmp_path, monkeypatch):
    """No more than ``window`` decodes are queued or held, however long the library."""
    from concurrent.futures import Future

    files = make_library(tmp_path, 40)
    state = {"open": 0, "max_open": 0}

    class Tracked(Future):
        def result(self, timeout=None):
            state["open"] -= 1
            return super().result(timeout)

    class InlinePool:
        def submit(self, fn, *args):
            fut = Tracked()
            fut.set_result(fn(*args))
            state["open"] += 1
            state["max_open"] = max(state["max_open"], state["open"])
            return fut

        def shutdown(self, wait=True, cancel_futures=False):
            pass

    monkeypatch.setattr(pillow.ProcessDecoder, "_start", lambda self: InlinePool())
    res = extract(files, MeanColour(), DictCache(), batch_size=4, workers=1)
    assert len(res.files) == 40
    assert state["max_open"] == max(2 * 4, 4 * 1)  # the window, not the library size


def test_progress_counts_every_file_once_and_prints_nothing(tmp_path, capsys):
    files = make_library(tmp_path, 9, bad=(4,))
    cache = DictCache()
    extract(files[:3], MeanColour(), cache, workers=0)  # three are cached already
    seen = []
    extract(files, MeanColour(), cache, batch_size=2, workers=0, on_progress=lambda d, t: seen.append((d, t)))
    assert seen[0] == (3, 9)  # the stat hits, at once
    assert seen[-1] == (9, 9)  # found + extracted + failed = every file
    done = [d for d, _ in seen]
    assert done == sorted(set(done)), "progress went back or repeated itself"
    assert {t for _, t in seen} == {9}
    assert capsys.readouterr() == ("", "")  # the library prints nothing


class InlineDecoder:
    """A decoder from outside the package: decodes in this process and records what it was given."""

    made: list[dict] = []

    def __init__(self, workers, window, known, extractor, on_warning):
        InlineDecoder.made.append(
            {"workers": workers, "window": window, "known": known, "model": extractor.model_key}
        )

    def stack(self, pixels):
        InlineDecoder.made[-1].setdefault("batches", []).append(len(pixels))
        return np.stack(pixels)

    def decode(self, paths):
        for i, p in enumerate(paths):
            yield i, stage.decode_file(p, frozenset())

    def terminate(self):
        pass

    def close(self):
        pass


def test_another_decoder_plugs_in_by_name(tmp_path, monkeypatch):
    files = make_library(tmp_path, 5, bad=(1,))
    monkeypatch.setitem(decoders.DECODERS, "inline", f"{__name__}:InlineDecoder")
    InlineDecoder.made.clear()
    res = extract(files, MeanColour(), DictCache(), batch_size=2, workers=3, decoder="inline")
    reference = extract(files, MeanColour(), DictCache(), batch_size=2, workers=0)
    made = {"workers": 3, "window": 12, "known": frozenset(), "model": "fake-mean-colour", "batches": [2, 2]}
    assert InlineDecoder.made == [made]
    np.testing.assert_array_equal(res.features, reference.features)
    assert res.failures == reference.failures
    with pytest.raises(ValueError, match="unknown decoder 'nvjpeg'; choose from auto, pillow, gpu, inline"):
        extract(files, MeanColour(), DictCache(), decoder="nvjpeg")


def test_bad_arguments():
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        extract([], MeanColour(), DictCache(), batch_size=0)
    with pytest.raises(ValueError, match="workers must be >= 0, got -1"):
        extract([], MeanColour(), DictCache(), workers=-1)


def test_a_parent_owned_by_another_user_is_not_gone(monkeypatch):
    """A refused signal means the process exists; only a missing pid or a zombie is gone."""

    def refused(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(pillow.os, "kill", refused)
    assert not pillow._gone(os.getpid())  # running, not a zombie
