"""The weights' record, verifying a file by its hash, the refusal of a wrong file with its message, the
model key, and the classifier read without torch. (Where the file is looked for, and in which order, is
in tests/model/test_features.py.)"""

from __future__ import annotations

import hashlib
import math
import os
import shutil

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
