"""The library door: no link followed below a scanned folder, no FIFO waited on, a bound on what is read,
and the file checked to be the one the walk listed."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from novelfind.base import door


@pytest.fixture
def library(tmp_path):
    lib = tmp_path / "lib"
    (lib / "a").mkdir(parents=True)
    (lib / "a" / "photo.jpg").write_bytes(b"library bytes")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "secret.jpg").write_bytes(b"private bytes")
    return lib, private


def _in_thread(fn, timeout=10.0):
    """``fn()`` in a thread; what it returned or raised, or TimeoutError when it blocked."""
    out: dict = {}

    def go():
        try:
            out["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - handed back to the test
            out["error"] = err

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise TimeoutError("the read blocked")
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_reads_a_library_file(library):
    lib, _ = library
    with door.scanning([lib]):
        assert door.read(lib / "a" / "photo.jpg", 1000) == b"library bytes"


def test_a_link_renamed_over_a_photo_is_refused(library):
    lib, private = library
    photo = lib / "a" / "photo.jpg"
    photo.unlink()
    photo.symlink_to(private / "secret.jpg")
    with door.scanning([lib]), pytest.raises(OSError) as err:
        door.read(photo, 1000)
    assert err.value.errno == errno.ELOOP
    # also outside any scanned folder: the file named is not followed when it is a link
    with pytest.raises(OSError) as err:
        door.read(photo, 1000)
    assert err.value.errno == errno.ELOOP


def test_a_folder_swapped_for_a_link_is_refused_below_a_scanned_folder(library):
    lib, private = library
    (private / "photo.jpg").write_bytes(b"private bytes")
    os.rename(lib / "a", lib / "a-moved")
    (lib / "a").symlink_to(private)
    with door.scanning([lib]), pytest.raises(OSError) as err:
        door.read(lib / "a" / "photo.jpg", 1000)
    assert err.value.errno == errno.ELOOP


def test_links_are_followed_when_the_user_asked(library):
    lib, private = library
    photo = lib / "a" / "photo.jpg"
    photo.unlink()
    photo.symlink_to(private / "secret.jpg")
    with door.scanning([lib], follow_links=True):
        assert door.read(photo, 1000) == b"private bytes"


def test_a_scanned_folder_that_is_itself_a_link_is_entered(library, tmp_path):
    lib, _ = library
    alias = tmp_path / "alias"
    alias.symlink_to(lib)
    with door.scanning([alias]):
        assert door.read(alias / "a" / "photo.jpg", 1000) == b"library bytes"


def test_a_fifo_never_blocks(library):
    lib, _ = library
    fifo = lib / "a" / "clip.mov"
    os.mkfifo(fifo)
    with door.scanning([lib]), pytest.raises(OSError) as err:
        _in_thread(lambda: door.read(fifo, 1000))
    assert err.value.errno == errno.EINVAL
    with pytest.raises(OSError):
        _in_thread(lambda: door.read_head(fifo, 10))


def test_a_device_is_refused_and_a_file_over_the_bound_is_not_read(library):
    lib, _ = library
    with pytest.raises(OSError) as err:
        door.read("/dev/zero", 1 << 20)
    assert err.value.errno == errno.EINVAL
    with pytest.raises(OSError) as err:
        door.read(lib / "a" / "photo.jpg", 5)
    assert err.value.errno == errno.EFBIG
    assert door.read_head(lib / "a" / "photo.jpg", 7) == b"library"


def test_a_file_changed_since_the_walk_is_refused(library):
    lib, _ = library
    photo = lib / "a" / "photo.jpg"
    st = photo.stat()
    assert door.read(photo, 100, expect=(st.st_size, st.st_mtime_ns)) == b"library bytes"
    photo.write_bytes(b"other, longer bytes")
    with pytest.raises(door.Changed):
        door.read(photo, 100, expect=(st.st_size, st.st_mtime_ns))


def test_recording_says_which_file_a_read_went_to(library):
    lib, _ = library
    photo = lib / "a" / "photo.jpg"
    st = photo.stat()
    with door.recording() as seen:
        door.read(photo, 100)
    assert seen == [(st.st_size, st.st_mtime_ns)]
    door.read(photo, 100)  # outside the block: nothing more recorded
    assert len(seen) == 1


def test_the_policy_is_restored_after_a_scan(library):
    lib, _ = library
    before = door.policy()
    with door.scanning([lib], follow_links=True) as inside:
        assert door.policy() == inside and inside.roots == (str(lib),)
    assert door.policy() == before


def test_the_opened_file_object_reads_from_the_descriptor(library):
    lib, _ = library
    with door.opened(lib / "a" / "photo.jpg") as handle:
        assert handle.read(7) == b"library"
        handle.seek(0)
        assert handle.read() == b"library bytes"


def test_refused_tells_the_doors_refusals_from_a_file_that_cannot_be_read(library):
    """A link, a FIFO and a changed file are refusals (what is there is not the file listed: the outputs
    name it); a missing file is not."""
    lib, private = library
    photo = lib / "a" / "photo.jpg"
    st = photo.stat()
    fifo = lib / "a" / "fifo.jpg"
    os.mkfifo(fifo)
    link = lib / "a" / "link.jpg"
    link.symlink_to(private / "secret.jpg")
    errors = []
    with door.scanning([lib]):
        for path, expect in ((link, None), (fifo, None), (photo, (st.st_size + 1, st.st_mtime_ns))):
            with pytest.raises(OSError) as err:
                door.read(path, 100, expect=expect)
            errors.append(err.value)
        with pytest.raises(OSError) as gone:
            door.read(lib / "a" / "gone.jpg", 100)
    assert [e.errno for e in errors] == [errno.ELOOP, errno.EINVAL, errno.ESTALE]
    assert all(door.refused(e) for e in errors)
    assert not door.refused(gone.value)
