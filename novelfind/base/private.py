"""Whether a folder is the running user's alone: nobody else can add, rename or replace a name in it.

A file that a program opens by name (SQLite opens its database and, beside it, the ``-journal``,
``-wal`` and ``-shm`` files by name, at moments of its own choosing) is only as safe as the folder
that holds the name: whoever can write that folder can put a FIFO there (an ``open`` that never
returns) or a hard link to a file of root's (written through), between any check and the open. Such
files are kept only in folders :func:`why_shared` finds private.

A folder is private when it and every folder above it (links resolved) belong to the running user or
to root, and none of them can be written by another user: not by everyone (``o+w``) and not by a group
with another member (``g+w``: a group whose only member is the user, as the "user private groups" of
Debian and Ubuntu give each user, is the user's own). A folder above may be writable by others when it
is sticky (``/tmp``): others can then add names there but not rename or remove ours. The folder itself
may not: in a sticky ``/tmp`` anyone can still create the ``-journal`` name SQLite is about to use.

The same rule as OpenSSH's ``StrictModes`` with Debian's allowance for user private groups. Written
here: no maintained library offers it.
"""

from __future__ import annotations

import functools
import os
import stat

from novelfind.base.safe_text import display

try:
    import grp
    import pwd
except ImportError:  # no POSIX users (Windows): nothing here applies
    grp = pwd = None  # type: ignore[assignment]


def why_shared(folder: str | os.PathLike[str], *, uid: int | None = None) -> str | None:
    """Why someone other than the user ``uid`` (default: the running one) and root can change the names
    in ``folder``, in a few words naming the folder at fault; None when nobody can (see the module). A
    folder that cannot be looked at is not private either."""
    if pwd is None or not hasattr(os, "geteuid"):
        return None
    uid = os.geteuid() if uid is None else uid
    path = os.path.realpath(folder)
    own = True  # the folder itself, then the folders above it
    while True:
        try:
            st = os.lstat(path)
        except OSError as err:
            return f"{display(path)} cannot be looked at ({err.strerror or err})"
        if st.st_uid not in (uid, 0):
            return f"{display(path)} belongs to another user (uid {st.st_uid})"
        writer = _other_writer(st, uid)
        if writer is not None and (own or not st.st_mode & stat.S_ISVTX):
            return f"{display(path)} can be written by {writer}"
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path, own = parent, False


def _other_writer(st: os.stat_result, uid: int) -> str | None:
    """Who besides ``uid`` and root may write the folder of ``st``: "everyone", "its group NAME", or None."""
    if st.st_mode & stat.S_IWOTH:
        return "everyone"
    if st.st_mode & stat.S_IWGRP and not _group_is_only(st.st_gid, uid):
        return f"its group {_group_name(st.st_gid)}"
    return None


@functools.lru_cache(maxsize=64)
def _group_is_only(gid: int, uid: int) -> bool:
    """Whether the group ``gid`` has members and all of them are ``uid`` or root: whose primary group it
    is, and who the group file lists. A group with no member is someone's (a setgid program's), not the
    user's."""
    try:
        listed = grp.getgrgid(gid).gr_mem
    except KeyError:
        return False
    members: set[int] = set()
    for name in listed:
        try:
            members.add(pwd.getpwnam(name).pw_uid)
        except KeyError:
            return False  # a member this system cannot name: not known to be the user
    members.update(entry.pw_uid for entry in pwd.getpwall() if entry.pw_gid == gid)
    return bool(members) and members <= {uid, 0}


def _group_name(gid: int) -> str:
    try:
        return display(grp.getgrgid(gid).gr_name)
    except KeyError:
        return str(gid)
