"""The HTML report: one self-contained page about the picks (the library map, a card per pick with its
neighbour and its moment's other photos, the run's settings, the files that could not be read).

Its cost is the thumbnails (:mod:`novelfind.outputs.thumbnails`: made in the decode processes, each
photo decoded once for all its sizes, and kept for the next report), so the scanning process only
assembles the page. A re-scan of 300 cached 12 MP photos with ``--k 100`` on the 2-core machine
(scripts/bench_report.py, docs/bench/report-2core.json; CPU seconds of the process tree, as wall time
meant nothing at a load average of 20-24): 4.9 s without ``--report``; 9.7 s with the first report
(133 photos decoded); 5.2 s (1.06x) with a report of photos shown before, against 6.5 s (1.3x) before
thumbnails were kept.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import closing
from html import escape
from pathlib import Path
from typing import Any

import numpy as np

from novelfind.base.atomic import output_mode, write_atomic
from novelfind.base.devices import available_cpus
from novelfind.extract.decoders.pillow import decode_each
from novelfind.media.dates import SOURCE_WORDS
from novelfind.media.decode import decode_processes_within_budget
from novelfind.media.kinds import kind_of
from novelfind.outputs.formats import span_times
from novelfind.outputs.thumbnails import (
    MAX_THUMBNAIL_WORKERS,
    Thumb,
    ThumbnailCache,
    clip_moment,
    clock,
    make_thumbnails,
)
from novelfind.picks import Failure, Member, Pick, iso_utc

THUMB_SIZE = 256  # longest side of a pick's thumbnail, px
NEIGHBOUR_THUMB_SIZE = 160
MEMBER_THUMB_SIZE = 96  # the strip of a moment's other photos under its pick
MEMBERS_SHOWN = 24  # thumbnails in that strip; the count says how many more (the results list has all)
MAX_MAP_POINTS = 5000  # non-pick points drawn in the library map; picks are always drawn
MAX_FAILURES_SHOWN = 1000


def _data_uri(jpeg: bytes) -> str:
    return "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")


# ---------------------------------------------------------------------------------------------
# HTML report

_SCRIPT = """window.addEventListener("load", function () {
  var imgs = document.images, ok = 0;
  for (var i = 0; i < imgs.length; i++) {
    if (imgs[i].complete && imgs[i].naturalWidth > 0) ok++;
  }
  document.body.dataset.imagesLoaded = ok + "/" + imgs.length;
});"""

_CSS = """
:root { --fg:#1d1f21; --muted:#5f6368; --line:#dadce0; --bg:#fafafa; --card:#fff; --pick:#d93025; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: var(--fg); background: var(--bg); }
main { max-width: 1120px; margin: 0 auto; padding: 24px 20px 48px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 32px 0 12px; }
.sub { color: var(--muted); margin: 0 0 16px; }
.counts { display: flex; flex-wrap: wrap; gap: 10px; margin: 16px 0; }
.count { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 8px 14px; }
.count b { display: block; font-size: 20px; }
.count span { color: var(--muted); font-size: 13px; }
table.params { border-collapse: collapse; background: var(--card); font-size: 13px; }
table.params td { border: 1px solid var(--line); padding: 4px 10px; vertical-align: top; }
table.params td:first-child { color: var(--muted); white-space: nowrap; }
.map { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 8px; }
.map svg { width: 100%; height: auto; display: block; }
.map .pt { fill: #9aa0a6; fill-opacity: .55; }
.map .pk { fill: var(--pick); stroke: #fff; stroke-width: 1.5; }
.map a:hover .pk { fill: #a50e0e; }
.map text { font-size: 11px; fill: #202124; paint-order: stroke; stroke: #fff; stroke-width: 3px; }
.legend { color: var(--muted); font-size: 13px; margin: 6px 4px 0; }
.pick { display: grid; grid-template-columns: 56px 272px 1fr 200px; gap: 16px; align-items: start;
        background: var(--card); border: 1px solid var(--line); border-radius: 8px;
        padding: 12px; margin: 0 0 12px; }
.rank { font-size: 24px; font-weight: 700; color: var(--pick); text-align: right; }
.thumb { width: 272px; min-width: 0; min-height: 120px; display: flex; flex-direction: column;
         align-items: center; justify-content: center; overflow: hidden; background: #f1f3f4;
         border-radius: 4px; }
.thumb img, .nb img { max-width: 100%; height: auto; display: block; border-radius: 4px; }
.clipmark { font-size: 12px; color: #fff; background: #202124; border-radius: 0 0 4px 4px; padding: 2px 6px;
            max-width: 100%; }
.missing { color: var(--muted); font-size: 13px; padding: 24px; text-align: center; }
.meta { min-width: 0; font-size: 14px; }
.meta .path { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 13px;
              overflow-wrap: anywhere; margin: 0 0 8px; }
.meta dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 0; }
.meta dt { color: var(--muted); }
.meta dd { margin: 0; }
.nb { font-size: 12px; color: var(--muted); min-width: 0; }
.nb .path { font-family: ui-monospace, monospace; overflow-wrap: anywhere; color: var(--fg); }
.bar { height: 6px; background: #f1f3f4; border-radius: 3px; margin: 4px 0; }
.bar i { display: block; height: 6px; background: var(--pick); border-radius: 3px; }
.failures li { font-family: ui-monospace, monospace; font-size: 12px; overflow-wrap: anywhere; }
.failures .why { color: var(--muted); font-family: system-ui, sans-serif; }
.strip { grid-column: 1 / -1; display: flex; flex-wrap: wrap; gap: 6px; align-items: center;
         font-size: 12px; color: var(--muted); }
.strip img { height: 64px; width: auto; display: block; border-radius: 3px; }
.strip .missing { padding: 4px; font-size: 11px; }
@media (max-width: 900px) { .pick { grid-template-columns: 40px minmax(0, 1fr); }
  .thumb, .meta, .nb { grid-column: 2; } .thumb { width: 100%; } }
"""


def _display(value: Any) -> str:
    """Text for people: undecodable bytes and control characters as ``\\xHH``, then HTML-escaped."""
    text = os.fspath(value) if isinstance(value, os.PathLike) else str(value)
    out = []
    for ch in text:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code < 0x20 or code == 0x7F or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return escape("".join(out), quote=True)


def _human_size(size: int | None) -> str:
    if size is None:
        return "?"
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # pragma: no cover


def _flatten(run: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for key, value in run.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            rows += _flatten(value, prefix=f"{name}.")
        elif isinstance(value, (list, tuple)):
            rows.append((name, ", ".join(str(v) for v in value)))
        else:
            rows.append((name, value))
    return rows


def _svg_map(
    points2d: np.ndarray,
    pick_indices: Sequence[int],
    picks: Sequence[Pick],
    paths: Sequence[Path | str] | None,
    max_points: int,
) -> str:
    pts = np.asarray(points2d, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[1] != 2:
        raise ValueError(f"points2d must have shape (N, 2), got {pts.shape}")
    n = pts.shape[0]
    picked = [int(i) for i in pick_indices]
    if any(i < 0 or i >= n for i in picked):
        raise ValueError(f"pick_indices out of range for {n} points")
    if len(picked) != len(picks):
        raise ValueError(f"{len(picked)} pick_indices for {len(picks)} picks")
    is_pick = np.zeros(n, dtype=bool)
    is_pick[picked] = True
    others = np.flatnonzero(~is_pick)
    if len(others) > max_points:
        others = np.sort(np.random.default_rng(0).choice(others, size=max_points, replace=False))

    shown = np.concatenate([others, np.asarray(picked, dtype=np.int64)])
    lo = pts[shown].min(axis=0) if len(shown) else np.zeros(2)
    hi = pts[shown].max(axis=0) if len(shown) else np.ones(2)
    span = np.where(hi - lo > 0, hi - lo, 1.0)
    width, pad = 1000.0, 24.0
    # Equal scale on both axes (distances stay honest); the box is only as tall as the data needs.
    height = float(np.clip((width - 2 * pad) * span[1] / span[0] + 2 * pad, 240.0, 600.0))
    scale = min((width - 2 * pad) / span[0], (height - 2 * pad) / span[1])
    offset = (np.array([width, height]) - span * scale) / 2

    def xy(i: int) -> tuple[float, float]:
        x = offset[0] + (pts[i, 0] - lo[0]) * scale
        y = height - (offset[1] + (pts[i, 1] - lo[1]) * scale)  # y up
        return x, y

    parts = [f'<svg viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="map of the library">']
    for i in others:
        x, y = xy(int(i))
        title = f"<title>{_display(paths[i])}</title>" if paths is not None else ""
        parts.append(f'<circle class="pt" cx="{x:.1f}" cy="{y:.1f}" r="2.6">{title}</circle>')
    label_limit = 30  # more labels than this only clutter the map
    for pick, i in sorted(
        zip(picks, picked, strict=True), key=lambda t: -t[0].rank
    ):  # best drawn last, on top
        x, y = xy(i)
        title = f"#{pick.rank} {_display(pick.path)} (score {pick.score:.4f})"
        label = (
            f'<text x="{x + 8:.1f}" y="{y - 6:.1f}">{pick.rank}</text>' if pick.rank <= label_limit else ""
        )
        parts.append(
            f'<a href="#pick-{pick.rank}"><circle class="pk" cx="{x:.1f}" cy="{y:.1f}" r="6">'
            f"<title>{title}</title></circle>{label}</a>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _img_or_missing(uri: str | None, alt: str) -> str:
    if uri is None:
        return '<div class="missing">no preview<br>(cannot read image)</div>'
    return f'<img src="{uri}" alt="{alt}">'


# The run record's counts (docs/output-schema.md), shown up front: (key, label).
_COUNTS = (
    ("images_found", "images found"),
    ("from_cache", "read from cache"),
    ("extracted", "extracted"),
    ("failed", "failed"),
)


def write_html_report(
    path: Path | str,
    picks: Sequence[Pick],
    *,
    points2d: np.ndarray | None = None,
    pick_indices: Sequence[int] | None = None,
    paths: Sequence[Path | str] | None = None,
    run: Mapping[str, Any] | None = None,
    failures: Iterable[tuple[Path | str, str]] = (),
    title: str = "novelfind report",
    max_points: int = MAX_MAP_POINTS,
    decode_timeout: float | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    thumbnail_cache: Path | str | None = None,
    listed: Mapping[Path, tuple[int, int]] | None = None,
    on_skipped: Callable[[Path, str], None] | None = None,
    mode: int | None = None,
) -> None:
    """Write one self-contained HTML page (no network, thumbnails as data URIs) about the picks.

    ``points2d`` (N, 2) places the whole library on a map (see :func:`novelfind.ranking.pca.map_2d`),
    ``pick_indices`` (K,) are the picks' rows in it, in the order of ``picks``; ``paths`` (N,) gives
    hover titles. ``run`` is the run record of ``docs/output-schema.md``: its counts (``images_found``,
    ``from_cache``, ``extracted``, ``failed``) are shown up front, everything in a table.
    ``decode_timeout``: seconds a thumbnail's decode may take in its process (None: the scan's
    default, ``pillow.DECODE_TIMEOUT_S``); past that it is stopped and gets the placeholder.
    ``on_progress(done, total)``: called as the files' thumbnails are made (a progress bar).
    ``thumbnail_cache``: a file (:class:`ThumbnailCache`) that keeps the thumbnails for the next report
    (None: none), so that a re-scan showing the same photos decodes none of them again. ``mode``: the
    page's (None: ``atomic.output_mode()``, for the user alone).

    Each file shown is opened through the library door as the file that was ranked: a pick's and a
    member's size and modification time are theirs, a neighbour's are in ``listed`` (path -> (size,
    modification time in ns); a file not there is read as it is). A file the door refuses (a link
    renamed over it since, a FIFO, another size or time) is shown as unreadable and goes to
    ``on_skipped(path, reason)``. Raises OutputError when the file cannot be written and ValueError for
    inconsistent map inputs.
    """
    picks = list(picks)
    failures = [Failure(Path(p), str(r)) for p, r in failures]
    run = dict(run or {})
    map_section = ""
    if points2d is not None:
        if pick_indices is None:
            raise ValueError("pick_indices is required with points2d")
        map_section = _map_section(points2d, list(pick_indices), picks, paths, max_points)
    picks.sort(key=lambda p: p.rank)
    body = [
        _headline(picks, run, failures),
        map_section,
        _picks_section(picks, decode_timeout, on_progress, thumbnail_cache, listed, on_skipped),
        _run_section(run),
        _failures_section(failures),
    ]
    page = _page(title, len(picks), "\n".join(part for part in body if part))
    write_atomic(path, page, mode=output_mode() if mode is None else mode)


def _headline(picks: Sequence[Pick], run: Mapping[str, Any], failures: Sequence[Failure]) -> str:
    """Title, the run's paths and method, and the counts."""
    found = run.get("images_found")
    headline = f"{len(picks)} most novel photos" + (f" of {found}" if found is not None else "")
    parts = [f"<h1>{_display(headline)}</h1>"]
    shown = ("paths", "method", "feature", "since")
    subtitle = [f"{_display(k)}: {_display(v)}" for k, v in _flatten(run) if k in shown and v]
    if subtitle:
        parts.append(f'<p class="sub">{" · ".join(subtitle)}</p>')
    counts = {**{key: run.get(key) for key, _ in _COUNTS}, "picked": len(picks)}
    if counts["failed"] is None:
        counts["failed"] = len(failures)
    labels = dict(_COUNTS, picked="picked")
    boxes = "".join(
        f'<div class="count"><b>{_display(value)}</b><span>{labels[key]}</span></div>'
        for key, value in counts.items()
        if value is not None
    )
    parts.append(f'<div class="counts">{boxes}</div>')
    return "\n".join(parts)


def _map_section(
    points2d: np.ndarray,
    pick_indices: Sequence[int],
    picks: Sequence[Pick],
    paths: Sequence[Path | str] | None,
    max_points: int,
) -> str:
    svg = _svg_map(points2d, pick_indices, picks, paths, max_points)
    others = int(np.asarray(points2d).shape[0]) - len(picks)
    shown = min(max_points, max(0, others))
    note = f"; {shown} of {others} other photos shown" if shown < others else ""
    return (
        f'<h2>Map of the library</h2>\n<div class="map">{svg}</div>\n'
        '<p class="legend">First two principal components of the image features. '
        f'<span style="color:var(--pick)">●</span> picks (click to jump), '
        f"<span>●</span> the rest of the library{note}. Hover a point for its path.</p>"
    )


_LABELS_NOTE = (
    "“Looks like”: MobileNet-V2’s most likely ImageNet classes, with their probability. They are "
    "ImageNet labels, a model’s guess among the 1000 classes it was trained on, not the truth about "
    "the photo, nor the reason it was picked."
)


def _picks_section(
    picks: Sequence[Pick],
    decode_timeout: float | None,
    on_progress: Callable[[int, int], None] | None,
    thumbnail_cache: Path | str | None = None,
    listed: Mapping[Path, tuple[int, int]] | None = None,
    on_skipped: Callable[[Path, str], None] | None = None,
) -> str:
    """One card per pick: thumbnail, facts about the file, its nearest neighbour, and the strip of the
    other photos of its moment."""
    wanted = [(Path(p.path), THUMB_SIZE, clip_moment(p)) for p in picks]
    wanted += [(Path(p.neighbour), NEIGHBOUR_THUMB_SIZE, None) for p in picks if p.neighbour is not None]
    wanted += [(Path(m.path), MEMBER_THUMB_SIZE, None) for p in picks for m in p.members[:MEMBERS_SHOWN]]
    # each file as it was ranked: the library door refuses it when it is not that file any more
    expect = {Path(path): tuple(stat) for path, stat in (listed or {}).items()}
    expect.update({Path(m.path): (m.size, m.mtime_ns) for p in picks for m in p.members[:MEMBERS_SHOWN]})
    expect.update({Path(p.path): (p.size, p.mtime_ns) for p in picks})
    cache = None if thumbnail_cache is None else ThumbnailCache(thumbnail_cache)
    try:
        made = make_thumbnails(
            wanted, decode_timeout, encode=True, on_progress=on_progress, cache=cache, expect=expect
        )
    finally:
        if cache is not None:
            cache.close()
    if on_skipped is not None:
        for path, reason in made.refused.items():
            on_skipped(path, f"{reason}; not shown in the report")
    thumbs = {key: None if jpeg is None else _data_uri(jpeg) for key, jpeg in made.thumbs.items()}
    infos = _image_infos(
        [(Path(p.path), expect[Path(p.path)]) for p in picks if p.clip is None], decode_timeout
    )
    max_distance = max((p.distance for p in picks if p.distance is not None), default=0.0) or 1.0
    cards = []
    for p in picks:
        info = {} if p.clip is not None else next(infos)
        if p.clip is not None and Path(p.path) in made.frames:
            info = dict(zip(("width", "height"), made.frames[Path(p.path)], strict=True))
        cards.append(_pick_card(p, thumbs, info, max_distance))
    note = f'<p class="sub">{_display(_LABELS_NOTE)}</p>\n' if any(p.labels for p in picks) else ""
    return "<h2>Picks, most novel first</h2>\n" + note + "\n".join(cards)


def _image_infos(files: Sequence[tuple[Path, tuple[int, int]]], timeout: float | None) -> Iterator[dict]:
    """Dimensions and EXIF date of each photo (path, and the size and modification time it was ranked
    with: read through the library door as that file), headers only (Pillow's, LibRaw's for a RAW), in a
    few decode processes under the decode time limit (``timeout`` seconds; None: the default), the
    decoded-pixels budget and the address-space limit, as the thumbnails are: a photo is untrusted input.
    ``{}`` where it cannot be read or took too long."""
    if not files:
        return iter(())
    workers = min(MAX_THUMBNAIL_WORKERS, available_cpus(), decode_processes_within_budget(), len(files))
    tasks = [(os.fspath(path), int(stat[0]), int(stat[1])) for path, stat in files]
    with closing(decode_each(header_info, tasks, max(1, workers), timeout)) as results:
        got = dict(results)
    return iter(got.get(i) or {} for i in range(len(files)))


def header_info(path: str, size: int, mtime_ns: int) -> dict:
    """Run in a decode process: ``{"width", "height", "taken"}`` of ``path`` by its kind's header read,
    through the library door as the file ranked (``size``, ``mtime_ns``)."""
    return kind_of(path).info(path, expect=(size, mtime_ns))


def _pick_card(
    p: Pick, thumbs: Mapping[Thumb, str | None], info: Mapping[str, Any], max_distance: float
) -> str:
    width, height, taken = info.get("width"), info.get("height"), info.get("taken")
    details = [
        ("score", f"{p.score:.6f}"),
        ("dimensions", f"{width} × {height}" if width and height else "?"),
        ("taken", _taken(p, taken)),
        ("modified", iso_utc(p.mtime_ns).replace("T", " ")[:19] + " UTC"),
        ("size", _human_size(p.size)),
    ]
    span = span_times(p)
    if span is not None and p.members:  # the moment's time span: its first and last capture time
        first, last = (t.replace("T", " ") for t in span)
        same_day = first[:10] == last[:10]
        details.insert(
            3, ("moment", f"{1 + len(p.members)} photos, {first} to {last[11:] if same_day else last}")
        )
    if p.labels:
        details.insert(1, ("looks like", ", ".join(f"{x.label} {100 * x.p:.0f}%" for x in p.labels)))
    if p.also:  # a RAW + JPEG pair: the files that go with the one shown
        details.append(("also", ", ".join(Path(f).name for f in p.also)))
    if p.clip is not None:
        frames = ", ".join(clock(t) for t in p.clip.times)
        details.insert(
            1,
            (
                "clip",
                f"{clock(p.clip.duration)} long; shown at {clock(p.clip.moment_time)}, "
                f"the frame that makes it novel (frames read at {frames})",
            ),
        )
    dl = "".join(f"<dt>{escape(k)}</dt><dd>{_display(v)}</dd>" for k, v in details)
    if p.neighbour is not None:
        pct = 100.0 * float(p.distance or 0.0) / max_distance
        distance = "?" if p.distance is None else f"{p.distance:.4f}"
        # a moment's own frames are its members (the strip below): its neighbour is the nearest other photo
        where, closer = (
            ("nearest photo outside this moment", "no photo outside the moment is closer")
            if p.members
            else ("nearest photo in the library", "no other photo is closer")
        )
        nb = (
            f'<div class="nb"><div>{where}</div>'
            f"{_img_or_missing(thumbs.get((Path(p.neighbour), NEIGHBOUR_THUMB_SIZE, None)), 'neighbour')}"
            f'<div class="path">{_display(p.neighbour)}</div>'
            f"<div>distance {distance}: {closer} (bar: relative to the picks)"
            f'</div><div class="bar"><i style="width:{pct:.0f}%"></i></div></div>'
        )
    elif p.members:
        nb = '<div class="nb">every photo in the library is in this moment</div>'
    else:
        nb = '<div class="nb">the only photo in the library</div>'
    thumb = _img_or_missing(thumbs.get((Path(p.path), THUMB_SIZE, clip_moment(p))), f"#{p.rank}")
    if p.clip is not None:
        thumb += f'<div class="clipmark">▶ clip, moment at {clock(p.clip.moment_time)}</div>'
    return (
        f'<section class="pick" id="pick-{p.rank}"><div class="rank">{p.rank}</div>'
        f'<div class="thumb">{thumb}</div>'
        f'<div class="meta"><p class="path">{_display(p.path)}</p><dl>{dl}</dl></div>{nb}'
        f"{_member_strip(p, thumbs)}</section>"
    )


def _taken(p: Pick | Member, exif: str | None = None) -> str:
    """When the photo was taken and where that date came from (``novelfind.media.dates``); a pick made
    without the scan's dates (``picks_of`` without them) shows the EXIF date of its header."""
    if p.taken is not None:
        return f"{p.taken.replace('T', ' ')} ({SOURCE_WORDS.get(p.taken_source, p.taken_source)})"
    if p.taken_source == "none" and exif:
        return f"{exif.replace('T', ' ')} (EXIF)"
    return f"unknown ({SOURCE_WORDS.get(p.taken_source, p.taken_source)})"


def _member_strip(p: Pick, thumbs: Mapping[tuple[Path, int], str | None]) -> str:
    """The moment's other photos, nearest first, as a strip of small thumbnails (hover: path and
    distance); nothing for a photo alone."""
    if not p.members:
        return ""
    count = len(p.members)
    items = [
        f'<span title="{_display(m.path)} (distance {m.distance:.4f}; taken {_display(_taken(m))})">'
        f"{_img_or_missing(thumbs.get((Path(m.path), MEMBER_THUMB_SIZE, None)), 'member')}</span>"
        for m in p.members[:MEMBERS_SHOWN]
    ]
    more = f"<span>and {count - MEMBERS_SHOWN} more</span>" if count > MEMBERS_SHOWN else ""
    label = f"<span>a moment of {count + 1} photos; the others:</span>"
    return f'<div class="strip">{label}{"".join(items)}{more}</div>'


def _settings_used(run: Mapping[str, Any]) -> dict[str, Any]:
    """The run record less the settings its method does not use: the ADS solver's (``epochs``,
    ``partners``, ...) only for a method that runs the solver (``ranking.Method.solver``)."""
    from novelfind.ranking.adsconfig import ADS_LIMITS
    from novelfind.ranking.methods import METHODS

    method = METHODS.get(str(run.get("method")))
    if method is None or method.solver:  # an unknown method: show everything
        return dict(run)
    return {key: value for key, value in run.items() if key not in ADS_LIMITS}


def _run_section(run: Mapping[str, Any]) -> str:
    used = _settings_used(run)
    rows = "".join(f"<tr><td>{_display(k)}</td><td>{_display(v)}</td></tr>" for k, v in _flatten(used))
    return f'<h2>Run</h2>\n<table class="params">{rows or "<tr><td>no parameters recorded</td></tr>"}</table>'


def _failures_section(failures: Sequence[Failure]) -> str:
    heading = f"<h2>Files that could not be read ({len(failures)})</h2>"
    if not failures:
        return heading + '\n<p class="sub">none</p>'
    items = "".join(
        f'<li>{_display(f.path)} <span class="why">— {_display(f.reason)}</span></li>'
        for f in failures[:MAX_FAILURES_SHOWN]
    )
    more = len(failures) - MAX_FAILURES_SHOWN
    if more > 0:
        items += f"<li>… and {more} more</li>"
    return (
        f'{heading}\n<details class="failures"{" open" if len(failures) <= 50 else ""}>'
        f"<summary>{len(failures)} file{'s' if len(failures) != 1 else ''}</summary>"
        f"<ul>{items}</ul></details>"
    )


def _page(title: str, n_picks: int, body: str) -> str:
    """The page around ``body``: styles inline, and a content security policy that forbids the network."""
    script_hash = base64.b64encode(hashlib.sha256(_SCRIPT.encode()).digest()).decode()
    csp = f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{script_hash}'"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_display(title)}</title><style>{_CSS}</style></head>\n"
        f'<body data-picks="{n_picks}"><main>\n{body}\n</main>'
        f"<script>{_SCRIPT}</script></body></html>\n"
    )
