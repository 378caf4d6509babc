"""Picks made by hand for the outputs' tests: a pick of any path, the picks of real files, three small
photos to place."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from novelfind.picks import Pick

MTIME_NS = 1_700_000_000_123_456_789  # 2023-11-14T22:13:20.123456Z


def make_pick(path: Path | str, rank: int = 1, score: float = 0.5, **kw) -> Pick:
    fields = dict(size=1234, mtime_ns=MTIME_NS, neighbour=Path("/lib/near.jpg"), distance=1.25)
    fields.update(kw)
    return Pick(rank=rank, score=score, path=Path(path), **fields)


def picks_for(paths: list[Path]) -> list[Pick]:
    """The picks of ``paths``, best first, with the files' own size and time."""
    return [
        make_pick(p, rank=i + 1, score=1.0 - i / 10, size=p.stat().st_size, mtime_ns=p.stat().st_mtime_ns)
        for i, p in enumerate(paths)
    ]


def three_photos(folder: Path) -> list[Path]:
    """Three small photos in ``folder`` (made): two JPEGs and a PNG."""
    folder.mkdir(parents=True)
    paths = []
    for i, name in enumerate(["IMG_4411.jpg", "beach.png", "cat.jpg"]):
        path = folder / name
        Image.new("RGB", (32, 24), (60 * i, 100, 200)).save(path)
        paths.append(path)
    return paths
