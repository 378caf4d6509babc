"""The real path: real MobileNet-V2 weights on real photos shipped in packages, through the command line."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
from pathlib import Path

import pytest
from photosets import example_set, write_set

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """75 views of a few campus scenes and flower beds, plus 5 photos that plainly do not belong."""
    labelled = example_set(seed=0)
    dest = tmp_path_factory.mktemp("example")
    paths = write_set(labelled, dest)
    odd = {p for p, is_odd in zip(paths, labelled.labels, strict=True) if is_odd}
    assert len(odd) == 5
    return dest, paths, odd


def scan(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "novelfind", "scan", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
    )


def test_planted_odd_photos_come_out_on_top(example, tmp_path):
    dest, paths, odd = example
    cache = tmp_path / "features.sqlite"
    first = scan(dest, "--k", "5", "--cache", cache, "--format", "json")
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    picked = {Path(p["path"]) for p in doc["picks"]}
    assert picked == odd, f"picked {sorted(p.name for p in picked)}, planted {sorted(p.name for p in odd)}"
    assert doc["run"]["extracted"] == len(paths)
    n = len(paths)
    assert f"{n} photos ({n} files) found, 0 read from cache, {n} extracted, 0 failed" in first.stderr

    # The second scan reads every vector from the cache and ranks the same way.
    second = scan(dest, "--k", "5", "--cache", cache, "--format", "json")
    assert second.returncode == 0, second.stderr
    assert f"{len(paths)} read from cache, 0 extracted" in second.stderr
    assert [p["path"] for p in json.loads(second.stdout)["picks"]] == [p["path"] for p in doc["picks"]]


def test_paper_method_also_finds_them(example, tmp_path):
    dest, _, odd = example
    result = scan(
        dest, "--k", "5", "--method", "ads-paper", "--format", "paths", "-q", "--cache", tmp_path / "c.sqlite"
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    picked = {Path(line) for line in result.stdout.splitlines()}
    assert len(picked & odd) >= 4


def readme_python_example() -> str:
    """The first ```python block of the README's "Python API" section, exactly as written there."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


# how the example is run: a script file (no ``if __name__ == "__main__":``), its start method as the
# platform has it or as the script sets it first; or code after ``python -c``, a REPL's kind of __main__
README_RUNS = [
    (how, method)
    for how, method in [("script", None), ("script", "spawn"), ("script", "forkserver"), ("command", None)]
    if method is None or method in multiprocessing.get_all_start_methods()
]


@pytest.mark.parametrize(("how", "method"), README_RUNS)
def test_the_readme_python_example_runs_as_written(example, tmp_path, how, method):
    """The example runs in a folder holding the quick start's `example-photos`, with the real model, and
    prints nothing on stderr however it is run."""
    dest, _, odd = example
    (tmp_path / "example-photos").symlink_to(dest, target_is_directory=True)
    code = readme_python_example()
    assert "novelfind.scan(" in code and "novelfind.rank(" in code
    if method is not None:
        code = f"import multiprocessing\nmultiprocessing.set_start_method({method!r})\n{code}"
    (tmp_path / "example.py").write_text(code)
    args = ["-c", code] if how == "command" else [str(tmp_path / "example.py")]
    proc = subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Counts(found=80, from_cache=0, extracted=80, failed=0")
    picked = [line.split()[2] for line in lines[1:6]]
    assert [line.split()[0] for line in lines[1:6]] == ["1", "2", "3", "4", "5"]
    assert set(picked) == {p.name for p in odd}
    assert lines[6].startswith("knn: ")
    assert proc.stderr == ""  # the library prints nothing


def test_api_and_cli_agree_with_the_real_model(example, tmp_path):
    import novelfind

    dest, _, _ = example
    cache = tmp_path / "c.sqlite"
    cli = scan(dest, "--k", "8", "--cache", cache, "--format", "json", "-q")
    assert cli.returncode == 0, cli.stderr
    api = novelfind.scan(dest, 8, cache=cache)
    assert api.counts.from_cache == 80  # the same cache, the same vectors
    assert [(Path(p["path"]), p["score"]) for p in json.loads(cli.stdout)["picks"]] == [
        (p.path, p.score) for p in api.picks
    ]
