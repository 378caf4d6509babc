"""The weights' record, verifying a file by its hash, the refusal of a wrong file with its message, the
model key, and the classifier read without torch. (Where the file is looked for, and in which order, is
in tests/model/test_features.py.)"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from novelfind.errors import WeightsError
from novelfind.model import weights
from novelfind.model.weights import (
    MOBILENET_V2,
    Classifier,
    former_keys,
    load_classifier,
    model_key_for,
    resolve_weights,
    same_weights,
    sha256_file,
)


def test_the_record_and_the_names_read_from_it_agree():
    assert weights.WEIGHTS_FILE == MOBILENET_V2.file == "mobilenet_v2-b0353104.pth"
    assert MOBILENET_V2.sha256.startswith(MOBILENET_V2.file.split("-")[1].split(".")[0])  # torch's naming
    assert weights.WEIGHTS_URL.endswith("/" + MOBILENET_V2.file)
    assert weights.FEATURE_DIMS == {"logits": 1000, "pooled": 1280} and weights.POOLED_DIM == 1280
    assert (
        weights.LAYOUT == MOBILENET_V2.layout
        and weights.PREPROCESS_VERSION == MOBILENET_V2.transforms.version
    )
    t = MOBILENET_V2.transforms
    assert (t.resize_size, t.crop_size) == (256, 224)
    assert t.mean == (0.485, 0.456, 0.406) and t.std == (0.229, 0.224, 0.225)
    assert weights.STORED_NORM_MAX == pytest.approx(6.0 * math.sqrt(1280) * 1.001)
    with pytest.raises(AttributeError):
        MOBILENET_V2.file = "other.pth"  # type: ignore[misc]


def test_the_installed_file_has_the_records_hash(real_weights):
    assert sha256_file(real_weights) == MOBILENET_V2.sha256
    assert resolve_weights(real_weights) == real_weights


def test_sha256_file_is_the_files_hash_and_follows_a_change(tmp_path):
    path = tmp_path / "w.pth"
    path.write_bytes(b"first")
    assert sha256_file(path) == hashlib.sha256(b"first").hexdigest()
    path.write_bytes(b"second, longer")  # another size: not the remembered hash
    assert sha256_file(path) == hashlib.sha256(b"second, longer").hexdigest()
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert sha256_file(empty) == hashlib.sha256(b"").hexdigest()


@pytest.fixture
def hashes(tmp_path, monkeypatch) -> list[Path]:
    """A model folder of the test's own, no hash remembered in this process, and the list of the files
    hashed from here on (each read of a file's bytes to hash it)."""
    monkeypatch.setenv("NOVELFIND_MODEL_CACHE", str(tmp_path / "models"))
    monkeypatch.setattr(weights, "_sha_cache", {})
    read: list[Path] = []
    inner = weights._hash_file

    def counting(path):
        read.append(path)
        return inner(path)

    monkeypatch.setattr(weights, "_hash_file", counting)
    return read


def a_new_process(monkeypatch) -> None:
    """What a new run starts with: nothing remembered in memory (the record on disk stays)."""
    monkeypatch.setattr(weights, "_sha_cache", {})


def rewrite_in_place(path: Path, edit) -> None:
    """``edit(file)`` (the same change however often made) on ``path`` opened for update, then its mtime
    put back as it was: only the ctime tells. The file system's clock is coarse (a few ms), so the edit
    is made again until the ctime moved."""
    st = path.stat()
    while True:
        with open(path, "r+b") as f:
            edit(f)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        if path.stat().st_ctime_ns != st.st_ctime_ns:
            return
        time.sleep(0.005)


def test_an_unchanged_file_is_hashed_once_across_runs_and_a_changed_one_again(tmp_path, monkeypatch, hashes):
    path = tmp_path / "w.pth"
    path.write_bytes(b"first")
    assert sha256_file(path) == hashlib.sha256(b"first").hexdigest()
    assert (tmp_path / "models" / weights.HASH_RECORD).is_file()
    for _ in range(2):
        a_new_process(monkeypatch)
        assert sha256_file(path) == hashlib.sha256(b"first").hexdigest()
    assert hashes == [path]  # read once; the later runs found its state in the record

    rewrite_in_place(path, lambda f: f.write(b"FIRST"))  # same size and mtime: the ctime moves
    a_new_process(monkeypatch)
    assert sha256_file(path) == hashlib.sha256(b"FIRST").hexdigest()
    assert len(hashes) == 2

    path.write_bytes(b"second, longer")  # another size
    a_new_process(monkeypatch)
    assert sha256_file(path) == hashlib.sha256(b"second, longer").hexdigest()
    assert len(hashes) == 3

    other = tmp_path / "new.pth"  # the same bytes in a new file put in its place: another inode
    other.write_bytes(b"second, longer")
    os.replace(other, path)
    a_new_process(monkeypatch)
    assert sha256_file(path) == hashlib.sha256(b"second, longer").hexdigest()
    assert len(hashes) == 4
    a_new_process(monkeypatch)
    sha256_file(path)
    assert len(hashes) == 4


def test_a_weights_file_changed_in_place_is_verified_again(tmp_path, monkeypatch, real_weights, hashes):
    copy = tmp_path / "copy.pth"
    shutil.copyfile(real_weights, copy)
    assert resolve_weights(copy) == copy
    a_new_process(monkeypatch)
    assert resolve_weights(copy) == copy and hashes == [copy]  # the second run trusted the record
    middle = os.path.getsize(copy) // 2
    with open(copy, "rb") as f:
        f.seek(middle)
        flipped = bytes([f.read(1)[0] ^ 1])

    def flip_a_byte(f):
        f.seek(middle)
        f.write(flipped)

    rewrite_in_place(copy, flip_a_byte)  # one byte changed, size and mtime as they were
    a_new_process(monkeypatch)
    with pytest.raises(WeightsError, match="sha256 differs"):
        resolve_weights(copy)
    assert hashes == [copy, copy]


@pytest.mark.parametrize("record", [b"{not json", b'{"version": 1, "files": [{"path": 3}]}', b"[]"])
def test_a_damaged_record_is_passed_over_and_replaced(tmp_path, monkeypatch, hashes, record):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / weights.HASH_RECORD).write_bytes(record)
    path = tmp_path / "w.pth"
    path.write_bytes(b"bytes")
    assert sha256_file(path) == hashlib.sha256(b"bytes").hexdigest()
    a_new_process(monkeypatch)
    assert sha256_file(path) == hashlib.sha256(b"bytes").hexdigest()
    assert hashes == [path]  # the damaged record was replaced by one that holds the file


def test_a_model_folder_that_cannot_be_written_only_costs_the_hash(tmp_path, monkeypatch, hashes):
    blocker = tmp_path / "not-a-folder"
    blocker.write_bytes(b"")
    monkeypatch.setenv("NOVELFIND_MODEL_CACHE", str(blocker / "models"))
    path = tmp_path / "w.pth"
    path.write_bytes(b"bytes")
    for _ in range(2):
        a_new_process(monkeypatch)
        assert sha256_file(path) == hashlib.sha256(b"bytes").hexdigest()
    assert hashes == [path, path]


def test_the_record_keeps_the_most_recent_files(tmp_path, monkeypatch, hashes):
    paths = [tmp_path / f"w{i}.pth" for i in range(weights.HASH_RECORD_MAX + 2)]
    for i, path in enumerate(paths):
        path.write_bytes(b"x" * i)
        sha256_file(path)
    a_new_process(monkeypatch)
    for path in paths[2:]:
        sha256_file(path)
    assert hashes == paths  # the last HASH_RECORD_MAX were remembered
    a_new_process(monkeypatch)
    sha256_file(paths[0])
    assert hashes == [*paths, paths[0]]  # the oldest was dropped


def test_a_wrong_file_is_refused_with_its_message(tmp_path, monkeypatch, real_weights):
    bad = tmp_path / "copy.pth"
    shutil.copyfile(real_weights, bad)
    with open(bad, "r+b") as f:  # one byte changed: the same size, another hash
        f.seek(os.path.getsize(bad) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 1]))
    with pytest.raises(WeightsError) as err:
        resolve_weights(bad)
    assert str(err.value) == (
        f"weights file {bad} (from --weights) is not mobilenet_v2-b0353104.pth: sha256 differs; "
        f"{weights._HOW_TO_GET}"
    )
    monkeypatch.setenv("NOVELFIND_WEIGHTS", str(tmp_path / "none.pth"))
    with pytest.raises(WeightsError) as err:
        resolve_weights()
    assert str(err.value).startswith(
        f"weights file not found: {tmp_path / 'none.pth'} (from $NOVELFIND_WEIGHTS); "
    )
    with pytest.raises(WeightsError, match=r"from \$NOVELFIND_WEIGHTS"):
        resolve_weights(download=False)  # an explicit choice is never replaced by a search


def test_a_folder_is_no_weights_file(tmp_path):
    with pytest.raises(WeightsError, match=r"^weights file not found: "):
        resolve_weights(tmp_path)


def test_the_model_key_names_the_weights_the_layout_and_the_pixels():
    key = model_key_for()
    assert key == f"mobilenet_v2:{MOBILENET_V2.sha256[:16]}:pooled-v1:p1"
    assert model_key_for(weights_sha256="ab" * 32, layout="x") == f"mobilenet_v2:{'ab' * 8}:x:p1"
    assert same_weights(key) and same_weights(f"mobilenet_v2:{MOBILENET_V2.sha256[:16]}:pooled:p0")
    assert not same_weights(model_key_for(weights_sha256="0" * 64)) and not same_weights("fake-8x8-v1")


def test_former_keys_are_this_models_and_not_the_current_one():
    former = former_keys()
    assert former.same == (f"mobilenet_v2:{MOBILENET_V2.sha256[:16]}:pooled:p1",)
    assert former.other == (f"mobilenet_v2:{MOBILENET_V2.sha256[:16]}:logits:p1",)
    assert model_key_for() not in former.same + former.other
    assert all(same_weights(k) for k in former.same + former.other)


def test_the_classifier_is_an_affine_map_in_float64(real_weights):
    classifier = load_classifier(real_weights)
    assert classifier.weight.shape == (1000, 1280) and classifier.bias.shape == (1000,)
    assert load_classifier(real_weights) is classifier  # read once per process
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 6, (3, 1280)).astype(np.float32)
    out = classifier(x)
    assert out.dtype == np.float32 and out.shape == (3, 1000)
    want = x.astype(np.float64) @ classifier.weight.T.astype(np.float64) + classifier.bias
    np.testing.assert_array_equal(out, want.astype(np.float32))
    np.testing.assert_array_equal(classifier(x[1:2]), out[1:2])  # independent of the batch
    np.testing.assert_array_equal(classifier(np.zeros((1, 1280))), classifier.bias[None])


def test_a_small_classifier_runs_without_the_file():
    c = Classifier(np.array([[1.0, 2.0]], np.float32), np.array([0.5], np.float32))
    assert c(np.array([[3.0, 4.0]])).tolist() == [[11.5]]


def test_a_file_that_is_not_a_state_dict_gives_no_classifier(tmp_path):
    bad = tmp_path / "junk.pth"
    bad.write_bytes(b"\x80\x02junk that is no pickle")
    with pytest.raises(WeightsError, match=rf"^cannot read the classifier from weights {bad}: "):
        load_classifier(bad)
