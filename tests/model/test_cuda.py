"""The CUDA paths against the CPU ones, on a GPU: the ADS solver, the ranking, float16 MobileNet-V2, GPU JPEG
decoding and a whole scan. Skipped without CUDA; ``pytest -m cuda --require-cuda`` (scripts/gpu_check.sh)
makes a missing GPU or decoding library a failure. Measured differences go into the JUnit report as
properties (``record_property``), so a run on a GPU machine documents them.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from common import make_photo
from PIL import Image

from novelfind.extract import stage
from novelfind.extract.decoders import gpu as gpu_decode
from novelfind.extract.engines import local
from novelfind.media import decode
from novelfind.model.features import CUDA_TOLERANCE, build_extractor
from novelfind.ranking.solver import ADSConfig, ads

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("cuda")]  # skip before building any fixture

# GPU-decoded pixels against the CPU path's, mean |difference| per image in levels of 255: nvJPEG's IDCT
# and chroma upsampling against libjpeg's, and a block average standing in for libjpeg's DCT-domain
# reduction (on the CPU, against Pillow's own full decode, the emulation alone is <= 0.25 on real photos).
PIXEL_TOLERANCE = 2.0
# Vectors from GPU-decoded pixels against CPU-decoded ones, both through the CUDA model: relative L2 per
# vector. The emulation alone gave median 0.2%, max 1.8% on real photos (CPU, float32); the nearest other
# photo is typically ~100x farther than that.
DECODE_VECTOR_TOLERANCE = 5e-2


def rel_l2(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.linalg.norm(a - b, axis=1) / np.maximum(np.linalg.norm(b, axis=1), 1e-12)


def planted(n: int, m: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (n, m)).astype(np.float32)
    out = rng.choice(n, k, replace=False)
    x[out] += rng.normal(0, 1, (k, m)).astype(np.float32) * 4 + 6
    return x, np.sort(out)


# --------------------------------------------------------------------------- solver and ranking


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ads_on_cuda_matches_cpu(cuda, seed, record_property):
    """Same partner draws on both devices (a CPU generator): only the float32 summation order differs."""
    x, out = planted(20_000, 64, 25, seed)
    cfg = ADSConfig(seed=seed)
    on_gpu = ads(torch.from_numpy(x).to(cuda), 25, cfg)
    on_cpu = ads(x, 25, cfg)
    diff = float(np.abs(on_gpu.weights - on_cpu.weights).max())
    record_property(f"ads_max_weight_diff_seed{seed}", diff)
    assert sorted(on_gpu.ranking.tolist()) == out.tolist()
    assert on_gpu.ranking.tolist() == on_cpu.ranking.tolist()
    np.testing.assert_allclose(on_gpu.weights, on_cpu.weights, rtol=1e-4, atol=1e-6)


def test_ads_on_cuda_is_deterministic(cuda):
    x, _ = planted(3000, 32, 20, 5)
    a = ads(torch.from_numpy(x).to(cuda), 20)
    b = ads(torch.from_numpy(x).to(cuda), 20)
    np.testing.assert_array_equal(a.weights, b.weights)


@pytest.mark.parametrize("method", ["ads", "ads-paper"])
def test_ranking_on_cuda_matches_cpu(cuda, method, record_property):
    from novelfind.ranking import driver as ranking

    x, out = planted(5000, 128, 12, 7)
    on_gpu = ranking.rank(x, 12, method=method, device="cuda")
    on_cpu = ranking.rank(x, 12, method=method, device="cpu")
    record_property(f"rank_{method}_max_score_diff", float(np.abs(on_gpu.scores - on_cpu.scores).max()))
    assert on_gpu.indices.tolist() == on_cpu.indices.tolist()
    assert sorted(on_gpu.indices.tolist()) == out.tolist()
    np.testing.assert_allclose(on_gpu.scores, on_cpu.scores, rtol=1e-3, atol=1e-4)


# --------------------------------------------------------------------------- the model in float16


@pytest.mark.parametrize("feature", ["logits", "pooled"])
def test_float16_model_matches_cpu(cuda, real_weights, real_photos, feature, record_property):
    on_gpu = build_extractor(feature=feature, device="cuda")(real_photos)
    on_cpu = build_extractor(feature=feature, device="cpu", backend="torch")(real_photos)
    assert on_gpu.dtype == np.float32 and on_gpu.shape == on_cpu.shape
    rel = rel_l2(on_gpu, on_cpu)
    record_property(f"fp16_{feature}_rel_l2_max", float(rel.max()))
    record_property(f"fp16_{feature}_rel_l2_median", float(np.median(rel)))
    assert rel.max() <= CUDA_TOLERANCE, rel
    if feature == "logits":
        assert (on_gpu.argmax(1) == on_cpu.argmax(1)).all()


def test_model_takes_a_device_batch(cuda, real_weights, real_photos):
    ex = build_extractor(device="cuda")
    from_numpy = ex(real_photos)
    from_device = ex(torch.from_numpy(real_photos).to(cuda))
    np.testing.assert_allclose(from_device, from_numpy, rtol=1e-3, atol=1e-3)
    with pytest.raises(ValueError, match="expected uint8"):
        ex(torch.zeros((2, 224, 224, 3), dtype=torch.float32, device=cuda))


# --------------------------------------------------------------------------- GPU JPEG decoding


def photo(w: int, h: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    small = rng.uniform(0, 255, (max(2, h // 60), max(2, w // 60), 3)).astype(np.uint8)
    base = np.asarray(Image.fromarray(small).resize((w, h), Image.Resampling.BICUBIC), np.float32)
    yy, xx = np.mgrid[0:h, 0:w]
    base += 25 * np.sign(np.sin(xx / (9 + seed % 7) + yy / 13.0))[..., None]
    base += rng.normal(0, 5, base.shape)
    return np.clip(base, 0, 255).astype(np.uint8)


def jpeg_bytes(arr: np.ndarray, orientation: int = 1, **save) -> bytes:
    if orientation != 1:
        exif = Image.Exif()
        exif[0x0112] = orientation
        save["exif"] = exif.tobytes()
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", **{"quality": 90, **save})
    return buf.getvalue()


JPEG_CASES = {
    "12mp_420": dict(size=(4000, 3000)),
    "12mp_portrait_rot6": dict(size=(4000, 3000), orientation=6),
    "6mp_444_rot3": dict(size=(3000, 2000), subsampling=0, orientation=3),
    "2mp_422_rot8": dict(size=(1600, 1200), subsampling=1, orientation=8),
    "progressive": dict(size=(2000, 1500), progressive=True),
    "grey": dict(size=(1200, 900), grey=True),
    "small": dict(size=(400, 300), orientation=5),
    "odd_size": dict(size=(1001, 777), orientation=7),
}


@pytest.fixture(scope="module")
def jpegs() -> dict[str, bytes]:
    out = {}
    for i, (name, case) in enumerate(JPEG_CASES.items()):
        case = dict(case)
        w, h = case.pop("size")
        arr = photo(w, h, i)
        if case.pop("grey", False):
            arr = arr[..., 0]
        out[name] = jpeg_bytes(arr, **case)
    return out


def test_gpu_decoding_matches_the_cpu_path(nvimgcodec, jpegs, record_property):
    names = list(jpegs)
    batch = nvimgcodec.decode([jpegs[n] for n in names])
    assert batch.fallback == {}, batch.fallback
    assert batch.pixels.device.type == "cuda"
    got = batch.pixels.cpu().numpy().astype(float)
    for i, n in enumerate(names):
        want = decode.model_input_from_bytes(jpegs[n], n + ".jpg").astype(float)
        diff = np.abs(got[i] - want)
        record_property(f"decode_{n}_mean_abs", round(float(diff.mean()), 3))
        record_property(f"decode_{n}_p99", float(np.percentile(diff, 99)))
        assert diff.mean() <= PIXEL_TOLERANCE, (n, diff.mean())


def test_each_gpu_backend_decodes_like_the_default(nvimgcodec, cuda, jpegs, record_property):
    """The hardware decoder (where the card has one) and the CUDA decoders give the default's pixels for
    what each accepts (the hardware decoder takes no progressive JPEG, for one)."""
    names = ["12mp_420", "2mp_422_rot8", "progressive", "grey"]
    data = [jpegs[n] for n in names]
    default = nvimgcodec.decode(data)
    assert default.fallback == {}
    ref = default.pixels.cpu().numpy().astype(int)
    decoded_by_some = set()
    for kind in ("hw", "gpu", "hybrid"):
        try:
            dec = gpu_decode.GpuDecoder(gpu_decode.NvImageCodec(cuda, kinds=(kind,)))
        except gpu_decode.GpuDecodeUnavailable as e:
            record_property(f"backend_{kind}", f"unavailable: {e}")
            continue
        batch = dec.decode(data)
        ok = [i for i in range(len(data)) if i not in batch.fallback]
        record_property(f"backend_{kind}_decoded", ",".join(names[i] for i in ok))
        decoded_by_some.update(ok)
        px = batch.pixels.cpu().numpy().astype(int)
        for i in ok:
            assert np.abs(px[i] - ref[i]).mean() <= 1.0, (kind, names[i])
    assert decoded_by_some == set(range(len(data)))


def test_reused_buffers_give_the_same_pixels(cuda, jpegs):
    """Each batch decodes into the last batch's device buffers: no pixel of one batch leaks into the next."""
    first = [jpegs[n] for n in ("12mp_420", "grey", "small")]
    second = [jpegs[n] for n in ("odd_size", "progressive", "2mp_422_rot8")]
    reusing = gpu_decode.GpuDecoder(gpu_decode.NvImageCodec(cuda, reuse_buffers=True))
    fresh = gpu_decode.GpuDecoder(gpu_decode.NvImageCodec(cuda, reuse_buffers=False))
    a = reusing.decode(first).pixels.cpu()
    b = reusing.decode(second).pixels.cpu()
    c = reusing.decode(first).pixels.cpu()
    assert torch.equal(a, c)
    assert torch.equal(b, fresh.decode(second).pixels.cpu())
    assert torch.equal(a, fresh.decode(first).pixels.cpu())


def test_file_decoder_on_gpu_falls_back_per_file(nvimgcodec, jpegs, tmp_path, record_property):
    files = {}
    for n in ("12mp_420", "grey", "small"):
        files[n] = tmp_path / f"{n}.jpg"
        files[n].write_bytes(jpegs[n])
    files["png"] = tmp_path / "x.png"
    Image.fromarray(photo(300, 200, 1)).save(files["png"])
    files["truncated"] = tmp_path / "t.jpg"
    files["truncated"].write_bytes(jpegs["progressive"][:40_000])
    files["cmyk"] = tmp_path / "c.jpg"
    Image.fromarray(photo(200, 100, 2)).convert("CMYK").save(files["cmyk"], "JPEG")
    files["junk"] = tmp_path / "j.jpg"
    files["junk"].write_bytes(b"\xff\xd8not really")
    paths = [str(p) for p in files.values()]
    fd = gpu_decode.GpuFileDecoder(4, gpu=nvimgcodec, group=4)
    got = dict(fd.decode(paths))
    fd.close()
    record_property("file_decoder_stats", json.dumps(dict(fd.stats)))
    for i, p in enumerate(paths):
        digest, pixels, reason, taken, seen = got[i]
        want_digest, want, want_reason, want_taken, want_seen = stage.decode_file(p, frozenset())
        assert digest == want_digest and repr(taken) == repr(want_taken) and seen == want_seen, p
        if want_digest is None:
            assert reason == want_reason, p  # the same reason as the CPU path
            continue
        px = pixels.cpu().numpy() if isinstance(pixels, torch.Tensor) else pixels
        assert np.abs(px.astype(float) - want.astype(float)).mean() <= PIXEL_TOLERANCE, p
    assert fd.stats["gpu"] == 3 and fd.stats["pillow"] == 2 and fd.stats["failed"] == 2


# --------------------------------------------------------------------------- the whole extraction and scan


@pytest.fixture(scope="module")
def jpeg_folder(tmp_path_factory, jpegs) -> Path:
    root = tmp_path_factory.mktemp("jpegs")
    for i in range(24):
        (root / f"p{i:02d}.jpg").write_bytes(
            jpeg_bytes(photo(1600 + 8 * i, 1200, 100 + i), orientation=1 + i % 8)
        )
    for n, data in jpegs.items():
        (root / f"{n}.jpg").write_bytes(data)
    Image.fromarray(photo(500, 400, 9)).save(root / "flat.png")
    return root


def test_extraction_with_gpu_decoding_matches_cpu_decoding(cuda, real_weights, jpeg_folder, record_property):
    from novelfind.cache import NullCache
    from novelfind.media.walk import walk

    files = list(walk([jpeg_folder]))
    ex = build_extractor(device="cuda")
    on_gpu = local.extract(files, ex, NullCache(), batch_size=16, decoder="gpu")
    cpu_decoded = local.extract(files, ex, NullCache(), batch_size=16, decoder="pillow")
    all_cpu = local.extract(files, build_extractor(device="cpu", backend="torch"), NullCache(), batch_size=16)
    assert [f.path for f in on_gpu.files] == [f.path for f in cpu_decoded.files] == [f.path for f in files]
    assert on_gpu.failures == cpu_decoded.failures == []
    decode_rel = rel_l2(on_gpu.features, cpu_decoded.features)
    total_rel = rel_l2(on_gpu.features, all_cpu.features)
    record_property("decode_vectors_rel_l2_max", float(decode_rel.max()))
    record_property("decode_vectors_rel_l2_median", float(np.median(decode_rel)))
    record_property("gpu_vs_cpu_vectors_rel_l2_max", float(total_rel.max()))
    record_property("gpu_vs_cpu_vectors_rel_l2_median", float(np.median(total_rel)))
    assert decode_rel.max() <= DECODE_VECTOR_TOLERANCE, decode_rel
    assert total_rel.max() <= DECODE_VECTOR_TOLERANCE + CUDA_TOLERANCE, total_rel


def test_scan_on_cuda_picks_what_the_cpu_picks(cuda, real_weights, tmp_path):
    root = tmp_path / "real_photos"
    for i in range(40):
        make_photo(root / f"IMG_{i:04d}.jpg", (40, 60 + i % 5, 200), seed=i, size=(640, 480))
    for j, colour in enumerate([(220, 30, 30), (30, 220, 40), (240, 240, 20)]):
        make_photo(root / f"odd_{j}.jpg", colour, seed=100 + j, size=(640, 480))

    def scan(device: str) -> dict:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "novelfind",
                "scan",
                str(root),
                "--k",
                "3",
                "--device",
                device,
                "--format",
                "json",
                "--no-cache",
                "-q",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)

    on_gpu, on_cpu = scan("cuda"), scan("cpu")
    picks = [Path(p["path"]).name for p in on_gpu["picks"]]
    assert picks == [Path(p["path"]).name for p in on_cpu["picks"]]
    assert sorted(picks) == ["odd_0.jpg", "odd_1.jpg", "odd_2.jpg"]
