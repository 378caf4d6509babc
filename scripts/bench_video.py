#!/usr/bin/env python3
"""Clips: which frame rule makes a clip's vector, and what a clip costs a scan.

  python scripts/bench_video.py rule  [--seeds 0 1 2] [--out docs/bench/video-rule.json]
  python scripts/bench_video.py quality [--dev 0 1 2] [--test 100 101 102] [--out FILE.json]
  python scripts/bench_video.py speed [--clips DIR] [--out docs/bench/video-speed-2core.json]

``rule`` measures the rules a clip's frames could be combined by, with the real model, on a library made
from the pinned photo sources of the quality sets (``scripts/photosets.py``): 240 campus photos (random
crops, jittered), 24 ordinary clips (a camera panning over one campus photo, or cutting from one to
another: what must not come out novel because it moves), 10 clips with one striking moment (four campus
frames and one ImageNet photo of something else: what should be found) and 10 odd photos (the other 10
ImageNet photos: the reference for how often an odd moment is found as a photo). The frames are the model's
224 x 224 inputs (the codec does not enter into the rule). Each rule makes the clips' vectors; the library
is ranked by the default method (cosine-knn) and the top 20 (the planted count) are read: how many moment
clips, odd photos and ordinary clips are in it, and where the ordinary clips rank (median percentile of
the whole ranking, 0 = most novel: a rule that made moving clips look novel would pull it down), beside
the ordinary photos' median.
Rules: ``mean`` (mean of the unit frame vectors), ``first`` (the first frame: a poster), ``medoid`` (the
frame nearest the mean), ``farthest`` (the frame farthest from the mean: the shipped rule), and ``max``
(every frame ranked as an item, the clip scored by its most novel frame: several vectors per clip).

``quality`` writes the same library as files (JPEG photos; each clip an H.264 .mp4 composed with PyAV,
each frame held one second, a keyframe each second) and scans it with ``novelfind.scan``, so the whole
path is measured (keyframe seeking, the rule, the cache); dev seeds and test seeds, the per-kind table of
what is in the top 20.

``speed`` times clips and photos the way a scan reads them. Clips of 10 s, 60 s and 600 s at 1080p and
4K (H.264, a keyframe each second, 30 fps, as phones record) are generated once into ``--clips`` (the
10 s segment is encoded, the longer clips repeat its packets with shifted times, so a 10-minute 4K clip
costs seconds to make); 12 MP JPEGs are made beside them. Reported: frames decoded per clip and
seconds per clip in one decode worker (``extract.stage.decode_file``: digest, seek, decode, scale, crop), the
same for a 12 MP JPEG, and whole ``novelfind scan`` processes (``--no-cache``) over a library of photos and
the same library with 10% of its items clips: items per second, the ratio, and what a clip costs in photos.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from harness import machine, write_json

ROOT = Path(__file__).resolve().parent.parent
for extra in (ROOT, ROOT / "scripts"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

RULES = ("mean", "first", "medoid", "farthest", "max")


# --------------------------------------------------------------------------- the rule


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)


def combine(rule: str, frames: np.ndarray) -> np.ndarray:
    """One clip's vector from its (F, dim) frame vectors by ``rule`` (all but ``max``)."""
    from novelfind.media import video

    unit = _unit(frames)
    mean = _unit(unit.mean(axis=0))
    if rule == "mean":
        return mean * float(np.linalg.norm(frames, axis=1).mean())
    if rule == "first":
        return frames[0]
    if rule == "medoid":
        return frames[int(np.argmax(unit @ mean))]
    if rule == "farthest":
        return video.combine(frames)[0]
    raise ValueError(rule)


def _library_images(seed: int):
    """(photos, their labels 'photo'/'odd', clips as lists of frames, their labels 'ordinary'/'moment'):
    PIL images, SIDE x SIDE."""
    from photosets import SIDE, load_sources, photo_jitter, random_crop
    from PIL import Image

    src = load_sources()
    rng = np.random.default_rng([seed, 29])
    campus, imagenet = src.mvtb["campus"], src.imagenet
    photos = [random_crop(rng, campus[i % len(campus)]) for i in rng.permutation(240)]
    photos = [photo_jitter(rng, p) for p in photos]
    # the ImageNet photos split in two: odd photos, and the striking moments of clips (no content in both)
    shuffled = rng.permutation(len(imagenet))
    odd_ids, moment_ids = shuffled[: len(imagenet) // 2], shuffled[len(imagenet) // 2 :]
    odd = [photo_jitter(rng, random_crop(rng, imagenet[i], (0.7, 1.0))) for i in odd_ids]

    def pan(photo: Image.Image, n: int = 5) -> list[Image.Image]:
        """A camera moving across ``photo``: n crops sliding along it."""
        w, h = photo.size
        side = int(min(w, h) * rng.uniform(0.5, 0.8))
        x0, y0 = rng.integers(0, w - side + 1), rng.integers(0, h - side + 1)
        x1, y1 = rng.integers(0, w - side + 1), rng.integers(0, h - side + 1)
        out = []
        for t in np.linspace(0, 1, n):
            x, y = int(x0 + (x1 - x0) * t), int(y0 + (y1 - y0) * t)
            out.append(photo.crop((x, y, x + side, y + side)).resize((SIDE, SIDE)))
        return out

    clips, labels = [], []
    for c in range(24):  # ordinary: half pans, half a cut from one place to another
        a = campus[rng.integers(len(campus))]
        if c % 2 == 0:
            frames = pan(a)
        else:
            b = campus[rng.integers(len(campus))]
            frames = pan(a, 3)[:2] + pan(b, 3)
        clips.append(frames)
        labels.append("ordinary")
    for i in moment_ids:  # one striking frame among campus frames
        frames = pan(campus[rng.integers(len(campus))], 4)
        frames.insert(int(rng.integers(0, 5)), random_crop(rng, imagenet[i], (0.7, 1.0)))
        clips.append(frames)
        labels.append("moment")
    return photos + odd, ["photo"] * len(photos) + ["odd"] * len(odd), clips, labels


def _library(seed: int):
    """(photo inputs (P, 224, 224, 3), their labels, clips' frame inputs [(F, 224, 224, 3)], clip labels)."""
    from novelfind.media.decode import to_model_input

    photos, photo_labels, clips, labels = _library_images(seed)
    photo_px = np.stack([to_model_input(p) for p in photos])
    clip_px = [np.stack([to_model_input(f) for f in frames]) for frames in clips]
    return photo_px, photo_labels, clip_px, labels


# --------------------------------------------------------------------------- the same, as files


def quality(dev: list[int], test: list[int], folder: Path) -> dict:
    """The rule's library written as files, scanned by ``novelfind.scan``: JPEG photos, and each clip an
    H.264 .mp4 composed with PyAV (each frame held one second, a keyframe each second), so the whole path
    (keyframe seeking, the rule, the cache) is measured. Per kind, how many are in the top 20."""
    import av

    import novelfind
    from novelfind.media import video

    rows = []
    for split, seeds in (("dev", dev), ("test", test)):
        for seed in seeds:
            photos, photo_labels, clips, clip_labels = _library_images(seed)
            lib = folder / f"{split}-{seed}"
            shutil.rmtree(lib, ignore_errors=True)
            lib.mkdir(parents=True)
            label = {}
            for i, (im, kind) in enumerate(zip(photos, photo_labels, strict=True)):
                path = lib / f"IMG_{i:04d}.jpg"
                im.save(path, quality=90)
                label[path] = kind
            for j, (frames, kind) in enumerate(zip(clips, clip_labels, strict=True)):
                path = lib / f"VID_{j:04d}.mp4"
                with av.open(str(path), "w") as out:
                    stream = out.add_stream("libx264", rate=10)
                    stream.width, stream.height, stream.pix_fmt = frames[0].width, frames[0].height, "yuv420p"
                    stream.options = {"g": "10", "keyint_min": "10", "sc_threshold": "0"}
                    for im in frames:
                        for _ in range(10):
                            for packet in stream.encode(av.VideoFrame.from_image(im)):
                                out.mux(packet)
                    for packet in stream.encode():
                        out.mux(packet)
                label[path] = kind
            top = sum(1 for kind in label.values() if kind in ("odd", "moment"))
            result = novelfind.scan(lib, k=top, cache=False, device="cpu", dedup=0)
            found = [label[p.path] for p in result.picks]
            row = {"split": split, "seed": seed, "top": top, "failed": result.counts.failed}
            row.update({kind: found.count(kind) for kind in ("moment", "odd", "ordinary", "photo")})
            row["frames_read_per_clip"] = float(np.mean([len(info.times) for info in result.clips.values()]))
            rows.append(row)
            print(row, file=sys.stderr)
    table = {
        split: {
            kind: float(np.mean([r[kind] for r in rows if r["split"] == split]))
            for kind in ("moment", "odd", "ordinary", "photo")
        }
        for split in ("dev", "test")
    }
    return {
        "rule": video.RULE,
        "runs": rows,
        "mean": table,
        "planted": {"moment_clips": 10, "odd_photos": 10},
        "ordinary": {"photos": 240, "clips": 24},
    }


def rule(seeds: list[int]) -> dict:
    import novelfind
    from novelfind.model import features

    extractor = features.build_extractor(feature="pooled", device="cpu")
    encode = getattr(extractor, "encode", extractor)
    runs = []
    for seed in seeds:
        photo_px, photo_labels, clip_px, clip_labels = _library(seed)
        photo_vec = np.concatenate([encode(photo_px[s : s + 32]) for s in range(0, len(photo_px), 32)])
        frames = encode(np.concatenate(clip_px))  # (sum F, dim)
        bounds = np.cumsum([0] + [len(c) for c in clip_px])
        per_clip = [frames[bounds[j] : bounds[j + 1]] for j in range(len(clip_px))]
        top = sum(1 for label in photo_labels + clip_labels if label in ("odd", "moment"))
        result = {"seed": seed, "top": top}
        for name in RULES:
            if name == "max":
                items = np.concatenate([photo_vec, frames])
                owner = [("photo", i) for i in range(len(photo_vec))]
                owner += [("clip", j) for j in range(len(per_clip)) for _ in range(len(per_clip[j]))]
                ranking = novelfind.rank(items, len(items), method="cosine-knn", dedup=0)
                best: dict[tuple[str, int], float] = {}
                for row, score in zip(ranking.indices, ranking.scores, strict=True):
                    key = owner[int(row)]
                    best[key] = max(best.get(key, -np.inf), float(score))
                order = sorted(best, key=best.get, reverse=True)
            else:
                items = np.concatenate([photo_vec, np.stack([combine(name, f) for f in per_clip])])
                ranking = novelfind.rank(items, len(items), method="cosine-knn", dedup=0)
                n = len(photo_vec)
                order = [("photo", int(r)) if r < n else ("clip", int(r) - n) for r in ranking.indices]
            picked = order[:top]
            label = {("photo", i): lab for i, lab in enumerate(photo_labels)}
            label.update({("clip", j): lab for j, lab in enumerate(clip_labels)})
            counts: dict[str, float] = {
                kind: sum(1 for key in picked if label[key] == kind) for kind in ("moment", "odd", "ordinary")
            }
            # where the ordinary clips rank among all items: 0 = the most novel, 100 = the least
            for kind in ("ordinary", "photo"):  # the ordinary photos: the reference
                where = [100.0 * r / (len(order) - 1) for r, key in enumerate(order) if label[key] == kind]
                counts[f"{kind}_median_percentile"] = round(float(np.median(where)), 1)
            result[name] = counts
            print(f"seed {seed} {name:9s} {counts}", file=sys.stderr)
        runs.append(result)
    summary = {
        name: {kind: float(np.mean([r[name][kind] for r in runs])) for kind in runs[0][name]}
        for name in RULES
    }
    return {
        "seeds": seeds,
        "moment_clips": 12,
        "odd_photos": 12,
        "ordinary_clips": 24,
        "photos": 240,
        "method": "cosine-knn",
        "runs": runs,
        "mean": summary,
    }


# --------------------------------------------------------------------------- speed

LENGTHS = (10, 60, 600)  # seconds
SIZES = {"1080p": (1920, 1080), "4k": (3840, 2160)}
FPS = 30


def _scene(size: tuple[int, int], seed: int) -> np.ndarray:
    """A (H, W, 3) uint8 photo-like scene from a scikit-image photo, a little larger than ``size``."""
    import skimage.data
    from PIL import Image

    names = ("astronaut", "coffee", "chelsea", "rocket")
    img = Image.fromarray(np.asarray(getattr(skimage.data, names[seed % len(names)])())[..., :3])
    w, h = size
    big = np.asarray(img.resize((w + 256, h), Image.Resampling.BILINEAR), np.int16)
    rng = np.random.default_rng(seed)
    return np.clip(big + rng.normal(0, 3, big.shape), 0, 255).astype(np.uint8)


def make_clip(path: Path, seconds: int, size: tuple[int, int], seed: int = 0) -> Path:
    """An H.264 clip of ``seconds`` at ``size`` and 30 fps, a keyframe each second: an 11 s pan is encoded
    (ultrafast, 8 Mbit/s per 1080p, no B-frames), its first second dropped (the rate control's first
    keyframe is a seventh of the size of the others, and would make the clips that read it look cheap),
    and the remaining 10 s repeated with shifted times up to the length."""
    import av

    if path.exists():
        return path
    part = path.with_suffix(".part.mp4")
    scene = _scene(size, seed)
    w, h = size
    with av.open(str(part), "w") as out:
        stream = out.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.bit_rate = 8_000_000 * (w * h) // (1920 * 1080)
        stream.options = {"preset": "ultrafast", "g": str(FPS), "keyint_min": str(FPS), "sc_threshold": "0"}
        for i in range(11 * FPS):
            x = i * 256 // (11 * FPS)
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(scene[:, x : x + w]), format="rgb24")
            for p in stream.encode(frame):
                out.mux(p)
        for p in stream.encode():
            out.mux(p)
    with av.open(str(part)) as src, av.open(str(path), "w") as dst:
        s_in = src.streams.video[0]
        s_out = dst.add_stream_from_template(s_in)
        second = int(round(1 / s_in.time_base))
        packets = [p for p in src.demux(s_in) if p.size and p.dts >= second]  # from the keyframe at 1 s
        span = 10 * second
        for rep in range(seconds // 10):
            for p in packets:
                copy = av.Packet(bytes(p))
                copy.stream, copy.time_base = s_out, p.time_base
                copy.pts, copy.dts = p.pts - second + rep * span, p.dts - second + rep * span
                copy.is_keyframe = p.is_keyframe
                dst.mux(copy)
    part.unlink()
    return path


def make_photo(path: Path, seed: int) -> Path:
    """A 12 MP (4000 x 3000) JPEG, quality 90, photo-like."""
    from PIL import Image

    if not path.exists():
        Image.fromarray(_scene((4000, 3000), seed)[:, :4000]).save(path, quality=90)
    return path


def _time_decode(paths: list[Path], repeat: int = 3) -> tuple[float, list[int]]:
    """Best of ``repeat`` seconds per file for ``decode_file`` in this process, and the frames it read."""
    from novelfind.extract.stage import decode_file
    from novelfind.media import video

    best, frames = [], []
    for p in paths:
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            got = decode_file(str(p), frozenset())
            times.append(time.perf_counter() - t)
        if got.digest is None:
            raise SystemExit(f"cannot decode {p}: {got.reason}")
        frames.append(len(got.pixels.pixels) if isinstance(got.pixels, video.ClipFrames) else 1)
        best.append(min(times))
    return float(np.mean(best)), frames


def _scan_seconds(folder: Path) -> tuple[float, dict]:
    """Seconds of a ``novelfind scan --no-cache`` process over ``folder`` (the model's load included), and
    its run record (what it found and read)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "novelfind", "scan", str(folder), "--k", "5", "--no-cache", "-q"]
    t = time.perf_counter()
    out = subprocess.run(
        [*command, "--format", "json", "--device", "cpu"], check=True, env=env, capture_output=True, text=True
    )
    return time.perf_counter() - t, json.loads(out.stdout)["run"]


def speed(clips_dir: Path, photos: int) -> dict:
    from novelfind.media import video

    clips_dir.mkdir(parents=True, exist_ok=True)
    made = time.perf_counter()
    clips = {
        f"{name}-{seconds}s": make_clip(clips_dir / f"{name}-{seconds}s.mp4", seconds, size)
        for name, size in SIZES.items()
        for seconds in LENGTHS
    }
    jpegs = [make_photo(clips_dir / f"photo-{i:03d}.jpg", i) for i in range(photos)]
    generated = time.perf_counter() - made
    print(f"clips and photos ready in {generated:.0f} s", file=sys.stderr)
    per_clip = {}
    for name, path in clips.items():
        seconds, frames = _time_decode([path])
        per_clip[name] = {"seconds": round(seconds, 4), "frames": frames[0], "bytes": path.stat().st_size}
        print(f"{name}: {seconds:.3f} s, {frames[0]} frames", file=sys.stderr)
    photo_s, _ = _time_decode(jpegs[:5])
    print(f"12 MP JPEG: {photo_s:.3f} s", file=sys.stderr)
    # whole scans: a library of photos, and the same with one clip in ten (1080p 60 s, a phone's typical clip)
    base = clips_dir / "library-photos"
    mixed = clips_dir / "library-mixed"
    for folder in (base, mixed):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
    n_clips = max(1, photos // 10)
    for i, p in enumerate(jpegs):
        os.link(p, base / p.name)
        if i >= n_clips:  # the mixed library: the same number of items, one in ten a clip
            os.link(p, mixed / p.name)
    for i in range(n_clips):  # copies: the walk takes hard links to one file once
        shutil.copyfile(clips["1080p-60s"], mixed / f"clip-{i:03d}.mp4")
    scans: dict[str, list[float]] = {"photos": [], "mixed": []}
    for _ in range(3):  # alternated, best of three: the machine is shared
        for name, folder in (("photos", base), ("mixed", mixed)):
            seconds, record = _scan_seconds(folder)
            if (record["photos_found"], record["extracted"]) != (len(jpegs), len(jpegs)):
                raise SystemExit(f"{folder}: the scan read {record['extracted']} of {len(jpegs)} items")
            scans[name].append(seconds)
    items = len(jpegs)
    rate = {k: items / min(v) for k, v in scans.items()}
    return {
        "frames_rule": video.RULE,
        "clips": per_clip,
        "photo_12mp_seconds": round(photo_s, 4),
        "clip_costs_photos": {k: round(v["seconds"] / photo_s, 2) for k, v in per_clip.items()},
        "scan": {
            "items": items,
            "clips_in_mixed": n_clips,
            "seconds": {k: [round(s, 2) for s in v] for k, v in scans.items()},
            "items_per_s": {k: round(v, 3) for k, v in rate.items()},
            "mixed_over_photos": round(rate["mixed"] / rate["photos"], 3),
        },
        "generation_seconds": round(generated, 1),
    }


def goal(result: dict) -> dict:
    """The issue's goals against a ``speed`` result: every clip at most 10 photos' decoding, and the
    library with 10% clips at least 0.8x the items per second of the same without."""
    costs = result["clip_costs_photos"]
    ratio = result["scan"]["mixed_over_photos"]
    return {
        "clip_at_most_photos": 10,
        "clips_within": {name: cost <= 10 for name, cost in costs.items()},
        "mixed_over_photos_at_least": 0.8,
        "mixed_within": ratio >= 0.8,
    }


def _machine() -> dict:
    import av

    return {
        **machine("python", "machine", "cpus", "load_average=load_1m"),
        "pyav": av.__version__,
        "ffmpeg": _ffmpeg(),
    }


def _ffmpeg() -> str:
    import av

    versions = getattr(av, "ffmpeg_version_info", None)
    return str(versions) if versions else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    r = sub.add_parser("rule")
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    r.add_argument("--out", type=Path, default=ROOT / "docs/bench/video-rule.json")
    q = sub.add_parser("quality")
    q.add_argument("--dev", type=int, nargs="+", default=[0, 1, 2])
    q.add_argument("--test", type=int, nargs="+", default=[100, 101, 102])
    q.add_argument("--folder", type=Path, default=Path("/tmp/novelfind-video-quality"))
    q.add_argument("--out", type=Path, default=ROOT / "docs/bench/video-quality.json")
    s = sub.add_parser("speed")
    s.add_argument("--clips", type=Path, default=Path.home() / ".cache/novelfind-data/clips")
    s.add_argument("--photos", type=int, default=40)
    s.add_argument("--out", type=Path, default=ROOT / "docs/bench/video-speed-2core.json")
    args = parser.parse_args()
    if args.what == "rule":
        result = rule(args.seeds)
    elif args.what == "quality":
        result = quality(args.dev, args.test, args.folder)
    else:
        result = speed(args.clips, args.photos)
        result["goal"] = goal(result)
    result = {"benchmark": f"video-{args.what}", "machine": _machine(), **result}
    write_json(result, args.out)
    print(json.dumps(result.get("mean", result.get("goal")), indent=2))


if __name__ == "__main__":
    main()
