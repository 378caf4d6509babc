#!/usr/bin/env python3
"""Novelty in time: timed libraries of real pictures, ranked with and without capture dates.

A library here is what a camera roll looks like over two years: ordinary places photographed on many
days (each place one real picture, each photo a crop of it), a share of ordinary places seen on one day
only (0, 10 or 30 %), one-off odd batches of 5 to 80 photos (a night of nebulae, a day of drawings in
a museum, an afternoon of screenshots or scanned pages, close-ups of a texture), single odd photos
dropped into ordinary days (trips that mix both), ordinary bursts (frames 1 s apart), and the clock
noise of real libraries: photos with no date, a camera whose clock reset to 2000-01-01, and one day of
photos copied with the same file time. About 5,500 photos each.

Pictures: every distinct crop is featurised once with the shipped MobileNet-V2 (``quality.extract``'s
ONNX network: pooled and logits), cached under ``.bench/`` (about 1,000 pictures per split). A
library photo is the vector of one crop of its place, or the mean of two crops of it (a view between
two crops: the pooled vector of a mixture; the logits follow linearly), so 5,500 photos need only a
few hundred crops. Dev and test use disjoint pictures (even and odd positions of every pool; art by
culture; code screenshots on dev, scanned pages on test) and disjoint seeds.

Metrics as ``bench_moments.py``: moment recall at M (odd moments with a photo among the first M
picks) and F1 over the expanded list (picks written out with their members, cut at K photos).

    python scripts/bench_time.py --split dev --seeds 2 --grid --out docs/bench/quality-time-dev.json
    python scripts/bench_time.py --split test --seeds 3 --out docs/bench/quality-time-test.json
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import platform
import sys
import time
from pathlib import Path

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]
BENCH = ROOT / ".bench"
os.environ.setdefault("NOVELFIND_DATA", str(BENCH / "data"))

from harness import write_json  # noqa: E402
from PIL import Image  # noqa: E402

DAY = 86400.0
HOUR = 3600.0
START = 1_640_995_200.0  # 2022-01-01 UTC: the library's first day
RESET = 946_684_800.0  # 2000-01-01: where a camera's reset clock starts
CROPS_PER_PLACE = 14


# --------------------------------------------------------------------------- pictures -> features


def _pictures(split: str):
    """(kind, key, maker) of every picture of the split: makers are callables rng -> PIL image."""
    from quality import sets, sources

    side = 0 if split == "dev" else 1
    rng = np.random.default_rng(11 if split == "dev" else 29)
    out = []
    scenes = sources.pool("scenes")[side::2]
    for i, pic in enumerate(scenes):
        for _ in range(CROPS_PER_PLACE):
            out.append(("place", i, sets.cropper(pic)))
    for i, pic in enumerate(scenes[:12]):  # bursts of ordinary places: 5 frames of one crop
        frame = sets.burst(pic, rng)
        for _ in range(5):
            out.append(("burst", i, frame()))
    neb = sources.pool("nebulae")[side::2]
    for j in rng.choice(len(neb), 60, replace=False):
        for _ in range(3):
            out.append(("nebula", int(j), sets.cropper(neb[j], (0.6, 1.0))))
    art = sources.pool("art_dev" if split == "dev" else "art_test")
    for j in rng.choice(len(art), min(60, len(art)), replace=False):
        for _ in range(2):
            out.append(("art", int(j), sets.cropper(art[j], (0.6, 1.0))))
    for item in sets._text_items(rng, "code" if split == "dev" else "prose", 60):
        out.append(("text", item.kind, item.make))
    tex = sources.pool("textures_dev" if split == "dev" else "textures_test")
    for j, pic in enumerate(tex):
        for _ in range(max(4, 36 // len(tex))):
            out.append(("texture", j, sets.cropper(pic)))
    subj = sources.pool("subjects")[side::2]
    for j, pic in enumerate(subj):
        for _ in range(3):
            out.append(("subject", j, sets.cropper(pic, (0.6, 1.0))))
    return out


def features(split: str) -> dict:
    """The split's featurised pictures (cached): kind (P,), key (P,), pooled (P, 1280), logits (P, 1000)."""
    path = BENCH / f"time-features-{split}.npz"
    if path.is_file():
        z = np.load(path, allow_pickle=False)
        return {k: z[k] for k in z.files}
    from quality import extract, sets

    from novelfind.media.decode import to_model_input

    pics = _pictures(split)
    sess = extract.session()
    rng = np.random.default_rng(101 if split == "dev" else 202)
    pooled, logits = [], []
    t0 = time.time()
    for b in range(0, len(pics), 32):
        pix = []
        for _kind, _key, make in pics[b : b + 32]:
            data = sets.finish(rng, make(rng))
            with Image.open(io.BytesIO(data)) as im:
                pix.append(to_model_input(im.convert("RGB")))
        lo, po, _ = sess.run(None, {"pixels": np.stack(pix)})
        pooled.append(po)
        logits.append(lo)
        print(f"  {split}: {b + len(pix)}/{len(pics)} pictures, {time.time() - t0:.0f} s", file=sys.stderr)
    out = {
        "kind": np.array([p[0] for p in pics]),
        "key": np.array([str(p[1]) for p in pics]),
        "pooled": np.concatenate(pooled).astype(np.float32),
        "logits": np.concatenate(logits).astype(np.float32),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path.with_suffix(".tmp.npz"), **out)
    os.replace(path.with_suffix(".tmp.npz"), path)
    return out


# --------------------------------------------------------------------------- timed libraries


class Library:
    """A timed library: pooled, logits (N, .), times (N,) seconds (NaN unknown), labels (N,) bool,
    groups (N,) the odd moment of each odd photo (-1 ordinary), what (N,) the photo's story."""

    def __init__(self, f: dict, seed: int, one_day: float, ordinary: int = 5300):
        self.rng = rng = np.random.default_rng(seed)
        self.f = f
        self.rows: dict[tuple[str, str], np.ndarray] = {}
        for i, (k, key) in enumerate(zip(f["kind"], f["key"], strict=True)):
            self.rows.setdefault((str(k), str(key)), []).append(i)
        self.po, self.lo, self.t, self.g, self.what = [], [], [], [], []
        places = sorted({key for (k, key) in self.rows if k == "place"}, key=int)
        rng.shuffle(places)
        n_one = int(round(one_day * len(places)))
        one_day_places, recurring = places[:n_one], places[n_one:]
        popularity = 1.0 / np.arange(1, len(recurring) + 1) ** 0.8  # home first, then the rest
        popularity /= popularity.sum()
        days = np.sort(rng.choice(730, 340, replace=False))
        self.groups = 0
        # one-off odd batches: (kind, size), sizes 5..80; their days
        sizes = [5, 10, 15, 25, 40, 80]
        kinds = ["nebula", "art", "text", "texture", "nebula", "art"]
        rng.shuffle(kinds)
        odd_days = rng.choice(730, len(sizes) + 2, replace=False)
        for (kind, size), day in zip(zip(kinds, sizes, strict=True), odd_days, strict=False):
            self._batch(kind, size, day)
        # trips: a day at one-day places of ordinary kind mixed with 3 odd single subjects
        subjects = [key for (k, key) in self.rows if k == "subject"]
        rng.shuffle(subjects)
        for trip, day in enumerate(odd_days[len(sizes) :]):
            where = [p for p in recurring[-6:]] if not one_day_places else one_day_places[:2] + recurring[-3:]
            self._session(
                day * DAY + 10 * HOUR,
                [rng.choice(where) for _ in range(3)],
                45,
                odd=subjects[trip * 3 : trip * 3 + 3],
            )
        singles = subjects[6:12]
        # ordinary life: sessions on many days at recurring places, with bursts
        for p in one_day_places:  # places seen on one day only
            self._session(rng.choice(730) * DAY + rng.uniform(9, 17) * HOUR, [p], int(rng.integers(10, 41)))
        start = len(self.t)
        while len(self.t) - start < ordinary:
            day = rng.choice(days)
            where = list(rng.choice(recurring, size=int(rng.integers(1, 3)), p=popularity))
            odd = [singles.pop()] if singles and rng.random() < 0.02 else []
            self._session(
                day * DAY + rng.uniform(8, 21) * HOUR, where, int(min(60, rng.geometric(1 / 14))), odd=odd
            )
        self._finish(start)

    def _view(self, kind: str, key: str) -> tuple[np.ndarray, np.ndarray]:
        """One photo: a view between two crops of the picture (two different photos are never the
        same vector, as two shots of one place never are); a picture with one crop, that crop."""
        rows = self.rows[(kind, key)]
        if len(rows) == 1:
            return self.f["pooled"][rows[0]], self.f["logits"][rows[0]]
        a, b = self.rng.choice(rows, 2, replace=False)
        w = self.rng.uniform(0.2, 0.8)
        return (
            w * self.f["pooled"][a] + (1 - w) * self.f["pooled"][b],
            w * self.f["logits"][a] + (1 - w) * self.f["logits"][b],
        )

    def _add(self, kind: str, key: str, t: float, group: int, what: str) -> None:
        po, lo = self._view(kind, key)
        self.po.append(po)
        self.lo.append(lo)
        self.t.append(t)
        self.g.append(group)
        self.what.append(what)

    def _batch(self, kind: str, size: int, day: int) -> None:
        rng = self.rng
        keys = sorted({key for (k, key) in self.rows if k == kind})
        if kind == "text":  # every page or screen its own picture
            chosen = list(rng.choice(keys, min(size, len(keys)), replace=False))
        else:
            chosen = list(rng.choice(keys, min(len(keys), int(rng.integers(2, 7))), replace=False))
        t = day * DAY + (22 if kind == "nebula" else rng.uniform(10, 16)) * HOUR
        gid = self.groups
        self.groups += 1
        for j in range(size):
            t += rng.uniform(30, 300 if kind != "nebula" else 480)
            self._add(kind, chosen[j % len(chosen)], t, gid, f"batch:{kind}:{size}")

    def _session(self, t: float, where: list, count: int, odd: list = ()) -> None:
        rng = self.rng
        odd_at = set(rng.choice(max(count, 1), len(odd), replace=False).tolist()) if odd else set()
        odd = list(odd)
        for j in range(max(count, 1)):
            t += float(np.exp(rng.normal(np.log(60), 1.2)))
            if j in odd_at:
                gid = self.groups
                self.groups += 1
                self._add("subject", odd.pop(), t, gid, "single")
                continue
            place = where[j * len(where) // max(count, 1)]
            if int(place) < 12 and rng.random() < 0.04:  # a burst of 5 frames, 1 s apart
                for _ in range(5):
                    t += 1.0
                    self._add("burst", str(place), t, -1, "burst")
                continue
            self._add("place", str(place), t, -1, "place")

    def _finish(self, start: int) -> None:
        rng = self.rng
        self.pooled = np.asarray(self.po, dtype=np.float32)
        self.logits = np.asarray(self.lo, dtype=np.float32)
        self.times = START + np.asarray(self.t, dtype=np.float64)
        self.groups_of = np.asarray(self.g, dtype=np.int64)
        self.labels = self.groups_of >= 0
        what = np.asarray(self.what)
        ordinary = np.flatnonzero(~self.labels)
        # clock noise: 4 % of ordinary photos undated; the text batch undated (scans, screenshots);
        # a camera reset to 2000-01-01 for a 10-day stretch; 7 % copied with one file time
        undated = rng.choice(ordinary, int(0.04 * len(ordinary)), replace=False)
        self.times[undated] = np.nan
        self.times[np.char.startswith(what, "batch:text")] = np.nan
        t0 = START + rng.choice(700) * DAY
        reset = (self.times >= t0) & (self.times < t0 + 10 * DAY)
        self.times[reset] = RESET + (self.times[reset] - t0)
        copied = rng.choice(ordinary, int(0.07 * len(ordinary)), replace=False)
        self.times[copied] = START + 800 * DAY
        perm = rng.permutation(len(self.times))
        for name in ("pooled", "logits", "times", "groups_of", "labels"):
            setattr(self, name, getattr(self, name)[perm])
        self.what = what[perm]


# --------------------------------------------------------------------------- methods and metrics


def _moments_of(order_scores: np.ndarray, x: np.ndarray, k: int):
    """Moments of a score-only method: its order grouped by novelfind's own grouping (link radius 0.15)."""
    from quality import moments as Q

    from novelfind.ranking.moments import Grouper
    from novelfind.ranking.sources import MatrixSource, UnitSource

    order = np.lexsort((np.arange(len(order_scores)), -order_scores))
    m = Grouper(UnitSource(MatrixSource(x))).group(order, k)
    return Q.Moments(list(m.representatives), m.members, order_scores)


@contextlib.contextmanager
def patched(module, const: str, value):
    """``module.const`` set to ``value`` for the block; ``EVENT_WEIGHT`` is event-knn's declared
    ``weight`` (its record's ``tuning``, ``novelfind.ranking.methods``), so the record is swapped."""
    if const != "EVENT_WEIGHT":
        keep = getattr(module, const)
        setattr(module, const, value)
        try:
            yield
        finally:
            setattr(module, const, keep)
        return
    from novelfind.ranking.methods import METHODS

    record = METHODS["event-knn"]
    METHODS["event-knn"] = dataclasses.replace(record, tuning={**record.tuning, "weight": value})
    try:
        yield
    finally:
        METHODS["event-knn"] = record


def run_method(name: str, lib: Library, k: int, seed: int):
    from quality import moments as Q

    import novelfind

    if name in ("cosine-knn", "event-knn", "microcluster", "time-alone"):
        method = "event-knn" if name == "time-alone" else name
        x = lib.logits if name == "microcluster" else lib.pooled
        # time-alone: the outside-event distance alone, time without content's temper
        from novelfind.ranking import eventknn

        weight = 1.0 if name == "time-alone" else eventknn.EVENT_WEIGHT
        with patched(eventknn, "EVENT_WEIGHT", weight):
            r = novelfind.rank(x, k, method=method, times=lib.times)
        return Q.Moments(list(r.indices), r.members, r.all_scores)
    if name == "cleanlab":
        from cleanlab.outlier import OutOfDistribution

        s = -OutOfDistribution().fit_score(features=Q.unit(lib.pooled))
        return _moments_of(s, lib.pooled, k)
    if name == "isolation-forest":
        from sklearn.ensemble import IsolationForest

        s = -IsolationForest(n_estimators=200, random_state=seed).fit(lib.pooled).score_samples(lib.pooled)
        return _moments_of(s, lib.pooled, k)
    raise ValueError(name)


def evaluate(name: str, lib: Library, seed: int) -> dict:
    from quality import moments as Q

    k = int(lib.labels.sum())
    t0 = time.time()
    m = run_method(name, lib, k, seed)
    out = Q.moment_metrics(m, lib.labels, lib.groups_of)
    out["seconds"] = time.time() - t0
    return out


SHARES = (0.0, 0.1, 0.3)
SEEDS = {"dev": 1000, "test": 5000}
GRID = {  # one constant at a time, from the shipped value: (module, values); EVENT_WEIGHT 1 is time-alone
    "EVENT_WEIGHT": ("eventknn", (0.25, 0.75)),
    "GAP_RATIO": ("events", (8.0, 34.0)),
    "MIN_GAP": ("events", (300.0, 3600.0)),
    "MAX_GAP": ("events", (2 * HOUR, 24 * HOUR)),
}


def main() -> None:
    from novelfind.ranking import eventknn, events

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", choices=("dev", "test"), required=True)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--methods", default="cosine-knn,event-knn,time-alone,cleanlab,isolation-forest")
    ap.add_argument("--first-draw", type=int, default=0, help="start at this draw (to add draws to a run)")
    ap.add_argument("--shares", default="0,0.1,0.3", help="shares of one-day places")
    ap.add_argument(
        "--grid",
        action="store_true",
        help="also the sensitivity of the constants, on the first draw at 10 %% one-day places (dev)",
    )
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    f = features(a.split)
    methods = a.methods.split(",")
    rows = []
    for s in range(a.first_draw, a.first_draw + a.seeds):
        for share in [float(v) for v in a.shares.split(",")]:
            seed = SEEDS[a.split] + 17 * s + int(share * 100)
            lib = Library(f, seed, share)
            info = {
                "seed": seed,
                "draw": s,
                "one_day": share,
                "n": len(lib.labels),
                "odd": int(lib.labels.sum()),
                "moments": int(len(np.unique(lib.groups_of[lib.labels]))),
                "undated": int(np.isnan(lib.times).sum()),
            }
            for name in methods:
                r = dict(info, method=name, **evaluate(name, lib, seed))
                rows.append(r)
                print(json.dumps(r), file=sys.stderr, flush=True)
            if a.grid and s == 0 and share == 0.1:
                for const, (mod, values) in GRID.items():
                    module = eventknn if mod == "eventknn" else events
                    keep = getattr(module, const)
                    for v in values:
                        if v == keep:
                            continue
                        with patched(module, const, v):
                            r = dict(
                                info, method=f"event-knn {const}={v:g}", **evaluate("event-knn", lib, seed)
                            )
                        rows.append(r)
                        print(json.dumps(r), file=sys.stderr, flush=True)
    summary = summarise(rows)
    print(table(summary))
    if a.out:
        write_json(
            {
                "split": a.split,
                "machine": platform.node() and platform.machine(),
                "summary": summary,
                "rows": rows,
            },
            a.out,
            indent=1,
        )


def summarise(rows: list[dict]) -> dict:
    """Per share of one-day places and method: mean F1 and moment recall over draws, and the paired
    differences against ``cosine-knn`` on the same libraries (95 % t-interval)."""
    from bench_quality import paired

    out: dict = {}
    for share in sorted({r["one_day"] for r in rows}):
        sub = [r for r in rows if r["one_day"] == share]
        base = {r["draw"]: r for r in sub if r["method"] == "cosine-knn"}
        for name in dict.fromkeys(r["method"] for r in sub):
            mine = [r for r in sub if r["method"] == name]
            entry = {
                "draws": sorted(r["draw"] for r in mine),
                "f1_expanded": float(np.mean([r["f1_expanded"] for r in mine])),
                "moment_recall": float(np.mean([r["moment_recall"] for r in mine])),
                "seconds": float(np.mean([r["seconds"] for r in mine])),
            }
            pairs = [r for r in mine if r["draw"] in base]
            if name != "cosine-knn" and pairs:
                for key in ("f1_expanded", "moment_recall"):
                    entry[f"{key}_vs_cosine_knn"] = paired([r[key] - base[r["draw"]][key] for r in pairs])
            out[f"{share:.0%} one-day | {name}"] = entry
    return out


def _interval(entry: dict, key: str) -> str:
    d = entry.get(f"{key}_vs_cosine_knn")
    if d is None:
        return ""
    if d["draws"] == 1:
        return f"{d['mean']:+.3f} (one draw)"
    return f"{d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]"


def table(summary: dict) -> str:
    lines = [
        "| one-day places | method | draws | F1 (expanded) | moment recall "
        "| ΔF1 vs cosine-knn [95 % CI] | Δ moment recall [95 % CI] |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, e in summary.items():
        share, name = key.split(" | ")
        lines.append(
            f"| {share.split()[0]} | {name} | {len(e['draws'])} | {e['f1_expanded']:.3f} "
            f"| {e['moment_recall']:.3f} | {_interval(e, 'f1_expanded')} | {_interval(e, 'moment_recall')} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--featurise"]:
        for s in sys.argv[2:]:
            f = features(s)
            print(s, {k: v.shape for k, v in f.items()})
    else:
        main()
