"""The contact sheet: one image of the picks in a grid, in rank order, each with its rank number (a clip
with its novel moment's time), from the thumbnails the report's decode processes make
(:mod:`novelfind.outputs.thumbnails`)."""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from novelfind.base.atomic import output_mode, write_atomic
from novelfind.errors import OutputError
from novelfind.outputs.thumbnails import clip_moment, clock, make_thumbnails
from novelfind.picks import Pick

# The one list of contact-sheet file types: suffix -> Pillow format.
CONTACT_SHEET_FORMATS = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG", ".webp": "WEBP"}


def write_contact_sheet(
    path: Path | str,
    picks: Sequence[Pick],
    *,
    columns: int | None = None,
    cell: int = 256,
    decode_timeout: float | None = None,
    on_skipped: Callable[[Path, str], None] | None = None,
    mode: int | None = None,
) -> None:
    """A grid image of the picks in rank order, each with its rank number (format from the suffix:
    .jpg, .png or .webp). Raises OutputError for another suffix or a file that cannot be written.
    ``decode_timeout`` and ``mode`` as for :func:`novelfind.outputs.report.write_html_report`. Each pick is
    opened through the library door as the file that was ranked (its size and modification time): one
    the door refuses (a link renamed over it since, a FIFO, another size or time) is shown as unreadable
    and goes to ``on_skipped(path, reason)``."""
    path = Path(path)
    fmt = CONTACT_SHEET_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise OutputError(f"cannot write contact sheet {path}: use a .jpg, .png or .webp name")
    if cell < 32:
        raise ValueError(f"cell must be at least 32 px, got {cell}")
    picks = sorted(picks, key=lambda p: p.rank)
    count = max(1, len(picks))
    cols = columns if columns is not None else math.ceil(math.sqrt(count))
    if cols < 1:
        raise ValueError(f"columns must be at least 1, got {cols}")
    cols = min(cols, count)
    rows = math.ceil(count / cols)
    gap = max(2, cell // 32)
    sheet = Image.new("RGB", (cols * cell + (cols + 1) * gap, rows * cell + (rows + 1) * gap), (32, 33, 36))
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default(size=max(12, cell // 9))
    small = ImageFont.load_default(size=max(10, cell // 16))
    inner = cell - 2 * gap

    ranked = {Path(p.path): (p.size, p.mtime_ns) for p in picks}
    made = make_thumbnails(
        [(Path(p.path), inner, clip_moment(p)) for p in picks], decode_timeout, expect=ranked
    )
    if on_skipped is not None:
        for refused, reason in made.refused.items():
            on_skipped(refused, f"{reason}; not shown in the contact sheet")
    thumbs = [made.thumbs[(Path(p.path), inner, clip_moment(p))] for p in picks]
    for k, (pick, thumb) in enumerate(zip(picks, thumbs, strict=True)):
        x0 = gap + (k % cols) * (cell + gap)
        y0 = gap + (k // cols) * (cell + gap)
        draw.rectangle((x0, y0, x0 + cell - 1, y0 + cell - 1), fill=(48, 49, 52))
        if thumb is None:
            draw.text(
                (x0 + cell / 2, y0 + cell / 2), "cannot read", fill=(200, 200, 200), font=small, anchor="mm"
            )
        else:
            sheet.paste(thumb, (x0 + (cell - thumb.width) // 2, y0 + (cell - thumb.height) // 2))
        label = str(pick.rank)
        left, top, right, bottom = draw.textbbox((0, 0), label, font=font)
        pad = max(3, cell // 40)
        box = (x0, y0, x0 + right - left + 2 * pad, y0 + bottom - top + 2 * pad)
        draw.rectangle(box, fill=(217, 48, 37))
        draw.text((x0 + pad - left, y0 + pad - top), label, fill=(255, 255, 255), font=font)
        if pick.clip is not None:  # a clip, shown at its novel moment: "▶ 0:16" in the bottom-left corner
            mark = f"\u25b6 {clock(pick.clip.moment_time)}"
            left, top, right, bottom = draw.textbbox((0, 0), mark, font=small)
            y1 = y0 + cell - 1
            draw.rectangle(
                (x0, y1 - (bottom - top) - 2 * pad, x0 + right - left + 2 * pad, y1), fill=(0, 0, 0)
            )
            draw.text((x0 + pad - left, y1 - pad - bottom), mark, fill=(255, 255, 255), font=small)

    buf = io.BytesIO()
    options = {"quality": 88} if fmt in ("JPEG", "WEBP") else {"optimize": True}
    sheet.save(buf, format=fmt, **options)
    write_atomic(path, buf.getvalue(), mode=output_mode() if mode is None else mode)
