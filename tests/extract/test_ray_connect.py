"""The Ray engine's dealings with Ray that need no cluster: reading an address, the TCP probe's errors,
the environment set around Ray's connection and restored, Ray's log lines held off the terminal, and the
message of an error raised in a worker."""

from __future__ import annotations

import os
import socket

import pytest

from novelfind.errors import ClusterError, ExitCode
from novelfind.extract.engines import ray_connect as rc


@pytest.mark.parametrize(
    ("address", "target"),
    [
        ("10.0.0.5:6379", ("10.0.0.5", 6379)),
        ("ray://head.example:10001", ("head.example", 10001)),
        ("[::1]:6379", ("::1", 6379)),
        (":6379", ("127.0.0.1", 6379)),
        ("auto", None),
        ("head.example", None),
        ("head:port", None),
        ("ray://head", None),
    ],
)
def test_an_address_gives_the_host_and_port_to_probe(address, target):
    assert rc._host_port(address) == target


def test_an_address_without_a_port_is_no_cluster_address():
    with pytest.raises(ClusterError) as err:
        rc._probe("head.example", 1.0)
    assert str(err.value) == (
        "not a Ray cluster address: 'head.example' (use auto, HOST:PORT or ray://HOST:PORT)"
    )
    assert err.value.exit_code == ExitCode.ERROR


def test_a_port_where_nothing_listens_cannot_be_reached_and_one_that_listens_can():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        rc._probe(f"127.0.0.1:{port}", 5.0)
        rc._probe(f"ray://127.0.0.1:{port}", 5.0)
    with pytest.raises(ClusterError) as err:
        rc._probe(f"127.0.0.1:{port}", 5.0)  # closed now
    assert str(err.value) == f"cannot reach the Ray cluster at 127.0.0.1:{port}: Connection refused"


def test_the_connection_bound_is_set_for_the_block_and_a_users_value_kept(monkeypatch):
    name = "RAY_gcs_server_port_wait_time_s"
    monkeypatch.delenv(name, raising=False)
    with rc._bounded_ray_connect(rc.RAY_CONNECT_ATTEMPTS):
        assert os.environ[name] == str(rc.RAY_CONNECT_ATTEMPTS)
    assert name not in os.environ
    monkeypatch.setenv(name, "30")
    with rc._bounded_ray_connect(1):
        assert os.environ[name] == "30"
    assert os.environ[name] == "30"


def test_ray_settings_fill_only_what_the_user_left_unset_and_go_after(monkeypatch):
    first, second = rc.RAY_CONNECT_ENV
    monkeypatch.delenv(first, raising=False)
    monkeypatch.setenv(second, "9")
    with pytest.raises(RuntimeError), rc._ray_env(rc.RAY_CONNECT_ENV):
        assert os.environ[first] == rc.RAY_CONNECT_ENV[first] and os.environ[second] == "9"
        raise RuntimeError("ray.init failed")
    assert first not in os.environ and os.environ[second] == "9"


def test_held_output_loses_rays_log_lines_on_success_and_everything_on_failure(capfd):
    with rc._stderr_held():
        os.write(2, b"[2026-11-26 12:36:29,634 I 7099 7099] core_worker.cc:1: level read\n")
        os.write(2, b"kept line\n")
        os.write(2, b"[2026-11-26 12:36:29,634 E 7099 7099] an error line\n")
    assert capfd.readouterr().err == "kept line\n[2026-11-26 12:36:29,634 E 7099 7099] an error line\n"
    with pytest.raises(ClusterError), rc._stderr_held():
        os.write(2, b"[2026-11-26 12:36:29,634 W 1 1] rpc_client.h:153: Failed to connect\nother\n")
        raise ClusterError("cannot reach")
    assert capfd.readouterr().err == ""
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"  # descriptor 2 is the terminal's again


def test_a_workers_error_is_said_by_its_innermost_first_line():
    class Wrapped(Exception):
        def __init__(self, message: str, cause: BaseException):
            super().__init__(message)
            self.cause = cause

    inner = ValueError("model file damaged\nTraceback (most recent call last): ...")
    middle = RuntimeError("task failed")
    middle.__cause__ = inner
    assert rc._user_error(Wrapped("RayTaskError(RuntimeError)", middle)) == "model file damaged"
    assert rc._user_error(KeyError()) == "KeyError"
    assert rc._first_line(OSError("x" * 500)) == "x" * 300
    looped = RuntimeError("outer")
    looped.__cause__ = looped
    assert rc._user_error(looped) == "outer"


def test_a_lost_node_is_told_from_an_error_of_our_own():
    exceptions = pytest.importorskip("ray.exceptions")
    lost = exceptions.RaySystemError("node gone")
    wrapped = RuntimeError("batch failed")
    wrapped.__context__ = lost
    assert rc._is_system_failure(wrapped)
    assert not rc._is_system_failure(ValueError("bad pixels"))
