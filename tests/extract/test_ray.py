"""The Ray engine on a real multi-node cluster on this machine: a head (no CPU) and two 1-CPU worker nodes.

The cluster is started once for the module (about 20-40 s on two cores); each test connects a driver to
it and disconnects. The engine is tested on its own (``RayEngine``) and through the public ``scan()`` and
the command line, against the local engine on the same files. The node-removal tests run last: the one
through ``scan()`` puts a fresh node back, the last one leaves one worker node.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from common import make_photo, missing_prerequisite

import novelfind
from novelfind.base.atomic import encode_output
from novelfind.errors import ClusterError, ExitCode

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MB = 1 << 20
# Ray's floor for a node's object store is 75 MB; the model bytes (14 MB) and the result blocks fit.
OBJECT_STORE = 80 * MB


def _ray():
    try:
        import ray
        import ray.data  # noqa: F401
        from ray.cluster_utils import Cluster
    except ImportError:
        missing_prerequisite("Ray is not installed (pip install 'novelfind[ray]')")
    return ray, Cluster


@pytest.fixture(scope="module")
def cluster():
    """Head without CPUs (the driver's node, as on a real cluster) + two worker nodes of one CPU each."""
    ray, Cluster = _ray()
    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "object_store_memory": OBJECT_STORE, "include_dashboard": False},
    )
    try:
        c.workers = [c.add_node(num_cpus=1, object_store_memory=OBJECT_STORE) for _ in range(2)]
        c.wait_for_nodes()
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> list[str]:
    """80 small photos in two folders, plus files each engine must refuse the same way."""
    root = tmp_path_factory.mktemp("ray-photos")
    paths = [
        make_photo(root / f"d{i % 2}" / f"IMG_{i:04d}.jpg", (30 + 2 * i, 60 + i % 7, 200 - i), seed=i)
        for i in range(80)
    ]
    (root / "not_an_image.jpg").write_bytes(b"this is text, not a JPEG")
    (root / "empty.png").write_bytes(b"")
    good = paths[0].read_bytes()
    (root / "truncated.jpg").write_bytes(good[: len(good) // 3])
    odd = root / "ünïcode name \udcff.jpg" if os.name == "posix" else root / "odd.jpg"
    make_photo(odd, (220, 30, 30), seed=999)
    listed = [str(p) for p in paths] + [
        str(root / "not_an_image.jpg"),
        str(root / "empty.png"),
        str(root / "truncated.jpg"),
        str(odd),
        str(root / "deleted after the walk.jpg"),
    ]
    return listed


@pytest.fixture(scope="module")
def local_results(photos, model_cache):
    """What the local engine makes of each file: (digest, stored vector: the pooled one) or (None, reason)."""
    from novelfind.extract.stage import decode_file
    from novelfind.model.features import build_extractor

    extractor = build_extractor(backend="onnx", device="cpu", cache_dir=model_cache)
    out = []
    for path in photos:
        decoded = decode_file(path, frozenset())
        if decoded.digest is None:
            out.append((None, decoded.reason))
        else:
            out.append((decoded.digest, extractor.encode(decoded.pixels[None])[0]))
    return out


def _collect(batches) -> dict[int, tuple]:
    got: dict[int, tuple] = {}
    for batch in batches:
        for pos, digest, vector, reason in batch.items():
            assert pos not in got, f"position {pos} yielded twice"
            got[pos] = (digest, vector, reason)
    return got


def _assert_same_as_local(got: dict[int, tuple], local: list[tuple], known: set[str] = frozenset()) -> None:
    assert sorted(got) == list(range(len(local)))
    worst = 0.0
    for pos, (want_digest, want) in enumerate(local):
        digest, vector, reason = got[pos]
        if want_digest is None:
            assert (digest, vector, reason) == (None, None, want), pos
            continue
        assert digest == want_digest and reason is None
        if digest in known:
            assert vector is None  # hashed, not decoded: the driver has its vector
            continue
        worst = max(worst, float(np.abs(vector - want).max()))
    assert worst < 1e-3


def test_vectors_and_failures_match_the_local_engine(cluster, photos, local_results, model_cache):
    from novelfind.extract.engines.ray import RayEngine

    known = {local_results[3][0], local_results[40][0]}  # e.g. two files moved since they were cached
    with RayEngine(cluster.address, batch_size=8, model_cache_dir=model_cache) as engine:
        assert engine.resources() == {"CPU": 2.0, "GPU": 0.0, "nodes": 3}
        got = _collect(engine.run(photos, known=known))
    _assert_same_as_local(got, local_results, known)
    reasons = [got[i][2] for i in range(len(photos)) if got[i][2] is not None]
    assert reasons == [
        "not a recognised image format",
        "empty file",
        reasons[2],  # Pillow's wording for a truncated JPEG; equality with the local engine is checked above
        "No such file or directory",
    ]


# --------------------------------------------------------------------------- through scan() and the CLI


@pytest.fixture(scope="module")
def library(photos) -> Path:
    """The folder of the ``photos`` fixture: 81 photos and three files that cannot be read."""
    return Path(photos[0]).parents[1]


@pytest.fixture(scope="module")
def local_scan(library, tmp_path_factory):
    """The local engine's scan of the library: what the Ray engine must reproduce."""
    cache = tmp_path_factory.mktemp("local-cache") / "features.sqlite"
    return novelfind.scan(library, 10, cache=cache, device="cpu")


def _same_scan(got, want) -> None:
    assert [p.path for p in got.picks] == [p.path for p in want.picks]
    assert [p.neighbour for p in got.picks] == [p.neighbour for p in want.picks]
    assert [(f.path, f.reason) for f in got.failures] == [(f.path, f.reason) for f in want.failures]
    assert [f.path for f in got.files] == [f.path for f in want.files]
    assert float(np.abs(got.features - want.features).max()) < 1e-3


def test_scan_with_the_ray_engine_ranks_as_the_local_engine(cluster, library, local_scan, tmp_path):
    cache = tmp_path / "features.sqlite"
    events = []
    result = novelfind.scan(
        library,
        10,
        engine="ray",
        ray_address=cluster.address,
        cache=cache,
        batch_size=8,
        on_progress=events.append,
    )
    _same_scan(result, local_scan)
    assert (result.counts.extracted, result.counts.from_cache, result.counts.failed) == (81, 0, 3)
    done = [e.done for e in events if e.stage == "extract"]
    assert done == sorted(done) and done[-1] == 84 and len(done) > 2  # per batch, not at the end
    with novelfind.Cache.open(cache) as store:
        assert store.info()["files"] == 81  # every vector committed, failures never

    # A moved file is recognised by its bytes on the cluster (hashed, not decoded) and reuses its vector.
    moved = library / "d0" / "IMG_0002.jpg"
    renamed = moved.with_name("IMG_0002 renamed.jpg")
    moved.rename(renamed)
    try:
        again = novelfind.scan(library, 10, engine="ray", ray_address=cluster.address, cache=cache)
    finally:
        renamed.rename(moved)
    assert (again.counts.extracted, again.counts.from_cache) == (0, 81)
    assert [p.path.name for p in again.picks] == [
        "IMG_0002 renamed.jpg" if p.path == moved else p.path.name for p in local_scan.picks
    ]


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "novelfind", *args],
        capture_output=True,
        env=env,
        encoding="utf-8",
        errors="surrogateescape",
        timeout=timeout,
    )


def test_the_command_line_prints_only_results_on_stdout(cluster, library, local_scan, tmp_path):
    done = _cli(
        "scan",
        str(library),
        "--k",
        "10",
        "--engine",
        "ray",
        "--ray-address",
        cluster.address,
        "--cache",
        str(tmp_path / "c.sqlite"),
        "--format",
        "paths",
        "-q",
    )
    assert done.returncode == ExitCode.PARTIAL, done.stderr
    want = encode_output(local_scan.to_text("paths")).decode("utf-8", "surrogateescape")
    assert done.stdout == want and len(want.splitlines()) == 10
    # -q: the unreadable files and nothing else (no line from Ray)
    unreadable = [f"warning: cannot read {f.path}: {f.reason}" for f in local_scan.failures]
    assert done.stderr.splitlines() == unreadable


def test_an_unreachable_cluster_ends_the_command_with_one_line_and_exit_code_1(library, tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = _cli("scan", str(library), "--engine", "ray", "--ray-address", f"127.0.0.1:{port}", "--no-cache")
    assert done.returncode == ExitCode.ERROR
    assert done.stdout == ""
    last = done.stderr.splitlines()[-1]
    assert last.startswith(f"error: cannot reach the Ray cluster at 127.0.0.1:{port}: ")
    assert sum(line.startswith("error:") for line in done.stderr.splitlines()) == 1


def test_a_ray_scan_that_succeeds_prints_no_ray_log_lines(cluster, library, tmp_path):
    done = _cli(
        "scan",
        str(library),
        "--k",
        "3",
        "--engine",
        "ray",
        "--ray-address",
        cluster.address,
        "--cache",
        str(tmp_path / "c.sqlite"),
    )
    assert done.returncode == ExitCode.PARTIAL, done.stderr
    ray_log = re.compile(r"\[\d{4}-\d\d-\d\d [\d:,]+ [EWIF] ")  # [2026-11-26 12:37:46,268 E 9004 9547]
    assert [line for line in done.stderr.splitlines() if ray_log.match(line)] == []
    assert "core_worker" not in done.stderr


class _SilentListener:
    """Something on a local port that accepts connections and never answers like a Ray head."""

    def __enter__(self) -> int:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.5)
        self.accepted: list[socket.socket] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()
        return self.sock.getsockname()[1]

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                self.accepted.append(self.sock.accept()[0])
            except OSError:
                continue

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        for conn in self.accepted:
            conn.close()
        self.sock.close()


def test_an_address_that_is_not_a_ray_head_is_one_line_on_the_command_line(library):
    _ray()
    with _SilentListener() as port:
        address = f"127.0.0.1:{port}"
        done = _cli(
            "scan", str(library), "--engine", "ray", "--ray-address", address, "--no-cache", timeout=240
        )
    assert done.returncode == ExitCode.ERROR
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0] == (
        f"error: cannot connect to the Ray cluster at 127.0.0.1:{port}: no Ray head answered there "
        "(is it the head's GCS port, 6379 by default?)"
    )


def _committed(cache: Path) -> int:
    """Files with a vector in the cache, read by another process while the scan writes it."""
    try:
        with sqlite3.connect(f"file:{cache}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute("SELECT count(*) FROM files").fetchone()[0]
    except sqlite3.Error:  # not created yet
        return 0


def test_a_driver_killed_mid_scan_keeps_its_batches_and_the_next_run_resumes(cluster, tmp_path):
    root = tmp_path / "archive"
    for i in range(240):
        make_photo(root / f"r{i % 4}" / f"P{i:04d}.jpg", (20 + i % 200, 90, 160 - i % 120), seed=i)
    cache = tmp_path / "features.sqlite"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    driver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "novelfind",
            "scan",
            str(root),
            "--engine",
            "ray",
            "--ray-address",
            cluster.address,
            "--cache",
            str(cache),
            "--batch-size",
            "2",
            "-q",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        deadline = time.monotonic() + 400
        while _committed(cache) == 0 and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        driver.send_signal(signal.SIGKILL)  # no chance to clean up
    finally:
        driver.kill()
        out, err = driver.communicate()
    assert driver.returncode == -signal.SIGKILL, err.decode()
    kept = _committed(cache)
    assert 0 < kept < 240  # it died mid-scan, after some batches were committed
    with sqlite3.connect(cache) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    resumed = novelfind.scan(root, 5, engine="ray", ray_address=cluster.address, cache=cache)
    assert resumed.counts.from_cache == kept  # every committed batch is used, none is lost or damaged
    assert resumed.counts.extracted == 240 - kept
    fresh = novelfind.scan(root, 5, cache=False, device="cpu")
    assert [p.path for p in resumed.picks] == [p.path for p in fresh.picks]
    assert float(np.abs(resumed.features - fresh.features).max()) < 1e-3


def test_an_unreachable_address_is_a_one_line_error():
    from novelfind.extract.engines.ray import RayEngine

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    engine = RayEngine(f"127.0.0.1:{port}", connect_timeout=2)
    with pytest.raises(ClusterError) as info:
        engine.connect()
    assert str(info.value).startswith(f"cannot reach the Ray cluster at 127.0.0.1:{port}: ")
    assert "\n" not in str(info.value)
    assert info.value.exit_code == ExitCode.ERROR


def test_an_address_that_is_not_a_ray_head_fails_instead_of_hanging():
    """Something listens but never answers like Ray: Ray's own connection would retry for ever."""
    _ray()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    accepted = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.5)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    code = textwrap.dedent(
        f"""
        from novelfind.extract.engines.ray import RayEngine
        from novelfind.errors import ClusterError
        try:
            RayEngine("127.0.0.1:{port}").connect()
        except ClusterError as err:
            print("ClusterError:", err)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        # generous: one connection attempt takes about 8 s; a hang would be stopped here
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env
        )
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()
    assert done.stdout.startswith(f"ClusterError: cannot connect to the Ray cluster at 127.0.0.1:{port}: ")


def test_importing_the_engine_does_not_import_ray():
    code = "import sys, novelfind.extract.engines.ray; assert 'ray' not in sys.modules, 'ray imported'"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_without_ray_installed_the_error_says_how_to_install_it(monkeypatch):
    from novelfind.extract.engines.ray import INSTALL_HINT, RayEngine

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ClusterError, match="needs Ray") as info:
        RayEngine("auto").connect()
    assert INSTALL_HINT in str(info.value)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"feature": "pixels"}, "feature must be one of"),
        ({"device": "tpu"}, "device must be auto, cpu or cuda"),
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"stall_timeout": 0}, "timeouts must be > 0"),
    ],
)
def test_bad_arguments_are_value_errors(kwargs, message):
    from novelfind.extract.engines.ray import RayEngine

    with pytest.raises(ValueError, match=message):
        RayEngine("auto", **kwargs)


def test_a_node_lost_during_a_scan_changes_nothing_in_its_result(cluster, library, local_scan, tmp_path):
    """Through scan(): a worker node is removed once the first batch is in; the ranking is the local one."""
    lost = []

    def on_progress(event):
        if event.stage == "extract" and event.done and not lost:
            lost.append((event.done, event.total))
            cluster.remove_node(cluster.workers.pop(0))  # kills its raylet, its actor and its block

    try:
        result = novelfind.scan(
            library,
            10,
            engine="ray",
            ray_address=cluster.address,
            batch_size=4,
            cache=tmp_path / "c.sqlite",
            on_progress=on_progress,
        )
    finally:
        cluster.workers.append(cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE))
        cluster.wait_for_nodes()
    assert lost and lost[0][0] < lost[0][1]  # work remained when the node went
    _same_scan(result, local_scan)
    assert (result.counts.extracted, result.counts.failed) == (81, 3)


# Last: it takes a worker node away from the module's cluster.
def test_a_worker_node_lost_mid_scan_is_redone_elsewhere(cluster, photos, local_results, model_cache):
    """The node that delivered the first results is removed while it works; the scan still completes."""
    from novelfind.extract.engines.ray import RayEngine

    ray, _ = _ray()
    removed: list[str] = []
    after: set[str] = set()
    batches = []
    with RayEngine(cluster.address, batch_size=4, model_cache_dir=model_cache) as engine:
        for batch in engine.run(photos):
            batches.append(batch)
            if not removed:
                node_id = batch.nodes[0]
                victim = next(n for n in cluster.workers if n.node_id == node_id)
                cluster.remove_node(victim)  # kills its raylet, its actor and the block it was working on
                removed.append(node_id)
            else:
                after.update(batch.nodes)
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    got = _collect(batches)
    _assert_same_as_local(got, local_results)
    assert len(batches[0]) < len(photos)  # work remained when the node went
    # blocks the lost node finished before it went may still arrive; the rest came from the survivor
    assert after - set(removed)
    assert removed[0] not in alive


def test_the_ray_engine_reads_a_clip_as_the_local_engine_does(cluster, tmp_path):
    """A clip goes to the cluster like a photo: the worker reads it through its kind's record, the model
    makes its one vector from its frames, and its record (frames, moment) comes back and is cached."""
    from clips import pan, write_clip

    root = tmp_path / "lib"
    for i in range(12):
        make_photo(root / f"IMG_{i:02d}.jpg", (40, 60 + i, 200), seed=i)
    clip = write_clip(root / "VID_0001.mp4", pan((220, 40, 40)))
    warned: list[str] = []
    on_ray = novelfind.scan(
        root,
        3,
        engine="ray",
        ray_address=cluster.address,
        cache=tmp_path / "ray.sqlite",
        on_warning=warned.append,
    )
    here = novelfind.scan(root, 3, cache=tmp_path / "local.sqlite", device="cpu")
    assert not [w for w in warned if "clip" in w]
    assert [f.path for f in on_ray.files] == [f.path for f in here.files] and clip in on_ray.clips
    assert on_ray.clips[clip] == here.clips[clip]
    row = [f.path for f in on_ray.files].index(clip)
    assert float(np.abs(on_ray.features[row] - here.features[row]).max()) < 1e-3
    again = novelfind.scan(root, 3, cache=tmp_path / "ray.sqlite", device="cpu")  # the record was cached
    assert again.counts.extracted == 0 and again.clips[clip] == here.clips[clip]
