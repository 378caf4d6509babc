"""XMP sidecars for the picks: a keyword photo managers show, the rank and score, undone only where ours.

digiKam, darktable, Lightroom, Immich and PhotoPrism read keywords from XMP sidecars, so a pick written
there shows up as a tag in the tool the user already browses with. The photo itself is never opened for
writing: everything goes into a sidecar next to it.

What a pick gets (``tag``):

* the keyword (default ``novel``) in ``dc:subject`` and ``lr:hierarchicalSubject``, and in
  ``digiKam:TagsList`` when the sidecar has one (digiKam then reads that list alone). A hierarchical
  keyword such as ``Picks|novel`` goes whole into ``lr:hierarchicalSubject`` (``Picks/novel`` in
  digiKam's list) and as its last level (``novel``) into ``dc:subject``, the way Lightroom and digiKam
  write tags;
* ``novelfind:Rank`` (1 = most novel) and ``novelfind:Score`` in the namespace ``NAMESPACE``;
* a record of what novelfind added: ``novelfind:AddedSubject``, ``novelfind:AddedHierarchicalSubject``
  and ``novelfind:AddedTagsList`` hold a keyword only when novelfind put it there (a keyword the user
  had already set is not recorded), and ``novelfind:CreatedSidecar`` says that the sidecar did not
  exist before (``True``) or was an empty file (``Empty``: taking everything back leaves it 0 bytes).

``untag`` takes back exactly what the record names: a keyword the user set by hand stays, even the same
word set before novelfind set it. A sidecar novelfind created and that holds nothing else afterwards is
deleted. A run's tags, this run's picks tagged and the earlier picks that are no longer picked untagged,
are :func:`novelfind.outputs.xmp_ledger.apply_picks`.

Which sidecar is a photo's (``NAME.EXT.xmp`` or a shared ``NAME.xmp``, as digiKam, darktable, Lightroom
and Capture One name them) is :mod:`novelfind.media.sidecars`; the capture dates read the same sidecars.

The namespace (``NAMESPACE``) is a URN made of a UUID, fixed for good: it identifies novelfind's
properties in users' sidecars forever, so it must not depend on a domain name that can lapse and change
hands. It never changes; a later version adds properties to it and never changes the meaning of one.

What stays a limit: the record says which keyword novelfind added, not when. A keyword the user removes
by hand is forgotten by the record at the next change of that sidecar, but one removed and added again
by hand between two runs looks like novelfind's and is taken back when the photo is no longer picked.
Keep a pick for good under another keyword (or a hierarchical one such as ``Keep|novel``).

Merging goes through libexiv2 (python-exiv2): the sidecar is parsed into XMP properties, ours are changed
and the packet is serialised again, so every other property (ratings, labels, face regions, custom
namespaces) is kept. python-exiv2 rather than pyexiv2: both bundle libexiv2 0.28 and merge a sidecar in
about 2 ms, but libexiv2 reports a packet its XMP toolkit rejects only through its log (and goes on with
no properties, which written back would empty the sidecar); python-exiv2 routes that log to Python's
``logging``, where it is caught here and nothing is printed, while pyexiv2 prints it to the C stderr.
A sidecar that is not well-formed XML or that the toolkit rejects is left as it is (``SidecarError``),
and so is a sidecar that is a symbolic link: anyone who can write into the library's folders could point
one at another file of the user's, which a write through it would turn into an XMP packet.
Writes are atomic (a temporary file in the same folder, then a rename) and keep the sidecar's read and
write bits (never setuid, setgid or sticky) and, where allowed, its owner; a new sidecar made by a root
cron job belongs to the photo's owner. Others may write to the library's folders, so each sidecar's
folder is opened once (below a scanned folder, each level without following a link) and everything in
it, reading, writing, setting the mode and the owner, renaming, deleting, goes through descriptors
(:mod:`novelfind.base.atomic`): a link swapped in at any moment is never written through or handed to
anyone.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from novelfind.base import atomic, extras, safe_load
from novelfind.base.safe_text import display
from novelfind.errors import NovelfindError
from novelfind.media.sidecars import sidecar_candidates, sidecar_name

NAMESPACE = "urn:uuid:fb8a7613-e7cd-446e-8914-62c572187b9e#"  # permanent: see the module doc
PREFIX = "novelfind"
DEFAULT_KEYWORD = "novel"

SUBJECT = "Xmp.dc.subject"
HIERARCHICAL = "Xmp.lr.hierarchicalSubject"
DIGIKAM_TAGS = "Xmp.digiKam.TagsList"
RANK = f"Xmp.{PREFIX}.Rank"
SCORE = f"Xmp.{PREFIX}.Score"
ADDED_SUBJECT = f"Xmp.{PREFIX}.AddedSubject"
ADDED_HIERARCHICAL = f"Xmp.{PREFIX}.AddedHierarchicalSubject"
ADDED_DIGIKAM = f"Xmp.{PREFIX}.AddedTagsList"
CREATED = f"Xmp.{PREFIX}.CreatedSidecar"
_OURS = (RANK, SCORE, ADDED_SUBJECT, ADDED_HIERARCHICAL, ADDED_DIGIKAM, CREATED)
_WAS_EMPTY = "Empty"  # CREATED's value for a sidecar that was an empty (0-byte) file
_SIDECAR_LIMIT = 64 << 20  # bytes: a sidecar with face regions and history is some kilobytes


@dataclass(frozen=True)
class _Keywords:
    """A keyword array novelfind writes to, the record of what it added there, and how it spells a level."""

    key: str
    record: str
    separator: str | None  # None: the last level only
    only_if_present: bool  # written only where the sidecar already has the array


# digiKam reads its own TagsList before any other keyword list when a sidecar has one (a sidecar it wrote
# itself), so the keyword goes there too in that case, with digiKam's "/" between levels.
_KEYWORD_ARRAYS = (
    _Keywords(SUBJECT, ADDED_SUBJECT, None, False),
    _Keywords(HIERARCHICAL, ADDED_HIERARCHICAL, "|", False),
    _Keywords(DIGIKAM_TAGS, ADDED_DIGIKAM, "/", True),
)

Action = Literal["created", "updated", "unchanged", "removed", "deleted"]


class SidecarError(Exception):
    """One sidecar could not be read or written; it was left as it was.

    ``str(err)`` is ``"PATH: reason"``, one line; ``path`` and ``reason`` are the parts.
    """

    def __init__(self, path: str | os.PathLike[str], reason: str):
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{display(self.path)}: {reason}")


@dataclass(frozen=True)
class SidecarChange:
    """What ``tag`` or ``untag`` did to ``photo``'s sidecar."""

    photo: Path
    sidecar: Path
    action: Action


# ---------------------------------------------------------------------------------------------- libexiv2

_lock = threading.RLock()  # libexiv2's XMP toolkit is not thread-safe; our log capture is per call
_registered = False


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage().strip())


@contextmanager
def _exiv2() -> Iterator[tuple[Any, _Collect]]:
    """libexiv2 under the lock, its warnings and errors collected instead of printed."""
    try:
        exiv2 = extras.load("exiv2")
    except Exception as e:  # noqa: BLE001 - ImportError, or a broken bundled library
        raise NovelfindError(f"XMP support is not installed (pip install 'novelfind[xmp]'): {e}") from None
    global _registered
    with _lock:
        # python-exiv2 passes libexiv2's messages to the "exiv2" logger; an application that silenced
        # either must not hide a damaged sidecar from us, so both are opened for the call.
        logger = logging.getLogger("exiv2")
        collect = _Collect()
        level, lib_level = logger.level, exiv2.LogMsg.level()
        logger.addHandler(collect)
        logger.setLevel(logging.WARNING)
        exiv2.LogMsg.setLevel(exiv2.LogMsg.Level.warn)
        try:
            if not _registered:
                exiv2.XmpProperties.registerNs(NAMESPACE, PREFIX)
                _registered = True
            yield exiv2, collect
        finally:
            exiv2.LogMsg.setLevel(lib_level)
            logger.setLevel(level)
            logger.removeHandler(collect)


def available() -> bool:
    """python-exiv2 imports."""
    return extras.available("exiv2")


_PACKET_HEADER = '<?xpacket begin="\ufeff" id="W5M0MpCehiHzreSzNTczkc9d"?>\n'
_PACKET_TRAILER = '<?xpacket end="w"?>\n'


class _Packet:
    """The XMP properties of one sidecar (or of a new one), edited in memory."""

    def __init__(self, exiv2: Any, collect: _Collect, path: Path, data: bytes | None):
        self._exiv2 = exiv2
        self.path = path
        if data is None or not data.strip():
            self.image = exiv2.ImageFactory.create(exiv2.ImageType.xmp)
        else:
            try:  # well-formed XML at all (libexiv2 only logs when not), and not nested past what its
                # XMP toolkit's recursive parser survives
                safe_load.check_xml(data, max_bytes=_SIDECAR_LIMIT)
            except safe_load.UnreadableError as e:
                raise SidecarError(path, f"cannot parse: {e}") from None
            try:
                self.image = exiv2.ImageFactory.open(data)
                if self.image.imageType() != exiv2.ImageType.xmp:
                    raise SidecarError(path, "not an XMP sidecar")
                self.image.readMetadata()
            except exiv2.Exiv2Error as e:
                raise SidecarError(path, f"cannot parse: {_exiv2_reason(e)}") from None
            if collect.messages:  # the toolkit logs a packet it cannot decode and carries on with none
                raise SidecarError(path, f"cannot parse: {collect.messages[0][:200]}")
        self.data = self.image.xmpData()

    def snapshot(self) -> list[tuple[str, str, str]]:
        return sorted((d.key(), d.typeName(), d.toString()) for d in self.data)

    def get(self, key: str) -> Any | None:
        it = self.data.findKey(self._exiv2.XmpKey(key))
        return None if it == self.data.end() else it

    def text(self, key: str) -> str | None:
        it = self.get(key)
        return None if it is None else it.toString()

    def items(self, key: str) -> list[str]:
        """An array's items; a plain text value (as some tools write a single keyword) is one item."""
        it = self.get(key)
        if it is None:
            return []
        value = it.getValue()
        if isinstance(value, self._exiv2.XmpArrayValue):
            return [value.toString(i) for i in range(value.count())]
        text = it.toString()
        return [text] if text else []

    def set_items(self, key: str, items: Sequence[str]) -> None:
        """Replace ``key`` by an array of ``items`` (of the array type it had, else a bag); none: erase."""
        it = self.get(key)
        kind = self._exiv2.TypeId.xmpBag
        if it is not None:
            old = it.getValue()
            if isinstance(old, self._exiv2.XmpArrayValue):
                kind = old.typeId()
            self.data.erase(it)
        if items:
            value = self._exiv2.XmpArrayValue(kind)
            for item in items:
                value.read(item)
            self.data[key] = value

    def set_text(self, key: str, text: str) -> None:
        self.data[key] = text

    def erase(self, key: str) -> None:
        it = self.get(key)
        if it is not None:
            self.data.erase(it)

    def serialise(self) -> bytes:
        """The XMP packet, laid out as libexiv2's sidecar writer lays it out.

        Not through ``Image.writeMetadata``: libexiv2's sidecar image copies dc:subject and other fields
        into IPTC and Exif when it reads a sidecar and back into XMP when it writes one, which would put
        back a keyword just taken out and could add fields the sidecar never had.
        """
        flags = self._exiv2.XmpParser.XmpFormatFlags
        try:
            rc, packet = self._exiv2.XmpParser.encode(
                self.data, flags.omitPacketWrapper | flags.useCompactFormat
            )
        except self._exiv2.Exiv2Error as e:
            raise SidecarError(self.path, f"cannot serialise: {_exiv2_reason(e)}") from None
        if rc != 0:
            raise SidecarError(self.path, f"cannot serialise: XMP toolkit error {rc}")
        return (_PACKET_HEADER + packet + _PACKET_TRAILER).encode("utf-8")


def _exiv2_reason(err: BaseException) -> str:
    args = getattr(err, "args", ())
    text = str(args[-1]) if args else str(err)
    return (text.strip().splitlines() or [type(err).__name__])[0][:200]


# ---------------------------------------------------------------------------------------------- files


def is_under(path: str, roots: Sequence[str]) -> bool:
    """Whether ``path`` (absolute) is one of ``roots`` or lies below one."""
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


@contextmanager
def _folder(folder: Path, root: str | None, shown: Path) -> Iterator[int]:
    """The folder of a sidecar, opened once; every call on the sidecar is relative to it.

    Under a scanned folder ``root``, each folder below it is opened with ``O_NOFOLLOW``
    (:func:`novelfind.base.atomic.open_below`): a folder of the library swapped for a link during the scan
    is refused, never entered. Raises SidecarError (``shown``: the sidecar named in it).
    """
    try:
        if root is not None and is_under(str(folder), [root]):
            fd = atomic.open_below(root, folder)
        else:
            fd = atomic.open_folder(folder, follow_link=True)
    except (OSError, ValueError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise SidecarError(shown, f"cannot open its folder: {reason}") from None
    try:
        yield fd
    finally:
        os.close(fd)


def _read(dir_fd: int, name: str, sidecar: Path) -> tuple[bytes | None, os.stat_result | None]:
    """The sidecar's bytes and its ``fstat`` (None, None when there is none). Raises SidecarError."""
    try:
        st = atomic.lstat_at(dir_fd, name)
    except OSError as e:
        raise SidecarError(sidecar, f"cannot read: {e.strerror or e}") from None
    if st is None:
        return None, None
    if stat.S_ISLNK(st.st_mode):
        raise SidecarError(sidecar, atomic.LINK_REFUSED)
    if not stat.S_ISREG(st.st_mode):
        raise SidecarError(sidecar, "not a regular file")
    try:
        fd, st = atomic.open_regular(name, dir_fd=dir_fd)
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(_SIDECAR_LIMIT + 1)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise SidecarError(sidecar, atomic.LINK_REFUSED) from None
        raise SidecarError(sidecar, f"cannot read: {e.strerror or e}") from None
    if len(data) > _SIDECAR_LIMIT:
        raise SidecarError(sidecar, f"cannot read: larger than {_SIDECAR_LIMIT} bytes")
    return data, st


def _write(
    dir_fd: int, name: str, data: bytes, photo: str | None, old: os.stat_result | None, sidecar: Path
) -> None:
    """Replace (or create) the sidecar ``name`` atomically, through the folder's descriptor.
    Raises SidecarError.

    Its mode is the old sidecar's read and write bits (0o666 at most: never setuid, setgid or sticky),
    or for a new sidecar the usual mode of a new file (0o666 less the umask). It keeps its owner; a new
    one made by root is given to the owner and group of ``photo`` (its name in the same folder), so a
    root cron job does not leave files the user cannot edit. Mode and owner are set on the new file's
    descriptor, never by name (:func:`novelfind.base.atomic.replacing_at`).
    """
    if old is not None:
        try:
            writable = os.access(name, os.W_OK, dir_fd=dir_fd, follow_symlinks=False)
        except (OSError, NotImplementedError):
            writable = True  # the write itself says no
        if not writable:
            raise SidecarError(sidecar, "cannot write: the sidecar is read-only")
    owner = (old.st_uid, old.st_gid) if old is not None else None
    if old is None and photo is not None:
        try:
            st = atomic.lstat_at(dir_fd, photo)
            owner = (st.st_uid, st.st_gid) if st is not None else None
        except OSError:
            pass
    if owner is not None and not (os.geteuid() == 0 or owner[0] == os.geteuid()):
        owner = None
    mode = old.st_mode & 0o666 if old is not None else atomic.new_file_mode(0o666)
    try:
        atomic.write_bytes_at(dir_fd, name, data, mode=mode, owner=owner, shown=sidecar)
    except OSError as e:
        raise SidecarError(sidecar, f"cannot write: {e.strerror or e}") from None


def _delete(dir_fd: int, name: str, sidecar: Path) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise SidecarError(sidecar, f"cannot delete: {e.strerror or e}") from None


# ---------------------------------------------------------------------------------------------- edits


def _paths(photo: str | os.PathLike[str], sidecar: str | os.PathLike[str] | None) -> tuple[Path, Path]:
    """(photo, the folder of its sidecar); ValueError when the photo is a sidecar or the sidecar is not
    one."""
    photo = Path(photo)
    if photo.suffix.lower() == ".xmp":
        raise ValueError(f"expected a photo, got a sidecar: {photo}")
    if sidecar is None:
        return photo, photo.parent
    path = Path(sidecar)
    if path.suffix.lower() != ".xmp" or os.path.abspath(path) == os.path.abspath(photo):
        raise ValueError(f"a sidecar's name ends in .xmp, got {path}")
    return photo, path.parent


def _sidecar_in(
    dir_fd: int, folder: Path, photo: Path, sidecar: str | os.PathLike[str] | None, twins
) -> tuple[str, Path]:
    """(name in the folder, path) of the sidecar to use."""
    name = Path(sidecar).name if sidecar is not None else sidecar_name(dir_fd, photo, twins)
    return name, folder / name


def _levels(keyword: str) -> list[str]:
    """The levels of ``keyword`` (``Picks|novel`` -> Picks, novel). Raises ValueError."""
    if not isinstance(keyword, str) or not keyword.strip():
        raise ValueError(f"the keyword must be a non-empty text, got {keyword!r}")
    levels = [level.strip() for level in keyword.split("|")]
    if any(not level for level in levels):
        raise ValueError(f"empty level in the hierarchical keyword {keyword!r}")
    return levels


def check_keyword(keyword: str) -> None:
    """ValueError unless ``keyword`` is a keyword ``tag`` can write (non-empty text, no empty level)."""
    _levels(keyword)


def _spell(levels: list[str], separator: str | None) -> str:
    return levels[-1] if separator is None else separator.join(levels)


def _take_back(packet: _Packet, key: str, record: str, keep: str | None) -> None:
    """Remove from ``key`` the items ``record`` says novelfind added, except ``keep``; update the record."""
    added = packet.items(record)
    if not added:
        return
    items = packet.items(key)
    for word in added:
        if word != keep and word in items:
            items.remove(word)
    if items != packet.items(key):
        packet.set_items(key, items)
    packet.set_items(record, [w for w in added if w == keep])


def _put(packet: _Packet, key: str, record: str, word: str) -> None:
    """Add ``word`` to ``key`` unless present; record it only when novelfind added it (now or earlier)."""
    items = packet.items(key)
    recorded = word in packet.items(record)
    if word in items:
        return  # the user's, or ours from an earlier run (then already recorded)
    packet.set_items(key, [*items, word])
    if not recorded:
        packet.set_items(record, [*packet.items(record), word])


def tag(
    photo: str | os.PathLike[str],
    *,
    rank: int,
    score: float,
    keyword: str = DEFAULT_KEYWORD,
    sidecar: str | os.PathLike[str] | None = None,
    twins: Iterable[str | os.PathLike[str]] = (),
    root: str | os.PathLike[str] | None = None,
) -> SidecarChange:
    """Mark ``photo`` as a pick in its sidecar (see the module doc). Idempotent.

    ``sidecar`` names the sidecar to write; by default ``sidecar_for(photo, twins)``
    (:mod:`novelfind.media.sidecars`), ``twins`` being the photo's other files (a RAW + JPEG pair).
    ``root``: the scanned folder the photo was found in; the folders below it are opened without
    following links (:func:`_folder`).

    A keyword a previous run added and that differs from ``keyword`` is taken back. Nothing is written
    when the sidecar already says all this ("unchanged"). Raises SidecarError (the sidecar is left as
    it was) and ValueError for an empty keyword or a photo named ``*.xmp``.
    """
    levels = _levels(keyword)
    photo, folder = _paths(photo, sidecar)
    shown = sidecar_candidates(photo)[0] if sidecar is None else Path(sidecar)
    with _folder(folder, _root(root), shown) as fd:
        name, path = _sidecar_in(fd, folder, photo, sidecar, twins)
        data, old = _read(fd, name, path)
        out = _tagged(path, data, levels, rank, score)
        if out is None:
            return SidecarChange(photo, path, "unchanged")
        _write(fd, name, out, photo.name if photo.parent == folder else None, old, path)
    return SidecarChange(photo, path, "created" if data is None else "updated")


def _root(root: str | os.PathLike[str] | None) -> str | None:
    return None if root is None else os.path.abspath(os.fspath(root))


def _tagged(path: Path, data: bytes | None, levels: list[str], rank: int, score: float) -> bytes | None:
    """The sidecar ``data`` with the pick's keyword, rank and score; None when it says all that already."""
    with _exiv2() as (exiv2, collect):
        packet = _Packet(exiv2, collect, path, data)
        before = packet.snapshot()
        for array in _KEYWORD_ARRAYS:
            word = _spell(levels, array.separator)
            _take_back(packet, array.key, array.record, word)
            if not array.only_if_present or packet.get(array.key) is not None:
                _put(packet, array.key, array.record, word)
        packet.set_text(RANK, str(int(rank)))
        packet.set_text(SCORE, f"{float(score):.6g}")
        if not data:
            packet.set_text(CREATED, "True" if data is None else _WAS_EMPTY)
        if packet.snapshot() == before:
            return None
        return packet.serialise()


def untag(
    photo: str | os.PathLike[str],
    *,
    sidecar: str | os.PathLike[str] | None = None,
    root: str | os.PathLike[str] | None = None,
) -> SidecarChange:
    """Take back what ``tag`` wrote into ``photo``'s sidecar, and nothing else.

    "removed" when something was taken out, "deleted" when the sidecar was novelfind's own and is now
    empty, "unchanged" when it held nothing of novelfind's (or there is no sidecar). ``root``: as for
    :func:`tag`. Raises SidecarError.
    """
    photo, folder = _paths(photo, sidecar)
    shown = sidecar_candidates(photo)[0] if sidecar is None else Path(sidecar)
    with _folder(folder, _root(root), shown) as fd:
        name, path = _sidecar_in(fd, folder, photo, sidecar, ())
        data, old = _read(fd, name, path)
        if data is None:
            return SidecarChange(photo, path, "unchanged")
        action, out = _untagged(path, data)
        if action == "deleted":
            _delete(fd, name, path)
        elif action == "removed":
            _write(fd, name, out, photo.name if photo.parent == folder else None, old, path)
    return SidecarChange(photo, path, action)


def _untagged(path: Path, data: bytes) -> tuple[Action, bytes]:
    """What taking back novelfind's tags from ``data`` does, and the bytes to write then."""
    with _exiv2() as (exiv2, collect):
        packet = _Packet(exiv2, collect, path, data)
        before = packet.snapshot()
        created = packet.text(CREATED)
        for array in _KEYWORD_ARRAYS:
            _take_back(packet, array.key, array.record, None)
        for key in _OURS:
            packet.erase(key)
        if packet.snapshot() == before:
            return "unchanged", b""
        empty = packet.data.count() == 0
        if empty and created == _WAS_EMPTY:
            return "removed", b""  # the empty file it was, to the byte
        if created == "True" and empty:
            return "deleted", b""
        return "removed", packet.serialise()
