"""Events and bursts: the library's photos grouped by when they were taken.

A photographer's library comes in *events*: an evening out, a day of scanning, a night of
astrophotography, a trip. Ordinary life (home, the street, the garden) recurs over many events; an odd
batch is one event. Inside an event, a *burst* is a run of frames shot seconds apart of one subject.

Events (``segment``), as PhotoTOC does (Platt, Czerwinski and Field, 2003): the dated photos are put in
time order and a gap between two consecutive photos is an event boundary when it is long *for its
neighbourhood*: when log(gap) exceeds the mean of the log gaps of the ``WINDOW`` gaps on either side
(and itself) by ``log(GAP_RATIO)``, i.e. the gap is more than ``GAP_RATIO`` times the geometric mean of
the gaps around it. So the boundary adapts to the library's rhythm: a burst-heavy afternoon splits at
a ten-minute pause, a roll of one photo a day splits only between days. Two plain rules bound it, each
a duration a user can read: a gap shorter than ``MIN_GAP`` never splits (photos minutes apart are one
event, however regular the shooting), and a gap longer than ``MAX_GAP`` always does (a long pause is a
new event, whatever the rhythm around it). Cooper et al. (ACM TOMM 2005) add scales and content to the
same idea; the window here is one scale, and content enters the ranking instead
(``novelfind.ranking.eventknn``, ``event-knn``), where a photo is compared with the photos of the other
events.

Bursts (``bursts``): consecutive dated photos at most ``BURST_GAP`` seconds apart whose unit-length
feature vectors are closer than ``BURST_RADIUS``, chained: frames of one subject shot in a row. Bursts
ignore ``--dedup``: time and content both say the frames are one shot.

Undated photos (time NaN) are each an event and a burst of their own: for them the ranking is plain
k-NN. Times are seconds (UTC epoch or naive local seconds: only differences are used).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# An event boundary is a gap more than GAP_RATIO times the geometric mean of the gaps around it
# (PhotoTOC's K = log 17, over the 10 gaps on either side).
GAP_RATIO = 17.0
WINDOW = 10
MIN_GAP = 20 * 60.0  # seconds: photos closer than 20 minutes are always one event
MAX_GAP = 8 * 3600.0  # seconds: a pause of more than 8 hours always starts a new event
GAP_FLOOR = 1.0  # seconds added to every gap before its log (two photos in the same second: gap 0)
BURST_GAP = 3.0  # seconds: frames of a burst are at most 3 s apart
BURST_RADIUS = 0.6  # distance between unit vectors: consecutive frames of one subject are closer
# A time shared exactly by more photos than this is a file time written by a copy, not a shot: those
# photos make no burst (a camera shoots at most about 10 frames in one second)
SAME_TIME_MAX = 10


@dataclass(frozen=True)
class Timeline:
    """Each photo's event and burst (int64 labels (N,), one label per group; a photo alone has a label
    of its own), and how many photos carry a usable time."""

    event: np.ndarray
    burst: np.ndarray
    dated: int

    def sizes(self, labels: np.ndarray) -> np.ndarray:
        """The size of each photo's group under ``labels`` (N,)."""
        _, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
        return counts[inverse]


def check_times(times, n: int) -> np.ndarray:
    """``times`` as float64 (N,); ValueError for a wrong shape. Infinite values count as unknown."""
    t = np.asarray(times, dtype=np.float64)
    if t.shape != (n,):
        raise ValueError(f"times must have shape ({n},), got {t.shape}")
    t = t.copy()
    t[~np.isfinite(t)] = np.nan
    return t


def _in_time_order(t: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` (dated) sorted by time, ties by row, and the gaps between consecutive ones (seconds):
    the walk along the time line that events and bursts both cut."""
    order = rows[np.lexsort((rows, t[rows]))]
    return order, np.diff(t[order])


def segment(
    times: np.ndarray,
    *,
    ratio: float | None = None,
    window: int | None = None,
    min_gap: float | None = None,
    max_gap: float | None = None,
) -> np.ndarray:
    """Event label of each photo (int64 (N,)): dated photos by adaptive time gaps (module docstring),
    each undated photo an event of its own. Labels are numbered in time order, undated ones after."""
    t = np.asarray(times, dtype=np.float64)
    n = len(t)
    labels = np.empty(n, dtype=np.int64)
    order, gaps = _in_time_order(t, np.flatnonzero(np.isfinite(t)))  # (D,), (D - 1,)
    if len(order):
        cut = boundaries(gaps, ratio=ratio, window=window, min_gap=min_gap, max_gap=max_gap)
        labels[order] = np.concatenate([[0], np.cumsum(cut)])
    undated = np.flatnonzero(~np.isfinite(t))
    start = int(labels[order].max()) + 1 if len(order) else 0
    labels[undated] = start + np.arange(len(undated))
    return labels


def boundaries(
    gaps: np.ndarray,
    *,
    ratio: float | None = None,
    window: int | None = None,
    min_gap: float | None = None,
    max_gap: float | None = None,
) -> np.ndarray:
    """bool (G,): which gaps (seconds, in time order) are event boundaries (None: the module's
    constants)."""
    ratio = GAP_RATIO if ratio is None else ratio
    window = WINDOW if window is None else window
    min_gap = MIN_GAP if min_gap is None else min_gap
    max_gap = MAX_GAP if max_gap is None else max_gap
    g = np.asarray(gaps, dtype=np.float64)
    if len(g) == 0:
        return np.zeros(0, dtype=bool)
    lg = np.log(g + GAP_FLOOR)
    # mean of log gaps over [i - window, i + window], clipped at the ends (a running sum)
    csum = np.concatenate([[0.0], np.cumsum(lg)])
    idx = np.arange(len(g))
    lo, hi = np.maximum(0, idx - window), np.minimum(len(g), idx + window + 1)
    local = (csum[hi] - csum[lo]) / (hi - lo)
    cut = lg > local + np.log(ratio)
    cut &= g >= min_gap
    cut |= g > max_gap
    return cut


def bursts(
    times: np.ndarray,
    unit_pairs,
    *,
    gap: float | None = None,
    radius: float | None = None,
) -> np.ndarray:
    """Burst label of each photo (int64 (N,)): consecutive dated photos at most ``gap`` seconds apart
    and closer than ``radius`` (between unit vectors), chained; every other photo a burst of its own.

    ``unit_pairs(a, b)``: the distances between unit rows a[j] and b[j] (int64 arrays), so the vectors
    are read only for the few pairs close in time (``pair_distances`` over a matrix or a source).
    None: ``BURST_GAP``, ``BURST_RADIUS``."""
    gap = BURST_GAP if gap is None else gap
    radius = BURST_RADIUS if radius is None else radius
    t = np.asarray(times, dtype=np.float64)
    n = len(t)
    dated = np.flatnonzero(np.isfinite(t))
    if len(dated):  # copies' file times: no burst
        _, inverse, counts = np.unique(t[dated], return_inverse=True, return_counts=True)
        dated = dated[counts[inverse] <= SAME_TIME_MAX]
    order, gaps = _in_time_order(t, dated)
    link = np.zeros(max(len(order) - 1, 0), dtype=bool)
    if len(order) > 1:
        close = np.flatnonzero(gaps <= gap)
        if len(close):
            d = np.asarray(unit_pairs(order[close], order[close + 1]))
            link[close[d < radius]] = True
    labels = np.arange(n, dtype=np.int64)
    if len(order):
        # each run of linked consecutive photos takes the label of its first photo
        run_start = np.concatenate([[True], ~link])
        first = order[np.flatnonzero(run_start)]
        labels[order] = first[np.cumsum(run_start) - 1]
    return labels


def pair_distances(unit_source):
    """``unit_pairs`` for ``bursts`` over a source of unit rows (``take`` reads only the rows asked)."""

    def measure(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.empty(len(a), dtype=np.float64)
        step = 4096
        for s in range(0, len(a), step):
            xa = np.asarray(unit_source.take(a[s : s + step]), dtype=np.float64)
            xb = np.asarray(unit_source.take(b[s : s + step]), dtype=np.float64)
            out[s : s + step] = np.linalg.norm(xa - xb, axis=1)
        return out

    return measure


def timeline(times: np.ndarray, unit_source, **segment_args) -> Timeline:
    """Events and bursts of a library: ``times`` (N,) seconds, NaN unknown; ``unit_source`` its rows
    scaled to unit length. A burst never spans two events (a burst's gaps are far under ``MIN_GAP``;
    a burst cut by a boundary is split there)."""
    t = np.asarray(times, dtype=np.float64)
    event = segment(t, **segment_args)
    burst = bursts(t, pair_distances(unit_source))
    # split any burst across an event boundary: the label is the pair (event, burst)
    _, burst = np.unique(np.stack([event, burst], axis=1), axis=0, return_inverse=True)
    return Timeline(event=event, burst=burst.reshape(-1).astype(np.int64), dated=int(np.isfinite(t).sum()))
