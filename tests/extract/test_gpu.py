"""extract/decoders/gpu.py on the CPU: header checks, the device geometry against Pillow's, the fallback
logic with a stand-in decoder (rejections, failing calls, non-JPEGs, orientation), and the "gpu" and "auto"
decoders of ``novelfind.extract.decoders``.

The real decoder (nvImageCodec on a GPU) is tested in test_cuda.py.
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from gpu_fakes import MemoryCache, PillowBackend, TensorFake
from PIL import Image

from novelfind.extract import decoders, stage
from novelfind.extract.decoders import gpu as gpu_decode
from novelfind.extract.decoders import jpeg_header, pillow
from novelfind.extract.decoders.gpu import (
    DecodedBatch,
    GpuDecoder,
    GpuDecodeUnavailable,
    GpuFileDecoder,
    JpegInfo,
    draft_factor,
    inspect_jpeg,
    model_input,
    orient,
    stack_pixels,
)
from novelfind.extract.engines.local import extract
from novelfind.media import decode


def photo(w: int, h: int, seed: int = 0) -> np.ndarray:
    """Photo-like uint8 (h, w, 3): smooth colour fields, edges and a little noise."""
    rng = np.random.default_rng(seed)
    small = rng.uniform(0, 255, (max(2, h // 40), max(2, w // 40), 3)).astype(np.uint8)
    base = np.asarray(Image.fromarray(small).resize((w, h), Image.Resampling.BICUBIC), np.float32)
    yy, xx = np.mgrid[0:h, 0:w]
    base += 30 * np.sign(np.sin(xx / (7 + seed % 5) + yy / 11.0))[..., None]  # edges
    base += rng.normal(0, 4, base.shape)
    return np.clip(base, 0, 255).astype(np.uint8)


def jpeg(arr: np.ndarray, *, orientation: int = 1, **save) -> bytes:
    img = Image.fromarray(arr)
    if orientation != 1:
        exif = Image.Exif()
        exif[0x0112] = orientation
        save["exif"] = exif.tobytes()
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=save.pop("quality", 92), **save)
    return buf.getvalue()


def png(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


def cpu_path(data: bytes) -> np.ndarray:
    return decode.model_input_from_bytes(data, "x.jpg")


# --------------------------------------------------------------------------- header check


def test_inspect_accepts_plain_jpegs_and_reads_orientation():
    arr = photo(320, 240)
    info = inspect_jpeg(jpeg(arr, orientation=6))
    assert info == JpegInfo(320, 240, 6, 1)
    assert isinstance(inspect_jpeg(jpeg(arr, progressive=True)), JpegInfo)
    grey = inspect_jpeg(jpeg(arr[..., 0]))
    assert isinstance(grey, JpegInfo) and (grey.width, grey.height) == (320, 240)
    assert inspect_jpeg(jpeg(arr, subsampling=0)).orientation == 1  # 4:4:4


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda a: png(a), "not a JPEG"),
        (lambda a: jpeg(a)[:-2000], "no end-of-image marker"),
        (lambda a: b"", "not a JPEG"),
        (lambda a: b"\xff\xd8\xff\xe0\x00", "no JPEG frame header"),
        (lambda a: b"\xff\xd8\x00\x00\x00\x00\x00\x00", "malformed JPEG markers"),
    ],
)
def test_inspect_sends_other_files_to_pillow(make, reason):
    got = inspect_jpeg(make(photo(200, 150)))
    assert isinstance(got, str) and got.startswith(reason)


def test_inspect_sends_cmyk_and_rgb_coded_jpegs_to_pillow():
    arr = photo(64, 48)
    buf = io.BytesIO()
    Image.fromarray(arr).convert("CMYK").save(buf, "JPEG")
    assert inspect_jpeg(buf.getvalue()) == "JPEG with 4 components"
    rgb = jpeg(arr, keep_rgb=True)  # RGB components, no YCbCr transform
    with Image.open(io.BytesIO(rgb)) as img:
        assert img.mode == "RGB"
    assert inspect_jpeg(rgb) == "RGB-coded JPEG"


def test_inspect_refuses_what_the_gpu_should_not_take(monkeypatch):
    data = jpeg(photo(200, 150))
    monkeypatch.setattr(jpeg_header, "GPU_MAX_PIXELS", 200 * 150 - 1)
    assert inspect_jpeg(data) == "too many pixels for the GPU path"
    # a lossless (SOF3) frame: patch the SOF0 marker
    monkeypatch.undo()
    sof = data.index(b"\xff\xc0")
    lossless = data[:sof] + b"\xff\xc3" + data[sof + 2 :]
    assert inspect_jpeg(lossless).startswith("JPEG coding 0xC3")
    twelve = data[: sof + 4] + b"\x0c" + data[sof + 5 :]  # precision byte
    assert inspect_jpeg(twelve) == "12-bit JPEG"


@pytest.mark.parametrize(
    "size", [(511, 2000), (512, 512), (1024, 768), (2048, 1536), (4000, 3000), (800, 3000)]
)
def test_draft_factor_is_pillows(size):
    w, h = size
    a = draft_factor(w, h)
    buf = io.BytesIO()
    Image.new("RGB", size, (10, 20, 30)).save(buf, "JPEG")
    with Image.open(buf) as img:
        if min(w, h) >= 2 * decode.RESIZE_SIZE:
            img.draft("RGB", (decode.RESIZE_SIZE, decode.RESIZE_SIZE))
        assert img.size == (math.ceil(w / a), math.ceil(h / a))


# --------------------------------------------------------------------------- geometry


@pytest.mark.parametrize("orientation", range(1, 9))
def test_orient_is_pillows_exif_transpose(orientation):
    arr = np.random.default_rng(orientation).integers(0, 255, (5, 7, 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = orientation
    img = Image.fromarray(arr)
    img.info["exif"] = exif.tobytes()
    img.getexif()[0x0112] = orientation
    from PIL import ImageOps

    want = np.asarray(ImageOps.exif_transpose(img))
    got = orient(torch.from_numpy(arr), orientation).numpy()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "size, orientation",
    [
        ((400, 300), 1),
        ((300, 400), 6),
        ((510, 700), 8),
        ((1000, 257), 3),
        ((100, 80), 1),
        ((256, 300), 1),
        ((300, 256), 5),
        ((260, 3000), 7),
        ((2, 5000), 1),
    ],
)
def test_geometry_matches_pillow_without_draft(size, orientation):
    """No DCT reduction involved: the device resize is Pillow's to within one level (fixed-point sums)."""
    w, h = size
    data = jpeg(photo(w, h, seed=w), orientation=orientation)
    info = inspect_jpeg(data)
    assert isinstance(info, JpegInfo) and info.draft == 1
    full = PillowBackend().decode([data])[0]
    got = model_input(full, info).numpy().astype(int)
    want = cpu_path(data).astype(int)
    assert got.shape == want.shape == (224, 224, 3)
    diff = np.abs(got - want)
    assert diff.max() <= 1, f"max {diff.max()}, {np.count_nonzero(diff)} pixels differ"
    # float32 sums against Pillow's integer ones: a few values on the .5 boundary round the other way
    assert np.count_nonzero(diff) < 0.03 * diff.size


@pytest.mark.parametrize(
    "size, draft", [((1200, 900), 2), ((2048, 1536), 4), ((4000, 3000), 8), ((3000, 4000), 8)]
)
def test_geometry_close_to_pillow_with_draft(size, draft):
    """A block average stands in for libjpeg's DCT-domain reduction: close, not equal."""
    w, h = size
    data = jpeg(photo(w, h, seed=3), orientation=6)
    info = inspect_jpeg(data)
    assert isinstance(info, JpegInfo) and info.draft == draft
    got = model_input(PillowBackend().decode([data])[0], info).numpy().astype(float)
    want = cpu_path(data).astype(float)
    diff = np.abs(got - want)
    assert diff.mean() < 1.5, diff.mean()
    assert np.percentile(diff, 99) <= 8, np.percentile(diff, 99)


def test_reduce_averages_partial_edge_blocks():
    x = torch.arange(5 * 3 * 3, dtype=torch.uint8).reshape(5, 3, 3)  # (H=5, W=3, C=3)
    got = gpu_decode._reduce(x, 2)  # (3, 2, 3)
    want = np.floor(
        np.array([[x[r : r + 2, c : c + 2].double().mean((0, 1)).numpy() for c in (0, 2)] for r in (0, 2, 4)])
        + 0.5
    )
    np.testing.assert_array_equal(got.numpy(), want)


# --------------------------------------------------------------------------- batches and fallback


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    """JPEGs (plain, oriented, progressive, grey), a PNG, a truncated JPEG, a CMYK JPEG, not-an-image."""
    out = {}
    out["plain"] = tmp_path / "a.jpg"
    out["plain"].write_bytes(jpeg(photo(640, 480, 1)))
    out["rotated"] = tmp_path / "b.jpg"
    out["rotated"].write_bytes(jpeg(photo(600, 400, 2), orientation=6))
    out["progressive"] = tmp_path / "c.jpeg"
    out["progressive"].write_bytes(jpeg(photo(300, 200, 3), progressive=True))
    out["grey"] = tmp_path / "d.jpg"
    out["grey"].write_bytes(jpeg(photo(300, 300, 4)[..., 0]))
    out["png"] = tmp_path / "e.png"
    out["png"].write_bytes(png(photo(200, 260, 5)))
    out["truncated"] = tmp_path / "f.jpg"
    out["truncated"].write_bytes(jpeg(photo(640, 480, 6))[:3000])
    cmyk = io.BytesIO()
    Image.fromarray(photo(120, 90, 7)).convert("CMYK").save(cmyk, "JPEG")
    out["cmyk"] = tmp_path / "g.jpg"
    out["cmyk"].write_bytes(cmyk.getvalue())
    out["junk"] = tmp_path / "h.jpg"
    out["junk"].write_bytes(b"this is not an image")
    return out


def test_batch_rejections_and_failures_stay_per_file(files):
    datas = [files[k].read_bytes() for k in ("plain", "rotated", "png", "progressive", "grey")]
    backend = PillowBackend(reject=[datas[1]])
    batch = GpuDecoder(backend).decode(datas)
    assert isinstance(batch, DecodedBatch)
    assert batch.pixels.shape == (5, 224, 224, 3) and batch.pixels.dtype == torch.uint8
    assert batch.fallback == {1: "GPU decoder rejected the file", 2: "not a JPEG"}
    assert all(datas[2] not in call for call in backend.calls)  # the PNG never reached the GPU decoder
    for i in (0, 3, 4):
        diff = np.abs(batch.pixels[i].numpy().astype(int) - cpu_path(datas[i]).astype(int))
        assert diff.mean() < 1.5
    assert not batch.pixels[1].any() and not batch.pixels[2].any()


def test_a_failing_call_costs_only_its_culprit(files):
    datas = [files[k].read_bytes() for k in ("plain", "rotated", "progressive", "grey")]
    backend = PillowBackend(explode=[datas[2]])
    batch = GpuDecoder(backend).decode(datas)
    assert batch.fallback == {2: "GPU decoder failed: device error"}
    assert backend.calls[0] == datas  # one batched call first, then one file at a time
    assert [len(c) for c in backend.calls[1:]] == [1, 1, 1, 1]


def test_wrong_output_from_the_decoder_falls_back(files):
    data = files["plain"].read_bytes()

    class Wrong(PillowBackend):
        def decode(self, datas):
            return [torch.zeros((10, 10, 3), dtype=torch.uint8) for _ in datas]

    batch = GpuDecoder(Wrong()).decode([data])
    assert batch.fallback == {0: "GPU decoder gave 10x10, header says 640x480"}


def test_pixel_budget_splits_the_calls(files):
    data = files["plain"].read_bytes()  # 640 x 480
    backend = PillowBackend()
    gpu = GpuDecoder(backend, batch_pixels=2 * 640 * 480)
    batch = gpu.decode([data] * 5)
    assert [len(c) for c in backend.calls] == [2, 2, 1]
    assert not batch.fallback
    assert gpu.stats == {"gpu": 5, "fallback": 0}


def test_grey_one_channel_output_is_expanded(files):
    data = files["grey"].read_bytes()
    batch = GpuDecoder(PillowBackend(grey_as_one_channel=True)).decode([data])
    assert not batch.fallback
    px = batch.pixels[0].numpy()
    assert (px[..., 0] == px[..., 1]).all() and (px[..., 1] == px[..., 2]).all()


def test_file_decoder_matches_the_cpu_decoder(files, tmp_path):
    missing = tmp_path / "gone.jpg"
    order = ["plain", "png", "rotated", "truncated", "cmyk", "junk", "progressive", "grey"]
    paths = [str(files[k]) for k in order] + [str(missing)]
    known = frozenset({decode.file_digest(files["grey"].read_bytes())})
    gpu = GpuDecoder(PillowBackend())
    fd = GpuFileDecoder(3, known=known, gpu=gpu, group=3)
    got = list(fd.decode(paths))
    fd.close()
    assert [pos for pos, _ in got] == list(range(len(paths)))
    cpu = [stage.decode_file(p, known) for p in paths]
    for (pos, decoded), expected in zip(got, cpu, strict=True):
        digest, pixels, reason, taken, seen = decoded
        want_digest, want, want_reason, want_taken, want_seen = expected
        name = Path(paths[pos]).name
        if want_digest is None:  # a failure: the same reason as the CPU path gives
            assert (digest, pixels, reason) == (None, None, want_reason), name
            continue
        assert digest == want_digest, name
        # the file the bytes came from, for the stage to check against the walk, as on the CPU path
        assert seen == want_seen == (os.stat(paths[pos]).st_size, os.stat(paths[pos]).st_mtime_ns), name
        assert repr(taken) == repr(want_taken), name  # the capture date, as on the CPU path (NaN: unknown)
        if want is None:
            assert pixels is None, name  # known digest: not decoded
            continue
        px = pixels.numpy() if isinstance(pixels, torch.Tensor) else pixels
        assert np.abs(px.astype(int) - want.astype(int)).mean() < 1.5, name
    assert fd.stats == {"gpu": 3, "pillow": 2, "known": 1, "failed": 3}
    # the PNG and the CMYK JPEG went to Pillow: numpy rows; the JPEGs came back as device rows
    kinds = {Path(paths[pos]).name: type(d.pixels) for pos, d in got if d.pixels is not None}
    assert kinds["e.png"] is np.ndarray and kinds["g.jpg"] is np.ndarray
    assert kinds["a.jpg"] is torch.Tensor and kinds["b.jpg"] is torch.Tensor


def test_rejected_jpeg_goes_to_pillow_in_the_file_decoder(files):
    data = files["rotated"].read_bytes()
    fd = GpuFileDecoder(2, gpu=GpuDecoder(PillowBackend(reject=[data])))
    [(pos, (digest, pixels, reason, _, _))] = list(fd.decode([str(files["rotated"])]))
    fd.close()
    assert digest == decode.file_digest(data) and reason is None
    assert isinstance(pixels, np.ndarray)
    np.testing.assert_array_equal(pixels, cpu_path(data))
    assert fd.stats == {"pillow": 1}


def test_raw_files_go_through_libraw_in_the_file_decoder(tmp_path):
    """A DNG is a TIFF to Pillow (it would read the Bayer data as a grey picture): RAW files take the CPU
    path through LibRaw, as in the Pillow decoder."""
    pytest.importorskip("rawpy")
    from rawfiles import write_dng

    dng = write_dng(tmp_path / "a.DNG", photo(320, 240, seed=3))
    fd = GpuFileDecoder(2, gpu=GpuDecoder(PillowBackend()))
    [(pos, (digest, pixels, reason, _, _))] = list(fd.decode([str(dng)]))
    fd.close()
    want = stage.decode_file(str(dng), frozenset())
    assert (digest, reason) == (want.digest, None) and fd.stats == {"pillow": 1}
    np.testing.assert_array_equal(pixels, want.pixels)


def test_stack_pixels_mixes_device_rows_and_numpy_rows():
    t = torch.full((224, 224, 3), 7, dtype=torch.uint8)
    a = np.full((224, 224, 3), 9, np.uint8)
    both = stack_pixels([t, a, t])
    assert isinstance(both, torch.Tensor) and both.shape == (3, 224, 224, 3)
    assert both[1].eq(9).all() and both[2].eq(7).all()
    only_numpy = stack_pixels([a, a])
    assert isinstance(only_numpy, np.ndarray) and only_numpy.shape == (2, 224, 224, 3)


# --------------------------------------------------------------------------- the pipeline hook


@dataclass(frozen=True)
class File:
    path: Path
    size: int
    mtime_ns: int


def test_extract_with_gpu_decoding_agrees_with_the_cpu_path(files, monkeypatch):
    monkeypatch.setattr(gpu_decode, "open_gpu_decoder", lambda device, **kw: GpuDecoder(PillowBackend()))
    recs = [File(p, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(files.values())]
    gpu_cache, cpu_cache = MemoryCache(), MemoryCache()
    model = TensorFake()
    on_gpu = extract(recs, model, gpu_cache, batch_size=4, workers=2, decoder="gpu")
    assert torch.Tensor in model.kinds  # batches went to the model as tensors
    on_cpu = extract(recs, TensorFake(), cpu_cache, batch_size=4, workers=0, decoder="pillow")
    assert [f.path for f in on_gpu.files] == [f.path for f in on_cpu.files]
    assert [p for p, _ in on_gpu.failures] == [p for p, _ in on_cpu.failures]
    assert [r for _, r in on_gpu.failures] == [r for _, r in on_cpu.failures]
    np.testing.assert_allclose(on_gpu.features, on_cpu.features, atol=2.5 / 255)
    assert {p: d for p, (d, _) in gpu_cache.rows.items()} == {p: d for p, (d, _) in cpu_cache.rows.items()}


class OnCuda:
    device = "cuda"


def test_auto_decodes_on_the_gpu_only_for_cuda_models(monkeypatch):
    opened = []
    monkeypatch.setattr(gpu_decode, "library_installed", lambda: True)

    def opening(device, **kw):
        opened.append(device)
        return GpuDecoder(PillowBackend())

    monkeypatch.setattr(gpu_decode, "open_gpu_decoder", opening)
    auto = stage.load(decoders.DECODERS["auto"])
    assert isinstance(auto(workers=0, window=1, extractor=TensorFake()), pillow.ProcessDecoder)
    assert isinstance(auto(workers=0, window=1, extractor=None), pillow.ProcessDecoder)
    assert opened == []
    chosen = auto(workers=2, window=8, extractor=OnCuda())
    assert isinstance(chosen, GpuFileDecoder) and opened == ["cuda"]
    chosen.close()


def test_missing_library_is_silent_and_a_broken_one_is_reported_once(monkeypatch):
    monkeypatch.setattr(gpu_decode, "library_installed", lambda: False)
    seen: list[str] = []
    auto = stage.load(decoders.DECODERS["auto"])
    assert isinstance(
        auto(workers=0, window=1, extractor=OnCuda(), on_warning=seen.append), pillow.ProcessDecoder
    )
    assert seen == []
    gpu = stage.load(decoders.DECODERS["gpu"])
    with pytest.raises(GpuDecodeUnavailable, match="not installed"):
        gpu(workers=0, window=1, extractor=OnCuda())

    def broken(device, **kw):
        raise GpuDecodeUnavailable("check decode failed: no nvJPEG")

    monkeypatch.setattr(gpu_decode, "library_installed", lambda: True)
    monkeypatch.setattr(gpu_decode, "open_gpu_decoder", broken)
    assert isinstance(
        auto(workers=0, window=1, extractor=OnCuda(), on_warning=seen.append), pillow.ProcessDecoder
    )
    assert seen == ["GPU JPEG decoding unavailable (check decode failed: no nvJPEG); decoding on the CPU"]


def test_a_cpu_scan_does_not_import_torch_for_the_auto_decoder(tmp_path):
    """The default decoder is "auto": choosing Pillow for a CPU model must not pay for torch."""
    import subprocess
    import sys

    code = (
        "import sys; from novelfind.extract import decoders, stage\n"
        "class Model: device = 'cpu'\n"
        "d = stage.load(decoders.DECODERS['auto'])(workers=0, window=1, extractor=Model())\n"
        "print(type(d).__name__, 'torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ProcessDecoder", "False"]


def test_no_cuda_means_unavailable_not_a_crash():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(GpuDecodeUnavailable):
        gpu_decode.NvImageCodec("cuda")


def test_self_check_refuses_a_decoder_that_gets_pixels_wrong():
    class Dark(PillowBackend):
        def decode(self, datas):
            return [p // 2 for p in super().decode(datas)]

    with pytest.raises(GpuDecodeUnavailable, match="differs from Pillow"):
        gpu_decode.self_check(GpuDecoder(Dark()))
    gpu_decode.self_check(GpuDecoder(PillowBackend()))  # the honest one passes


# --------------------------------------------------------------------------- the decode time limit

LIMIT_S = 8.0  # far above a test photo's decode (milliseconds), even on a busy machine
STOPPED = f"decoding took longer than {LIMIT_S:g} s; stopped"


def _stalling_library(root: Path) -> tuple[list[str], bytes]:
    """Plain JPEGs (the GPU's), a PNG, a JPEG the stand-in GPU decoder rejects and a clip, the last
    three both stuck (tests/support/stalling.py) and not; and the bytes to reject."""
    root.mkdir(parents=True, exist_ok=True)
    rejected = jpeg(photo(300, 200, 3))
    contents = {
        "a.jpg": jpeg(photo(320, 240, 1)),
        "stuck.png": png(photo(200, 160, 2)),
        "stuck_rejected.jpg": rejected,
        "b.png": png(photo(180, 240, 4)),
        "stuck_clip.mp4": b"never read: the stalling decode sleeps on its name",
        "c.jpg": jpeg(photo(256, 256, 5)),
    }
    for name, data in contents.items():
        (root / name).write_bytes(data)
    return [str(root / name) for name in contents], rejected


def _stopped(path: str, decoded: stage.Decoded) -> bool:
    """The decode of ``path`` was stopped by the limit and its process is gone."""
    from stalling import NOT_STOPPED

    assert decoded.reason != NOT_STOPPED, path
    return decoded.reason == STOPPED and pillow._gone(int(Path(path + ".pid").read_text()))


@pytest.mark.slow
def test_what_the_gpu_does_not_decode_is_held_to_the_time_limit(tmp_path, monkeypatch):
    """The files the GPU decoder leaves to Pillow (a PNG, a JPEG it rejects) and the clips go to decode
    processes, also with ``workers`` 0 (the GPU decoder alone for a few files): a stuck one is stopped
    by the limit and reported, the others are decoded."""
    from stalling import StallingDecoder

    monkeypatch.setattr(pillow, "ProcessDecoder", StallingDecoder)
    paths, rejected = _stalling_library(tmp_path)
    fd = GpuFileDecoder(0, gpu=GpuDecoder(PillowBackend(reject=[rejected])), group=3, timeout=LIMIT_S)
    try:
        got = list(fd.decode(paths))
    finally:
        fd.terminate()
    assert [pos for pos, _ in got] == list(range(len(paths)))
    for path, (_, decoded) in zip(paths, got, strict=True):
        if "stuck" in path:
            assert _stopped(path, decoded), (path, decoded.reason)
        else:
            assert decoded.digest == stage.decode_file(path, frozenset()).digest, path
    assert fd.stats == {"gpu": 2, "pillow": 1, "failed": 3}


class ForgetfulCache(MemoryCache):
    """A cache that held the digests of ``forgotten`` files when the scan began and lost their vectors
    before the scan reached them (a cache cleared meanwhile)."""

    def __init__(self, forgotten):
        super().__init__()
        self.forgotten = frozenset(decode.file_digest(Path(p).read_bytes()) for p in forgotten)

    def known_digests(self):
        return self.forgotten


@pytest.mark.slow
def test_a_scan_with_gpu_decoding_stops_stuck_decodes_and_goes_on(tmp_path, monkeypatch):
    """Through the pipeline, with the "gpu" decoder: the stuck files are reported as stopped by the
    limit, every other file is extracted, and a photo whose cached vector vanished is decoded again in a
    decode process (a stuck one is stopped there too)."""
    from stalling import StallingDecoder

    monkeypatch.setattr(pillow, "ProcessDecoder", StallingDecoder)
    paths, rejected = _stalling_library(tmp_path / "lib")
    vanishing = [paths[5], paths[1]]  # c.jpg, stuck.png
    backend = PillowBackend(reject=[rejected])
    monkeypatch.setattr(gpu_decode, "open_gpu_decoder", lambda device, **kw: GpuDecoder(backend))
    recs = [File(Path(p), Path(p).stat().st_size, Path(p).stat().st_mtime_ns) for p in paths]
    failures = []
    result = extract(
        recs,
        TensorFake(),
        ForgetfulCache(vanishing),
        batch_size=2,
        workers=2,
        decoder="gpu",
        decode_timeout=LIMIT_S,
        on_failure=lambda p, r: failures.append((str(p), r)),
    )
    stuck = [p for p in paths if "stuck" in p]
    assert sorted(p for p, _ in failures) == sorted(stuck)
    assert all(r == STOPPED for _, r in failures)
    assert all(pillow._gone(int(Path(p + ".pid").read_text())) for p in stuck)
    assert sorted(str(f.path) for f in result.files) == sorted(p for p in paths if "stuck" not in p)
    assert paths[5] in {str(f.path) for f in result.files}  # vanished, decoded again, extracted
