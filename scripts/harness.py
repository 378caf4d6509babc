"""What every benchmark here does besides its own measurement: time work (wall and CPU seconds, in this
process or in a child), watch a process tree (CPU and resident memory read from /proc, since
``getrusage`` sees a child only once it has ended), run a case in a fresh process, say what machine
ran it, and write the figures as JSON.

Each benchmark keeps the names and the order of the fields it has always written (the files under
docs/bench/ are read by those names), so ``machine`` takes the fields a benchmark wants and the key to
file each under, rather than imposing one description of the machine on all of them.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

# --------------------------------------------------------------------------- the machine


def cpu_model() -> str | None:
    """The CPU's model name from /proc/cpuinfo (``platform.processor()`` is often empty on Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return None


def _torch() -> str:
    import torch  # only the benchmarks that report it have it loaded already

    return torch.__version__


FACTS: dict[str, Callable[[], object]] = {
    "cpus": os.cpu_count,
    "affinity_cpus": lambda: len(os.sched_getaffinity(0)),  # the cores this process may use
    "python": platform.python_version,
    "platform": platform.platform,
    "machine": platform.machine,
    "processor": platform.processor,
    "processor_or_machine": lambda: platform.processor() or platform.machine(),
    "cpu_model": cpu_model,
    "load": os.getloadavg,
    "load_rounded": lambda: [round(x, 2) for x in os.getloadavg()],
    "load_1m": lambda: os.getloadavg()[0],
    "load_1m_rounded": lambda: round(os.getloadavg()[0], 2),
    "torch": _torch,
    "sqlite": lambda: sqlite3.sqlite_version,
}


def machine(*fields: str) -> dict:
    """The machine as a benchmark files it: each field is a fact of ``FACTS`` (``"python"``) or a key
    with the fact to file under it (``"cores=cpus"``), in the order given. A fact the system cannot
    give (no model name in /proc/cpuinfo, no load average) is left out rather than filed as null."""
    out: dict = {}
    for field in fields:
        key, _, fact = field.partition("=")
        try:
            value = FACTS[fact or key]()
        except OSError:
            continue
        if value is not None:
            out[key] = value
    return out


# --------------------------------------------------------------------------- timing


def timed(work: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU seconds of this process while ``work()`` runs."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


def children_cpu() -> float:
    """CPU seconds of every child this process has waited for so far (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def self_peak_mb(ndigits: int = 1) -> float:
    """This process's peak resident memory so far, in MB."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, ndigits)


def run_timed(args: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run a child to its end, its output captured as text: (the finished process, wall seconds, CPU
    seconds of it and of the children it waited for)."""
    cpu, start = children_cpu(), time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, check=False, **kwargs)
    return done, time.perf_counter() - start, children_cpu() - cpu


def wait_peak(proc: subprocess.Popen) -> tuple[int, float]:
    """Wait for ``proc``: (its exit code, its own peak resident memory in MB). ``wait4`` gives the one
    child's figure, where RUSAGE_CHILDREN would give the largest of every child ever waited for."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, round(usage.ru_maxrss / 1024, 1)


# --------------------------------------------------------------------------- process trees (Linux /proc)

TICK = os.sysconf("SC_CLK_TCK")


def process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, CPU clock ticks so far: utime + stime) of every process now running."""
    table: dict[int, tuple[int, int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            table[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
        except (OSError, IndexError, ValueError):
            continue
    return table


def descendants(root: int, table: dict[int, tuple[int, int]]) -> set[int]:
    """``root`` and every process below it in ``table``."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    tree, stack = {root}, [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in tree:
                tree.add(child)
                stack.append(child)
    return tree


def rss_kib(pids: Iterable[int]) -> int:
    """Sum of the resident memory (VmRSS, KiB) of ``pids``; a process gone meanwhile counts nothing."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            pass
    return total


class Sampler:
    """Calls ``sample()`` every ``interval`` seconds in a thread of its own while the ``with`` block runs
    (a process tree's memory and CPU must be read while it lives)."""

    def __init__(self, sample: Callable[[], object], interval: float = 0.1):
        self.sample, self.interval = sample, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def run_tree(
    args: list[str], *, interval: float = 0.05, **kwargs
) -> tuple[subprocess.CompletedProcess, float, float, int]:
    """Run a child to its end, its output captured as text: (the finished process, wall seconds, CPU
    seconds of its whole process tree, how many processes ran below it). The CPU is the child's own and
    that of the children it waited for (``getrusage``), plus the last figure /proc showed, sampled every
    ``interval`` seconds, of each other process below it (a pool's workers, which a process other than
    the child may reap; one the child waited for itself would count twice, so the count says whether
    there were any)."""
    cpu, start = children_cpu(), time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
    seen: dict[int, float] = {}

    def sample() -> None:
        table = process_table()
        for pid in descendants(proc.pid, table) & table.keys():
            seen[pid] = max(seen.get(pid, 0.0), table[pid][1] / TICK)

    with Sampler(sample, interval):
        out, err = proc.communicate()
    wall = time.perf_counter() - start
    seen.pop(proc.pid, None)
    done = subprocess.CompletedProcess(args, proc.returncode, out, err)
    return done, wall, children_cpu() - cpu + sum(seen.values()), len(seen)


# --------------------------------------------------------------------------- cases in a fresh process


class CaseFailed(Exception):
    """A case's process exited with an error; ``error`` is the last line it wrote on stderr."""

    def __init__(self, proc: subprocess.CompletedProcess):
        self.stderr = proc.stderr or ""
        lines = self.stderr.strip().splitlines()
        self.error = lines[-1] if lines else f"rc {proc.returncode}"
        super().__init__(self.error)


def in_child(args: list[str], **kwargs) -> dict:
    """``python SCRIPT ARGS`` in a fresh process (so that its figures, peak memory above all, are its
    own); its last line on stdout, read as JSON. CaseFailed when it fails."""
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        raise CaseFailed(proc)
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- the result file


def write_json(
    doc: dict, out: Path | None, *, indent: int = 2, echo: bool = False, end: str = "\n", **dumps
) -> str:
    """Write ``doc`` to ``out`` (its folder made) unless ``out`` is None; printed too with ``echo``.
    ``end`` follows the text: the files some benchmarks wrote without a final newline stay so."""
    text = json.dumps(doc, indent=indent, **dumps)
    if echo:
        print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + end)
    return text


# --------------------------------------------------------------------------- photos to generate from

SAMPLES = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "retina", "cat")


def sample_images() -> list:
    """scikit-image's colour sample photos (uint8 RGB arrays), the sources of the photos benchmarks
    generate: real image content, so that JPEG sizes and decode times are a camera's, not noise's."""
    import numpy as np
    import skimage.data

    out = []
    for name in SAMPLES:
        try:
            img = np.asarray(getattr(skimage.data, name)())
        except Exception:  # noqa: BLE001 - a missing sample is skipped
            continue
        if img.ndim == 3 and img.shape[2] >= 3:
            out.append(img[..., :3].astype(np.uint8))
    if not out:
        raise SystemExit("no scikit-image sample photos available")
    return out
