"""Seeded mutations of valid clips (H.264 in .mp4 and .mov with a display matrix, 10-bit HEVC, FFV1 in
.mkv), and a runner that reads them as a scan does (``video.read_clip_for_model``).

Mutations: bit flips (anywhere, or in the first KiB where the container's boxes start), truncation,
overwritten and deleted runs, and splices of two clips. Run as a script, it reads the cases in this
process and prints one JSON line per case; a watchdog (``faulthandler``) ends the process when a case runs
past ``--watchdog`` seconds, so a hang or a crash in FFmpeg shows as the process dying after the last case
it finished:

    python tests/support/clipfuzz.py --seed 1 --cases 300 --workdir DIR
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from clips import flat, pan, write_clip  # noqa: E402


def seed_clips(folder: Path) -> list[Path]:
    """Four small valid clips of different codecs and containers."""
    folder.mkdir(parents=True, exist_ok=True)
    frames = pan((40, 60, 200), n=20) + [flat((220, 40, 40), seed=i) for i in range(5)]
    return [
        write_clip(folder / "h264.mp4", frames),
        write_clip(folder / "portrait.mov", frames, rotation=-90),
        write_clip(folder / "hevc10.mp4", frames, codec="libx265", pix_fmt="yuv420p10le"),
        write_clip(folder / "ffv1.mkv", frames, codec="ffv1", pix_fmt="yuv420p10le"),
    ]


def mutate(rng: random.Random, data: bytes, other: bytes) -> tuple[str, bytes]:
    """One mutation of ``data`` (``other``: a second clip, for splices): (what was done, the bytes)."""
    b = bytearray(data)
    kind = rng.choice(["flip", "flip-head", "truncate", "overwrite", "delete", "splice"])
    if kind in ("flip", "flip-head"):
        top = min(len(b), 1024) if kind == "flip-head" else len(b)
        spots = [rng.randrange(top) for _ in range(rng.choice([1, 4, 32]))]
        for i in spots:
            b[i] ^= 1 << rng.randrange(8)
        return f"{kind} x{len(spots)}", bytes(b)
    at = rng.randrange(len(b))
    if kind == "truncate":
        return f"truncate at {at}", bytes(b[:at])
    if kind == "overwrite":
        n = rng.choice([4, 64, 4096])
        b[at : at + n] = bytes(rng.getrandbits(8) for _ in range(min(n, len(b) - at)))
        return f"overwrite {n} at {at}", bytes(b)
    if kind == "delete":
        n = rng.choice([1, 16, 1024])
        del b[at : at + n]
        return f"delete {n} at {at}", bytes(b)
    cut = rng.randrange(len(other))
    return f"splice at {at}/{cut}", bytes(b[:at]) + other[cut:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--watchdog", type=float, default=60.0)
    parser.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args()

    from novelfind.errors import DecodeError
    from novelfind.media import video

    seeds = seed_clips(args.workdir / "seeds")
    datas = [p.read_bytes() for p in seeds]
    rng = random.Random(args.seed)
    for n in range(args.cases):
        j = rng.randrange(len(seeds))
        mutation, data = mutate(rng, datas[j], datas[(j + 1) % len(datas)])
        path = args.workdir / f"case{seeds[j].suffix}"
        path.write_bytes(data)
        row = {
            "id": f"{args.seed}-{n}",
            "seed": seeds[j].name,
            "mutation": mutation,
            "fault": None,
            "reason": None,
        }
        faulthandler.dump_traceback_later(args.watchdog, exit=True)
        try:
            _, clip = video.read_clip_for_model(path)
            ok = clip.pixels.dtype == np.uint8 and clip.pixels.shape[1:] == (224, 224, 3) and len(clip.times)
            row["outcome"] = "decoded"
            row["fault"] = None if ok else f"bad frames {clip.pixels.shape}"
        except DecodeError as e:
            row["outcome"], row["reason"] = "reason", str(e)
            if not str(e) or "\n" in str(e):
                row["fault"] = "the reason is not one line"
        except Exception as e:  # noqa: BLE001 - the point: anything else is a fault
            row["outcome"], row["fault"] = "raised", f"{type(e).__name__}: {e}"
        faulthandler.cancel_dump_traceback_later()
        print(json.dumps(row), flush=True)
    print(json.dumps({"done": True}), flush=True)


if __name__ == "__main__":
    main()
