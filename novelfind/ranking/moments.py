"""Moments: the ranking's picks grouped with the photos of their batch or burst.

A library's photos come in moments: a burst of frames, a re-saved copy, a batch of scans, an evening
of shots of one subject. Showing each frame as a pick of its own fills the top K with one scene, so a
pick is a *moment*: a representative photo plus its *members*, the other photos of the moment, nearest
to the representative first. A photo alone is a moment with no members. Near-duplicates (a re-saved or
resized copy) are members too; there is no separate near-duplicate pass.

How a moment is found. The ranking's candidates are read best first (``group``). A candidate that is
already a member of an earlier moment is folded into it (``Moments.folded`` counts those). Otherwise its
``NEIGHBOURS`` nearest photos are looked up (an exact search over all N rows, ``knn.knn_exact``, done
for a block of candidates at once), and the moment is the single-linkage group of the candidate among
them: every neighbour reachable from the candidate by steps shorter than ``LINK_RADIUS``. When a linked
photo lies within the radius of the look-up's edge, the batch may go on past it: its photos are looked
up in turn, and the group grows until nothing is added (or it holds ``GROW_MAX`` photos). When that
group touches an earlier moment (a frame the earlier look-up did not reach links to it), the candidate
and its group join the earlier moment instead of starting a new one. So ``k`` moments are ``k`` things
to look at, whatever the size of each, and the cost is K look-ups of a neighbourhood (K x N distances,
never N^2). A candidate whose nearest other photo, as the ranking measured it in the same space, is
beyond the radius is a moment of its own without a look-up (by content).

Moments in time. Given capture times (any method), the group is joined by the photos time puts with
any of its photos (``time_mates``: ``novelfind.ranking.events.TimeLinks``): their bursts, and the photos
of their event that are closer to each other than to any photo of another event. So a burst is one
moment under every method, and an odd evening of alike photos is one moment, while an odd photo of an
ordinary day joins no one. Without times nothing changes.

Distances are between feature vectors scaled to unit length (0 = same direction, sqrt(2) = unrelated),
so the radius means the same for every feature kind and library. A moment is made of candidates only
(the photos that may be picked): a photo on the ignore list, or older than ``--since``, is neither
picked nor a member, so this week's new frame of an old scene does not bring last year's photos back
into the copies, the ignore list or the sidecars (nor link two new photos through them).

The representative is the best original of the moment's medoid: the medoid is the photo with the
least summed distance to the others, the most typical frame, the one a person recognises the burst by
(the highest scored frame is its least typical one: a blurred or badly exposed shot); ties go to the
highest scored (for two photos, always the higher scored). Among the medoid and its copies (within
``COPY_RADIUS``) the best original by ``prefer`` is shown (a scan's: a photo before a clip, a RAW twin,
pixels, bytes; ``novelfind.results.originality``). The moment keeps the score of its highest scored
photo. The distances between a moment's photos are one matrix product (``_pairwise``), exact where a
comparison could turn on rounding.

Read from a matrix or from the cache in chunks, the look-ups read the same unit rows (``take``) and the
exact search gives the same neighbours, so the moments are the same (tested past the memory budget and
past ``knn.EXACT_MAX_N`` rows).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from novelfind.ranking.sources import FeatureSource, unit_rows

# Two photos whose unit-length feature vectors are closer than this are frames of one moment (linked
# through others, single linkage): a re-saved or resized copy is 0.01-0.05 apart, frames of one burst
# 0.05-0.3. 0.15 is the near-duplicate threshold measured on the benchmark (it cost no set anything);
# it is the ranking's ``dedup`` default and ``--dedup`` sets it (0: every photo is its own moment).
LINK_RADIUS = 0.15
# A re-saved or resized copy of a photo is this close to it (distance between unit vectors, 0.01-0.05
# measured): among the moment's photos this close to its medoid, the best original is shown (``prefer``)
COPY_RADIUS = 0.05
# Photos looked up around each candidate: the most one look-up can add to a moment (a larger batch
# grows by further look-ups, ``GROW_MAX``); it sets the cost (K x NEIGHBOURS rows read back,
# NEIGHBOURS^2 distances per look-up), not the size of a moment.
NEIGHBOURS = 64
# A moment whose look-ups keep finding linked photos grows by further look-ups up to this many photos: a
# bound on the cost of one moment (1,024 photos: about 16 passes over the library), far above any burst.
GROW_MAX = 1024
# Distances within this much (relative to the rows' length) of a threshold they are compared with are
# measured again from the difference of the rows: the matrix product's rounding (about 1e-13 for unit
# rows of 1,280 numbers) then cannot change an answer
ROUNDING_BAND = 1e-6
# ... and so are distances under this (relative): there the product's rounding, about 1e-15 on the
# square, is no longer small beside the distance (a copy of a file would be 1e-8 from it, not 0)
NEAR_ZERO = 1e-3
# Sums of distances this close count as equal when the medoid is chosen (rounding of the matrix product)
SUM_TIE = 1e-9
PAIRS_AT_ONCE = 4096  # pairs measured from their difference in one numpy call (bounds the memory)


@dataclass
class Moments:
    """The first k moments of a ranking's order (fewer when the order runs out)."""

    heads: np.ndarray  # int64 (K,) each moment's highest scored row, best moment first
    representatives: np.ndarray  # int64 (K,) each moment's medoid (the row shown)
    members: list[np.ndarray]  # K arrays of int64 rows: the moment's other photos, nearest first
    distances: list[np.ndarray]  # K arrays of float32: each member's distance to the representative
    folded: int = 0  # candidates passed over because they belong to an earlier moment
    read: int = 0  # entries of the order read to find them


@dataclass
class UnitRows:
    """A source's rows scaled to unit length as they are read (no normalised copy of the library)."""

    source: FeatureSource
    n: int = field(init=False)
    dim: int = field(init=False)
    matrix: None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.n, self.dim = self.source.n, self.source.dim

    def chunks(self) -> Iterator[np.ndarray]:
        return (unit_rows(c) for c in self.source.chunks())

    def take(self, rows: np.ndarray) -> np.ndarray:
        return unit_rows(self.source.take(np.asarray(rows, dtype=np.int64)))

    def abs_max(self) -> float:
        return 1.0


def singles(order: np.ndarray, k: int) -> Moments:
    """Every photo its own moment: the first k of ``order`` (grouping turned off)."""
    heads = np.asarray(order, dtype=np.int64)[:k]
    empty_i, empty_f = np.zeros(0, np.int64), np.zeros(0, np.float32)
    return Moments(heads, heads.copy(), [empty_i] * len(heads), [empty_f] * len(heads), 0, len(heads))


class Grouper:
    """Groups orders of one library's rows into moments; keeps each look-up, so the ranking's certified
    order (which may read its order a few times, as more scores become exact) never repeats one.

    ``unit``: the rows scaled to unit length (a ``sources.UnitSource``, or ``UnitRows``); ``radius``:
    the link radius (``LINK_RADIUS``); ``candidates``: bool (N,), the rows that may be picked, the only
    rows a moment is made of (None: all)."""

    def __init__(
        self,
        unit: FeatureSource,
        radius: float = LINK_RADIUS,
        *,
        neighbours: int = NEIGHBOURS,
        candidates: np.ndarray | None = None,
    ) -> None:
        self.unit, self.radius, self.neighbours, self.candidates = unit, float(radius), neighbours, candidates
        self.looked_up: dict[int, np.ndarray] = {}  # row -> its group (int64, the row first)
        self.open: set[int] = set()  # rows whose group may go on past the photos their look-up found
        # each row's distance to its nearest other row in the same unit-length space where the ranking
        # already measured it (NaN where it did not): a row farther than the radius from every other
        # row is a moment of its own, with no look-up (most odd photos are)
        self.nearest: np.ndarray | None = None
        # bool (N,): the rows whose score is exact (None: all). The certified order reads its order
        # on bounds first and again once the rows read are exact: a row read on its bound is taken as
        # a moment of its own for that reading, without a look-up; the last reading, on exact rows
        # only, is the answer (``novelfind.ranking.knn.certified_order``)
        self.exact: np.ndarray | None = None
        # rows -> for each, the rows that time puts in its moment (its burst, its event group:
        # ``novelfind.ranking.events.TimeLinks``), joined to its linked group; None: content alone
        self.time_mates: Callable[[np.ndarray], list[np.ndarray]] | None = None
        self.timed: set[int] = set()  # rows whose group time has joined already
        # how good an original each row is, larger better (``original_keys``: an array (N,) or (N, K) of
        # keys compared first key first, or a callable rows -> keys, asked only for the medoid and its
        # copies): among the medoid and its copies (within COPY_RADIUS) the best is the representative,
        # not a resave or thumbnail; None: the medoid
        self.prefer: np.ndarray | Callable[[np.ndarray], np.ndarray] | None = None

    def group(self, order: np.ndarray, k: int) -> Moments:
        """The first k moments of ``order`` (rows, best first); see the module docstring."""
        order = np.asarray(order, dtype=np.int64)
        if self.radius <= 0 or self.unit.n == 1:
            return singles(order, k)
        owner: dict[int, int] = {}  # row -> the moment it belongs to
        moments: list[list[int]] = []  # rows of each moment, its head first
        folded = pos = 0
        while len(moments) < k and pos < len(order):
            # look up the next candidates not yet in a moment, about twice as many as moments still wanted
            want, end, todo, alone = max(8, 2 * (k - len(moments))), pos, [], []
            while len(todo) + len(alone) < want and end < len(order):
                row, end = int(order[end]), end + 1
                if row in owner or row in self.looked_up or not self._settled(row):
                    continue
                if self._alone(row):  # a moment of its own by content: no look-up, but it counts
                    self.looked_up[row] = np.asarray([row], dtype=np.int64)
                    alone.append(row)
                else:
                    todo.append(row)
            self._look_up(todo)
            while pos < end and len(moments) < k:
                row, pos = int(order[pos]), pos + 1
                if row in owner:
                    folded += 1
                    continue
                if row in self.looked_up and row not in self.timed:  # time's photos of the next moments
                    ahead = (int(r) for r in order[pos - 1 : end])
                    ahead = [
                        r for r in ahead if r not in owner and r in self.looked_up and r not in self.timed
                    ]
                    self._join_in_time(ahead[: k - len(moments)])
                # (a row read on its bound is not looked up: what counts is whether this reading did)
                group = self._closure(row) if row in self.looked_up else [row]
                earlier = [owner[r] for r in group if r in owner]
                if earlier:  # it links to an earlier moment: it and its group join that one
                    target, folded = min(earlier), folded + 1
                else:
                    target = len(moments)
                    moments.append([])
                for r in group:
                    if r not in owner:
                        owner[r] = target
                        moments[target].append(r)
        return self._finish(moments, folded, pos)

    def _settled(self, row: int) -> bool:
        return self.exact is None or bool(self.exact[row])

    def _alone(self, row: int) -> bool:
        """Whether ``nearest`` puts the row beyond the radius from every other row (with a margin for
        the float rounding between that search and ``_linked``, so the answer is the look-up's)."""
        return self.nearest is not None and bool(self.nearest[row] >= self.radius * (1 + 1e-4))

    def _join_in_time(self, rows: list[int]) -> None:
        """Add to each looked-up row's group the candidates that time puts in its moment (its burst, its
        event group: ``events.TimeLinks``), all rows asked at once, only for rows about to make a
        moment (time's links may cost a search). A photo of the group that time links elsewhere brings
        its own when it is read: its group then touches this moment."""
        self.timed.update(rows)
        if self.time_mates is None or not rows:
            return
        for row, mates in zip(rows, self.time_mates(np.asarray(rows, dtype=np.int64)), strict=True):
            mates = np.asarray(mates, dtype=np.int64)
            if self.candidates is not None:
                mates = mates[self.candidates[mates]]
            mates = mates[~np.isin(mates, self.looked_up[row])]
            self.looked_up[row] = np.concatenate([self.looked_up[row], mates])

    def _closure(self, row: int) -> list[int]:
        """The row's group, grown while it may go on past the photos looked up (``open``): the group's
        other rows are looked up, in one pass, and their groups joined, until nothing is added or the
        group holds ``GROW_MAX`` photos."""
        group = dict.fromkeys(self.looked_up[row].tolist())
        merged = {row}
        while len(group) < GROW_MAX and any(r in self.open for r in merged):
            todo = [r for r in group if r not in merged]
            if not todo:
                break
            self._look_up([r for r in todo if r not in self.looked_up])
            self._join_in_time([r for r in todo if r not in self.timed])
            for r in todo:
                group.update(dict.fromkeys(self.looked_up[r].tolist()))
            merged.update(todo)
        return list(group)

    def _look_up(self, rows: list[int]) -> None:
        """The single-linkage group of each row among its ``neighbours`` nearest rows, one exact pass."""
        if not rows:
            return
        from novelfind.ranking import knn

        query = np.asarray(rows, dtype=np.int64)
        dist, idx = knn.knn_exact(
            self.unit, query, self.neighbours, centre=np.zeros(self.unit.dim, np.float32)
        )
        hoods = np.concatenate([query[:, None], idx], axis=1)  # (Q, 1 + neighbours) the row first
        far = np.concatenate([np.zeros((len(rows), 1), np.float32), dist], axis=1)  # distances to the row
        whole = idx.shape[1] == self.unit.n - 1  # the look-up saw every row
        found, where = np.unique(hoods, return_inverse=True)  # every row the look-ups found, read once
        xs, where = self.unit.take(found), where.reshape(hoods.shape)
        with one_blas_thread():  # small products: one thread each is fastest, and never stalls
            for row, hood, at, d in zip(rows, hoods, where, far, strict=True):
                keep = np.ones(len(hood), bool) if self.candidates is None else self.candidates[hood]
                keep[0] = True
                linked = np.flatnonzero(keep)[_linked(xs[at[keep]], self.radius)]
                self.looked_up[row] = hood[linked]
                # a row outside the look-up is at least d[-1] from this one, so at least d[-1] - d[j]
                # from linked row j: the group may go on past the look-up only where that is under the
                # radius
                if not whole and float(d[linked].max()) > float(d[-1]) - self.radius:
                    self.open.add(row)

    def _best_original(self, ids: np.ndarray, copies: np.ndarray, rep: int) -> int:
        """Among the medoid ``rep`` and its copies (positions in ``ids``), the best original by
        ``prefer``: the medoid unless a copy's keys are greater, else the first copy with the greatest."""
        keys = dict(zip(copies.tolist(), original_keys(self.prefer, ids[copies]), strict=True))
        top = max(keys.values())
        return rep if keys[rep] == top else next(c for c in copies.tolist() if keys[c] == top)

    def _finish(self, moments: list[list[int]], folded: int, read: int) -> Moments:
        """Each moment's representative (its medoid's best original) and its members, nearest first."""
        heads, reps, members, distances = [], [], [], []
        with one_blas_thread():  # small products
            for rows in moments:
                ids = np.asarray(rows, dtype=np.int64)  # the head first
                if len(ids) == 1:
                    heads.append(ids[0])
                    reps.append(ids[0])
                    members.append(ids[1:])
                    distances.append(np.zeros(0, np.float32))
                    continue
                x = np.asarray(self.unit.take(ids), dtype=np.float64)  # (G, M)
                sums = _pairwise(x).sum(1)
                # the first of equal sums (to rounding): the head, else the higher scored
                rep = int(np.flatnonzero(sums <= sums.min() + SUM_TIE)[0])
                near = _difference_norms(x, x[rep])  # (G,) each photo's distance to the medoid, exactly
                copies = np.flatnonzero(near < COPY_RADIUS)  # the medoid among them
                if self.prefer is not None and len(copies) > 1:
                    best = self._best_original(ids, copies, rep)
                    if best != rep:
                        rep, near = best, _difference_norms(x, x[best])
                others = np.delete(np.arange(len(ids)), rep)
                order = others[np.lexsort((ids[others], near[others]))]  # nearest first, ties by row
                heads.append(ids[0])
                reps.append(ids[rep])
                members.append(ids[order])
                distances.append(near[order].astype(np.float32))
        as_rows = lambda v: np.asarray(v, dtype=np.int64)  # noqa: E731
        return Moments(as_rows(heads), as_rows(reps), members, distances, folded, read)


def one_blas_thread():
    """A block in which the BLAS library runs one thread: the moments' matrix products are small (65 x
    1,280), and spread over threads they gain nothing and stall for milliseconds on a busy machine."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def original_keys(prefer, rows: np.ndarray) -> list[tuple[float, ...]]:
    """``prefer``'s keys of ``rows`` (``Grouper.prefer``: an array (N,) or (N, K), or a callable rows
    -> (R,) or (R, K)), one tuple per row, compared first key first."""
    keys = prefer(rows) if callable(prefer) else np.asarray(prefer)[rows]
    keys = np.asarray(keys, dtype=np.float64).reshape(len(rows), -1)
    return [tuple(k) for k in keys.tolist()]


def _pairwise(x: np.ndarray, exact_near: float | None = None) -> np.ndarray:
    """(G, G) float64 distances between the rows of x, exactly symmetric with a zero diagonal, from one
    matrix product (``|a - b|^2 = |a|^2 + |b|^2 - 2 a.b``, BLAS): G^2 M multiply-adds at BLAS speed
    instead of G numpy calls over G x M differences. Where a distance lies within ``ROUNDING_BAND`` of
    ``exact_near`` (the threshold the caller compares it with), it is measured again from the difference
    of the two rows, the arithmetic of ``np.linalg.norm(x - v, axis=1)``, so the comparison is the
    same as with distances measured that way (``tests/ranking/test_moments.py``); so is every distance
    under ``NEAR_ZERO``, where the product's rounding is not small beside it (a copy is 0 from its file)."""
    x = np.asarray(x, dtype=np.float64)
    if not len(x):
        return np.zeros((0, 0))
    sq = np.einsum("ij,ij->i", x, x)  # (G,)
    d2 = sq[:, None] + sq[None, :] - 2.0 * (x @ x.T)  # (G, G)
    d2 = 0.5 * (d2 + d2.T)  # exactly symmetric, so equal sums compare equal
    dist = np.sqrt(np.maximum(d2, 0.0))
    np.fill_diagonal(dist, 0.0)
    scale = max(1.0, float(np.sqrt(sq.max())))
    again = dist < NEAR_ZERO * scale
    if exact_near is not None:
        again |= np.abs(dist - exact_near) < ROUNDING_BAND * scale
    i, j = np.nonzero(np.triu(again, 1))
    for start in range(0, len(i), PAIRS_AT_ONCE):
        a, b = i[start : start + PAIRS_AT_ONCE], j[start : start + PAIRS_AT_ONCE]
        dist[a, b] = dist[b, a] = _difference_norms(x[b], x[a])
    return dist


def _difference_norms(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """|x_i - v_i| (or |x_i - v| for one row v), row by row: ``np.linalg.norm(x - v, axis=1)``."""
    return np.linalg.norm(x - v, axis=1)


def _linked(x: np.ndarray, radius: float) -> np.ndarray:
    """Indices of the rows of x (G, M) reachable from row 0 by steps shorter than ``radius``: its
    single-linkage group at that height, row 0 first. A breadth-first walk on a G x G matrix (G is
    ``NEIGHBOURS`` + 1): smaller than what calling a clustering library would take."""
    near = _pairwise(x, exact_near=radius) < radius  # (G, G)
    reached = np.zeros(len(x), bool)
    reached[0] = True
    frontier = reached.copy()
    while frontier.any():
        frontier = near[frontier].any(0) & ~reached
        reached |= frontier
    return np.flatnonzero(reached)


def dedup_order(order: np.ndarray, xn: np.ndarray, k: int, threshold: float | None) -> tuple[np.ndarray, int]:
    """First k of ``order`` skipping any within ``threshold`` of an already kept one (rows of xn): the
    plain near-duplicate pass over a matrix, as the research scripts measure it (``rank`` groups its
    picks into moments instead: ``Grouper``).

    -> (kept indices int64, number skipped before the k-th was kept). Greedy and sequential in meaning,
    but evaluated a block of candidates at a time: one matmul against the kept rows (a preallocated
    (k, M) array) and one inside the block flag the pairs that may be within ``threshold`` (Gram
    distances, with a float slack), and only those pairs are confirmed with the exact norm of the
    difference. So the cost is a few GEMMs, O(scanned x kept x M) flops at BLAS speed, with no
    per-pick copying; for k = 100 it is one or two small blocks.
    """
    order = np.asarray(order, dtype=np.int64)
    if threshold is None or threshold <= 0:
        return order[:k], 0
    cap = int(min(k, len(order)))
    if cap <= 0:
        return np.zeros(0, dtype=np.int64), 0
    dt = np.result_type(xn.dtype, np.float32)
    kept_x = np.empty((cap, xn.shape[1]), dtype=dt)  # (k, M) the kept rows, in pick order
    kept_sq = np.empty(cap, dtype=np.float64)  # (k,) their squared norms
    kept_idx = np.empty(cap, dtype=np.int64)
    thr = float(threshold)
    thr2 = thr * thr
    c = dropped = pos = 0
    while c < cap and pos < len(order):
        # block size: about twice the picks still needed (few wasted rows for small k), bounded so the
        # (B, kept) Gram block stays <= ~8M entries
        b = int(min(len(order) - pos, max(32, min(1024, 2 * (cap - c)), 1), max(32, 8_000_000 // max(c, 1))))
        blk = order[pos : pos + b]
        pos += b
        bx = np.asarray(xn[blk], dtype=dt)  # (B, M)
        bsq = np.einsum("ij,ij->i", bx, bx).astype(np.float64)  # (B,)
        # candidate pairs (Gram distance below threshold + slack); confirmed exactly below
        if c:
            g = (bx @ kept_x[:c].T).astype(np.float64)  # (B, c)
            ssum = bsq[:, None] + kept_sq[None, :c]
            flag_prev = (ssum - 2 * g) < thr2 + 1e-4 * ssum + 1e-6  # (B, c)
            any_prev = flag_prev.any(axis=1)  # (B,)
        gb = (bx @ bx.T).astype(np.float64)  # (B, B)
        ssb = bsq[:, None] + bsq[None, :]
        flag_blk = (ssb - 2 * gb) < thr2 + 1e-4 * ssb + 1e-6  # (B, B)
        acc = np.zeros(b, dtype=bool)  # accepted in this block
        c0 = c
        for j in range(b):
            near = False
            if c0 and any_prev[j]:
                r = np.flatnonzero(flag_prev[j])
                near = bool((np.linalg.norm(kept_x[r] - bx[j], axis=1) < thr).any())
            if not near and j:
                r = np.flatnonzero(flag_blk[j, :j] & acc[:j])
                if len(r):
                    near = bool((np.linalg.norm(bx[r] - bx[j], axis=1) < thr).any())
            if near:
                dropped += 1
                continue
            acc[j] = True
            kept_x[c] = bx[j]
            kept_sq[c] = bsq[j]
            kept_idx[c] = blk[j]
            c += 1
            if c == cap:
                break
    return kept_idx[:c].copy(), dropped
