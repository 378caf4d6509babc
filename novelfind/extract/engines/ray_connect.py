"""The Ray engine's dealings with Ray itself (``novelfind.extract.engines.ray``): reaching a cluster in
bounded time, keeping Ray's own output off the user's terminal, and telling a lost node from an error in
novelfind's code.

A cluster that cannot be reached is a ``ClusterError`` within bounded time: a TCP probe of HOST:PORT
(``CONNECT_TIMEOUT_S``), then Ray's own connection with its retries bounded (``RAY_CONNECT_ATTEMPTS``,
``RAY_CONNECT_ENV``), never a hang. What Ray logs from C++ while it connects is held and dropped when the
connection fails (the error says it in one line), its informational lines dropped when it succeeds; Ray
Data runs without progress bars or log lines (the library prints nothing).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import sys
import tempfile
from collections.abc import Iterator

from novelfind.errors import ClusterError

CONNECT_TIMEOUT_S = 10.0  # TCP probe of HOST:PORT before Ray is asked to connect
# Ray's own connection attempts. Without a bound, ray.init() retries an address where something listens
# that is not a Ray head for ever (measured: it had not returned after 200 s). One attempt waits for
# the GCS up to the timeouts below (Ray reads them when it is imported, so they apply only when novelfind
# imports Ray first and the user has not set them): measured 8 s per attempt with them, 41 s without
# (scripts/bench_ray_connect.py, docs/bench/ray-connect.json). One attempt: a head that is up answers
# the first one, and a second only doubled the wait for an address that is wrong.
RAY_CONNECT_ATTEMPTS = 1
RAY_CONNECT_ENV = {"RAY_gcs_rpc_server_connect_timeout_s": "2", "RAY_py_gcs_connect_timeout_s": "3"}
# The driver's core worker logs from C++ to this process's stderr. Below FATAL it says, on every successful
# scan, that Ray Data's actors have "constructor arguments in the object store" (an ERROR line about Ray
# Data's own arguments, ray-project/ray#53727, nothing novelfind passes or can change). novelfind reports
# every failure of the cluster itself, so the driver logs only fatal errors, unless the user set a level.
RAY_LOG_LEVEL_ENV = {"RAY_BACKEND_LOG_LEVEL": "fatal"}


def _host_port(address: str) -> tuple[str, int] | None:
    """("host", port) of HOST:PORT or ray://HOST:PORT; None when there is no port to probe."""
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def _probe(address: str, timeout: float) -> None:
    """ClusterError unless something accepts TCP connections at the address's host and port."""
    target = _host_port(address)
    if target is None:
        raise ClusterError(f"not a Ray cluster address: {address!r} (use auto, HOST:PORT or ray://HOST:PORT)")
    try:
        with socket.create_connection(target, timeout=timeout):
            pass
    except OSError as err:
        reason = "timed out" if isinstance(err, socket.timeout) else (err.strerror or str(err))
        raise ClusterError(f"cannot reach the Ray cluster at {address}: {reason}") from None


@contextlib.contextmanager
def _bounded_ray_connect(attempts: int):
    """Bound Ray's connection retries (an environment setting Ray reads in ray.init), then restore it."""
    name = "RAY_gcs_server_port_wait_time_s"
    old = os.environ.get(name)
    if old is None:
        os.environ[name] = str(attempts)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)


@contextlib.contextmanager
def _ray_env(settings: dict[str, str]) -> Iterator[None]:
    """Set the variables of ``settings`` the user has not set, for what Ray starts inside; then unset them."""
    added = [name for name in settings if name not in os.environ]
    os.environ.update({name: settings[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


# A line of Ray's C++ log at level I or W: "[2026-11-26 12:36:29,634 W 7099 7099] rpc_client.h:153: ..."
_RAY_LOG_LINE = re.compile(rb"\[\d{4}-\d\d-\d\d [\d:,.]+ [IW] \d+ \d+\] ")


@contextlib.contextmanager
def _stderr_held() -> Iterator[None]:
    """Hold what is written to file descriptor 2 meanwhile; if the block succeeds, write it out without Ray's
    informational and warning log lines, and if it fails, drop it.

    Ray's connection code logs each failed try from C++ (``[... W ...] rpc_client.h:153: Failed to connect
    to GCS ...``, six lines for one wrong address) before ray.init raises; the ClusterError says it in one
    line. A successful ray.init logs that it read ``RAY_BACKEND_LOG_LEVEL`` (an ``I`` line).
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no descriptor 2 (started with stderr closed)
        yield
        return
    held = tempfile.TemporaryFile()
    ok = False
    try:
        os.dup2(held.fileno(), 2)
        yield
        ok = True
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        if ok:
            held.seek(0)
            data = b"".join(line for line in held.readlines() if not _RAY_LOG_LINE.match(line))
            if data:
                os.write(2, data)
        held.close()


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return (text.splitlines()[0] if text else type(err).__name__)[:300]


@contextlib.contextmanager
def _quiet_data_context(ctx):
    """Ray Data without progress bars or log lines on the driver's terminal (the library prints nothing)."""
    settings = {
        "enable_progress_bars": False,
        "print_on_execution_start": False,
        "enable_auto_log_stats": False,
        # a node lost while its actor starts is not a broken UDF: replace the actor a few times
        "max_consecutive_actor_init_deaths": 3,
    }
    saved = {name: getattr(ctx, name) for name in settings if hasattr(ctx, name)}
    for name in saved:
        setattr(ctx, name, settings[name])
    data_log = logging.getLogger("ray.data")
    level = data_log.level
    data_log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(ctx, name, value)
        data_log.setLevel(level)


def _is_system_failure(err: BaseException) -> bool:
    """A lost node, actor, worker or object (retry elsewhere), as opposed to an error in our own code."""
    import ray.exceptions as rex

    system = tuple(
        getattr(rex, name)
        for name in (
            "RayActorError",
            "ActorDiedError",
            "ActorUnavailableError",
            "ObjectLostError",
            "OwnerDiedError",
            "NodeDiedError",
            "WorkerCrashedError",
            "RaySystemError",
            "ObjectFetchTimedOutError",
        )
        if hasattr(rex, name)
    )
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, system):
            return True
        err = err.__cause__ or err.__context__
    return False


def _user_error(err: BaseException) -> str:
    """The innermost message of an error raised in a worker (Ray wraps it in layers of its own)."""
    seen: set[int] = set()
    inner = err
    while id(inner) not in seen:
        seen.add(id(inner))
        nxt = inner.__cause__ or getattr(inner, "cause", None)
        if not isinstance(nxt, BaseException):
            break
        inner = nxt
    return _first_line(inner)
