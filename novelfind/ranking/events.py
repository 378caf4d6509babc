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

Moments in time (``TimeLinks``, read by ``novelfind.ranking.moments`` under every method): the frames
of a burst are one moment, and so are two photos of one event that look more alike than either looks
like any photo of another event (each is closer to the other than to its nearest photo outside the
event), chained. The photos of a one-off evening (aerial shots, a night of nebulae) are each other's
nearest photos and nothing outside comes as close: one moment. An odd photo dropped into an ordinary
day has an ordinary photo nearer to it than anything else in the day has, so nothing links to it: it
stays alone. Two ordinary photos of a day link only where they are closer to each other than to every
other day's photos of the same place. The bar is each photo's own distance to the rest of the library,
so it follows the library's scale (a library of near-alike scenes has small distances everywhere).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
# Moments in time (``TimeLinks``): margin on the bounds of a photo's distance to the nearest photo outside
# its event, for the rounding of float32 searches and float64 products
ROUNDING = 1e-6


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


@dataclass
class TimeLinks:
    """Which photos time puts in one moment (the module docstring): ``links(rows)`` gives, for each row,
    the other candidate rows of its burst and of its *event group* (the photos of its event linked to
    it, chained, by the rule: each closer to the other than to its nearest photo outside the event).

    ``timeline``: the library's events and bursts; ``unit``: its rows scaled to unit length (a source
    with ``take``; the look-ups search it with ``knn.knn_exact``); ``cap``: the largest event that counts
    (a larger one, a copied archive with one date on every file, is the library itself: no event links,
    bursts only); ``candidates``: bool (N,), the rows a moment may hold (None: all). ``nearest`` and
    ``nearest_distance`` (N,): each row's nearest other row in the same unit space where the ranking
    measured it (-1 where not): a row whose nearest row lies outside its event needs no search.

    Each row's distance to its nearest photo outside its event is measured once where a link turns on
    it (one exact search of the rows asked at once; bounds settle the rest, ``_near``) and kept, as are
    each row's links and group."""

    timeline: Timeline
    unit: object
    cap: int
    candidates: np.ndarray | None = None
    nearest: np.ndarray | None = None
    nearest_distance: np.ndarray | None = None
    size: np.ndarray = field(init=False, repr=False)  # (N,) each row's event size
    counted: np.ndarray = field(init=False, repr=False)  # (N,) bool: its event counts (2 to ``cap`` photos)
    outside: np.ndarray = field(init=False, repr=False)  # (N,) float64, NaN until measured
    lo: np.ndarray = field(init=False, repr=False)  # (N,) bounds on ``outside`` (equal to it once known)
    hi: np.ndarray = field(init=False, repr=False)
    linked: dict = field(init=False, repr=False, default_factory=dict)  # row -> the rows linked to it
    groups: dict = field(init=False, repr=False, default_factory=dict)  # row -> its event group (int64)

    def __post_init__(self) -> None:
        self.size = self.timeline.sizes(self.timeline.event)
        self.counted = (self.size >= 2) & (self.size <= self.cap)
        self.outside = np.full(len(self.size), np.nan)
        self.lo, self.hi = np.zeros(len(self.size)), np.full(len(self.size), np.inf)
        self._event_rows = _members_by_label(self.timeline.event)
        self._burst_rows = _members_by_label(self.timeline.burst)

    @property
    def any(self) -> bool:
        """Whether time links anything at all (an event that counts, or a burst)."""
        return bool(self.counted.any() or len(np.unique(self.timeline.burst)) < len(self.timeline.burst))

    def __call__(self, rows: np.ndarray) -> list[np.ndarray]:
        rows = np.asarray(rows, dtype=np.int64)
        self._grow([int(r) for r in rows if self.counted[r] and int(r) not in self.groups])
        out = []
        for row in rows.tolist():
            mates = [self._burst_rows(self.timeline.burst[row])]
            if self.counted[row]:
                mates.append(self.groups[row])
            m = np.unique(np.concatenate(mates))
            if self.candidates is not None:
                m = m[self.candidates[m]]
            out.append(m[m != row])
        return out

    def _grow(self, rows: list[int]) -> None:
        """The event group of each of ``rows``: the rows linked to it, then theirs, until nothing is
        added; all rows' links found together, each step's new rows measured in one search."""
        frontier = sorted(set(rows) - self.linked.keys())
        while frontier:
            near = self._near(frontier)
            self.linked.update(near)
            frontier = sorted({int(q) for m in near.values() for q in m.tolist()} - self.linked.keys())
        for row in rows:
            if row in self.groups:
                continue
            group, todo = {row}, [row]
            while todo:
                new = [q for q in self.linked[todo.pop()].tolist() if q not in group]
                group.update(new)
                todo.extend(new)
            ids = np.asarray(sorted(group), dtype=np.int64)
            for r in ids.tolist():  # the group is the same from each of its rows
                self.groups[r] = ids

    def _near(self, rows: list[int]) -> dict[int, np.ndarray]:
        """Each row's linked event-mates: candidates of its event closer to it than its nearest photo
        outside the event, and it closer to them than theirs.

        The distance to the nearest photo outside the event (``outside``) costs a search of the whole
        library, so it is searched only where bounds leave a comparison open: once a row's is known,
        each photo of its event has its own within (that distance -+ their distance to each other) (the
        triangle inequality), which settles most comparisons with photos near it or far from it."""
        cand = self._event_distances(rows)
        self._settle(rows, cand, {r: d for r, (_, d) in cand.items()})
        # every row's event-mates closer than its own outside distance are settled: those under ``lo``
        closer = {r: (m[d < self.lo[r]], d[d < self.lo[r]]) for r, (m, d) in cand.items()}
        asked: dict[int, list[float]] = {}  # each of those mates -> its distances to be compared
        for m, d in closer.values():
            for q, dq in zip(m.tolist(), d.tolist(), strict=True):
                asked.setdefault(q, []).append(dq)
        if asked:
            mates = sorted(asked)
            cand.update(self._event_distances([q for q in mates if q not in cand]))
            self._settle(mates, cand, {q: np.asarray(asked[q]) for q in mates})
        return {r: m[d < self.lo[m]] for r, (m, d) in closer.items()}

    def _settle(self, rows: list[int], cand: dict, compared: dict) -> None:
        """Make the outside distance of each of ``rows`` known, or bounded tightly enough that each of
        its ``compared`` distances is known to be under it or not: the ranking's nearest row where it
        lies outside the event, the bounds the known ones give the photos of their events, then one
        search of the rows still open."""
        self._known(rows)
        for r in cand:
            self._bound(r, *cand[r])
        self._search([r for r in rows if self._open(r, compared[r])])

    def _event_distances(self, rows: list[int]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """row -> (the other candidates of its event, their distances to it): the rows of one event
        measured against its candidates in one matrix product (its photos read once)."""
        cand: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        event = self.timeline.event
        rows_a = np.asarray(rows, dtype=np.int64)
        for label in np.unique(event[rows_a]):
            here = rows_a[event[rows_a] == label]
            mates = self._event_rows(label)
            if self.candidates is not None:
                mates = mates[self.candidates[mates]]
            dist = _distances(self.unit.take(here), self.unit.take(mates))  # (R, E)
            for row, d in zip(here.tolist(), dist, strict=True):
                other = mates != row
                cand[row] = mates[other], d[other]
        return cand

    def _open(self, row: int, d: np.ndarray) -> bool:
        """Whether the bounds on the row's outside distance leave open which of ``d`` are under it."""
        return bool(((d >= self.lo[row]) & (d < self.hi[row])).any())

    def _bound(self, row: int, mates: np.ndarray, d: np.ndarray) -> None:
        """Bounds on the outside distances of the row's event-mates, from its own where it is known (with
        a margin for rounding: the distances are float32 searches and float64 products)."""
        out = self.outside[row]
        if np.isnan(out):
            return
        self.lo[mates] = np.maximum(self.lo[mates], out - d - ROUNDING)
        self.hi[mates] = np.minimum(self.hi[mates], out + d + ROUNDING)

    def _known(self, rows: list[int]) -> None:
        """The outside distance of the rows whose nearest row, as the ranking found it, is in another
        event: that distance, with no search."""
        if self.nearest is None:
            return
        rows_a = np.asarray(rows, dtype=np.int64)
        rows_a = rows_a[np.isnan(self.outside[rows_a])]
        nb = self.nearest[rows_a]
        event = self.timeline.event
        known = rows_a[(nb >= 0) & (event[np.maximum(nb, 0)] != event[rows_a])]
        self._set(known, self.nearest_distance[known])

    def _search(self, rows: list[int]) -> None:
        """The outside distance of each of ``rows`` not yet known: one exact search of them all, for
        as many neighbours as the largest event holds (so one at least lies outside it)."""
        self._known(rows)
        rows_a = np.asarray(rows, dtype=np.int64)
        rows_a = rows_a[np.isnan(self.outside[rows_a])]
        if not len(rows_a):
            return
        from novelfind.ranking import knn

        event, n = self.timeline.event, len(self.timeline.event)
        k = min(n - 1, 1 << int(np.ceil(np.log2(self.size[rows_a].max() + 1))))
        dist, idx = knn.knn_exact(self.unit, rows_a, k, centre=np.zeros(self.unit.dim, np.float32))
        away = event[idx] != event[rows_a][:, None]  # (Q, k): one at least, as k > the event's others
        self._set(rows_a, dist[np.arange(len(rows_a)), np.argmax(away, axis=1)])

    def _set(self, rows: np.ndarray, values: np.ndarray) -> None:
        self.outside[rows] = values
        self.lo[rows] = self.hi[rows] = values


def _distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(A, B) float64 distances between the rows of a and of b, from one matrix product."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    d2 = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * (a @ b.T)
    return np.sqrt(np.maximum(d2, 0.0))


def _members_by_label(labels: np.ndarray):
    """label -> the rows carrying it (int64, increasing), from one sort of the labels."""
    order = np.argsort(labels, kind="stable")
    sorted_labels = labels[order]

    def rows(label) -> np.ndarray:
        return order[np.searchsorted(sorted_labels, label) : np.searchsorted(sorted_labels, label, "right")]

    return rows


def time_links(times: np.ndarray, unit, cap: int, candidates: np.ndarray | None = None) -> TimeLinks | None:
    """The ``TimeLinks`` of a library (``times`` (N,) seconds, NaN unknown), or None when time links
    nothing (no dated photo, no event of two photos that counts, no burst): moments by content alone."""
    t = np.asarray(times, dtype=np.float64)
    if len(t) < 2 or not np.isfinite(t).any():
        return None
    links = TimeLinks(timeline(t, unit), unit, cap, candidates)
    return links if links.any else None
