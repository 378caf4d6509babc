"""``why_shared``: a folder is private when nobody but the user (and root) can change the names in it or
in a folder above it; a sticky folder above (``/tmp``) is fine, a sticky folder itself is not."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from novelfind.base import private
from novelfind.base.private import why_shared


@pytest.fixture
def mine(tmp_path):
    """A folder of the user's that nobody else can write (under pytest's 0700 folder)."""
    folder = tmp_path / "mine"
    folder.mkdir(mode=0o700)
    return folder


def test_a_folder_of_the_users_alone_is_private(mine):
    assert why_shared(mine) is None


def test_a_folder_everyone_can_write_is_named(mine):
    mine.chmod(0o777)
    assert why_shared(mine) == f"{mine} can be written by everyone"


def test_a_sticky_folder_is_not_private_itself_but_may_lie_above(mine):
    mine.chmod(0o1777)  # as /tmp: anyone may add a name here
    assert why_shared(mine) == f"{mine} can be written by everyone"
    inner = mine / "inner"
    inner.mkdir(mode=0o700)
    assert why_shared(inner) is None  # others cannot rename or remove what is ours in a sticky folder


def test_a_writable_folder_above_makes_every_folder_below_it_shared(mine):
    inner = mine / "a" / "b"
    inner.mkdir(parents=True)
    mine.chmod(0o777)  # not sticky: "a" can be renamed away and another folder put in its place
    assert why_shared(inner) == f"{mine} can be written by everyone"


def test_a_folder_of_another_user_is_named(mine):
    me = os.geteuid()
    if me == 0:  # root's folders are trusted by every user; a folder root gave to uid 1000 is not root's
        assert why_shared(mine, uid=1000) is None
        os.chown(mine, 1000, -1)
        assert why_shared(mine) == f"{mine} belongs to another user (uid 1000)"
    else:
        assert why_shared(mine, uid=me + 1) == f"{mine} belongs to another user (uid {me})"


def test_a_link_is_judged_by_the_folder_it_leads_to(mine, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(mine)
    assert why_shared(link) is None
    mine.chmod(0o777)
    assert why_shared(link) == f"{mine} can be written by everyone"


def test_a_missing_folder_is_not_private(tmp_path):
    assert why_shared(tmp_path / "nowhere").endswith("cannot be looked at (No such file or directory)")


def test_a_group_writable_folder_is_the_users_when_the_group_is_theirs_alone(mine, monkeypatch):
    """The "user private group" of Debian and Ubuntu (umask 002): its only member is the user."""
    me = os.geteuid()
    users = {"me": me, "ana": me + 1}
    groups = {
        500: SimpleNamespace(gr_name="mine", gr_mem=[]),  # the user's primary group, nobody else's
        501: SimpleNamespace(gr_name="family", gr_mem=["me", "ana"]),
        502: SimpleNamespace(gr_name="setgid", gr_mem=[]),  # nobody's: a program's
    }
    accounts = [SimpleNamespace(pw_name="me", pw_uid=me, pw_gid=500)]
    monkeypatch.setattr(private.grp, "getgrgid", lambda gid: groups[gid])
    monkeypatch.setattr(private.pwd, "getpwnam", lambda name: SimpleNamespace(pw_uid=users[name]))
    monkeypatch.setattr(private.pwd, "getpwall", lambda: accounts)
    private._group_is_only.cache_clear()
    try:
        assert private._group_is_only(500, me)
        assert not private._group_is_only(501, me)
        assert not private._group_is_only(502, me)
        shown = os.lstat(mine)
        for gid, private_to_me in ((500, True), (501, False), (502, False)):
            st = SimpleNamespace(st_mode=shown.st_mode | 0o020, st_gid=gid)
            writer = private._other_writer(st, me)  # type: ignore[arg-type]
            assert (writer is None) == private_to_me
            if not private_to_me:
                assert writer == f"its group {groups[gid].gr_name}"
    finally:
        private._group_is_only.cache_clear()
