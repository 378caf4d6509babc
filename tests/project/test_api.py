"""The Python API: novelfind.scan / rank / ads / Cache, the same scan as the command line, and the
shape of the package (no import cycles, no module above its station, a quick import)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import pydoc
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from common import make_photo

import novelfind
from novelfind import params
from novelfind.base.lock import RunLock, output_lock_path
from novelfind.cli.base import DEFAULTS
from novelfind.cli.group import cli
from novelfind.errors import CacheError, ExitCode, InputError, LockedError, NovelfindError
from novelfind.extract import engines
from novelfind.extract.engines import local
from novelfind.ranking.methods import METHODS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "novelfind"


# --------------------------------------------------------------------------- the same scan as the CLI


@pytest.mark.parametrize("method", METHODS)
def test_api_and_cli_give_the_same_ranking(library, fake_extractor, tmp_path, method):
    seed = {"seed": 3} if "seed" in METHODS[method].settings else {}  # the others refuse a seed
    args = ["scan", str(library["root"]), "--k", "6", "--method", method, "--no-cache"]
    args += [f"--{name}={value}" for name, value in seed.items()]
    cli_json = CliRunner().invoke(cli, [*args, "--format", "json"])
    cli_tsv = CliRunner().invoke(cli, args)
    assert cli_json.exit_code == cli_tsv.exit_code == 0, cli_json.stderr
    from_cli = json.loads(cli_json.stdout)
    result = novelfind.scan(library["root"], 6, method=method, cache=False, **seed)
    assert result.to_text("tsv") == cli_tsv.stdout
    assert [
        (Path(p["path"]), p["score"], p["neighbour"], p["distance"], p["members"]) for p in from_cli["picks"]
    ] == [
        (p.path, p.score, str(p.neighbour), p.distance, [str(m.path) for m in p.members])
        for p in result.picks
    ]
    # the 30 near-identical ordinary photos are one moment: 4 moments in all, every photo listed
    assert [p.rank for p in result.picks] == [1, 2, 3, 4]
    assert sum(1 + len(p.members) for p in result.picks) == 33
    assert {p.path for p in result.picks[:3]} == set(library["odd"])
    # the run record is the same, but for the time it took
    record = result.record()
    assert {k: v for k, v in record.items() if k != "seconds"} == {
        k: v for k, v in from_cli["run"].items() if k != "seconds"
    }


def test_scan_result_holds_the_counts_files_and_features(library, fake_extractor, tmp_path):
    bad = library["root"] / "broken.jpg"
    bad.write_text("not a jpeg")
    result = novelfind.scan([library["root"]], k=3, cache=tmp_path / "c.sqlite")
    assert result.counts == novelfind.Counts(
        found=34,
        from_cache=0,
        extracted=33,
        failed=1,
        candidates=33,
        duplicates_dropped=0,
        photos=34,
        ignored=0,
        newly_ignored=0,
    )
    assert result.failures == [novelfind.Failure(bad, result.failures[0].reason)]
    assert result.failures[0].reason == "not a recognised image format"
    assert len(result.files) == 33 and result.features.shape == (33, fake_extractor.dim)
    assert result.parameters.k == 3 and result.parameters.paths == (library["root"],)
    assert result.seconds > 0
    pick = result.picks[0]
    assert pick.mtime.tzinfo is not None and int(pick.mtime.timestamp()) == pick.mtime_ns // 10**9
    assert pick.size == pick.path.stat().st_size
    # the features rank again without reading a photo
    again = novelfind.rank(result.features, 3, method="knn")
    assert {result.files[i].path for i in again.indices} == set(library["odd"])
    second = novelfind.scan(library["root"], 3, cache=tmp_path / "c.sqlite")
    assert (second.counts.from_cache, second.counts.extracted) == (33, 0)
    assert [p.path for p in second.picks] == [p.path for p in result.picks]


def test_scan_prints_nothing_and_reports_through_callbacks(library, fake_extractor, tmp_path, capfd):
    bad = library["root"] / "broken.jpg"
    bad.write_text("not a jpeg")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    events, warned, failed = [], [], []
    result = novelfind.scan(
        library["root"],
        3,
        cache=blocker / "c.sqlite",
        on_progress=events.append,
        on_warning=warned.append,
        on_failure=lambda p, r: failed.append((p, r)),
    )
    assert capfd.readouterr() == ("", "")
    assert failed == [(bad, "not a recognised image format")] == [tuple(f) for f in result.failures]
    assert len(warned) == 1 and "running without the cache" in warned[0]
    stages = [e.stage for e in events]
    assert stages[0] == "walk" and stages[-1] == "rank"
    assert stages.index("extract") > stages.index("walk") and "write" not in stages
    extract = [e for e in events if e.stage == "extract"]
    assert extract[-1].done == extract[-1].total == 34
    assert [e.done for e in events if e.stage == "rank"] == [0, 1]


def test_scan_writes_nothing_but_the_cache_unless_asked(
    library, fake_extractor, tmp_path, isolated_user_dirs
):
    before = {p for p in tmp_path.rglob("*")} | {p for p in isolated_user_dirs.rglob("*")}
    novelfind.scan(library["root"], 3)
    after = {p for p in tmp_path.rglob("*")} | {p for p in isolated_user_dirs.rglob("*")}
    cache = isolated_user_dirs / "cache" / "novelfind" / "features.sqlite"
    assert {p for p in after - before if p.is_file()} <= {
        cache,
        cache.with_name(cache.name + "-wal"),
        cache.with_name(cache.name + "-shm"),
    }
    assert cache.is_file()


def test_scan_writes_the_outputs_it_is_asked_for(library, fake_extractor, tmp_path):
    events = []
    result = novelfind.scan(
        library["root"],
        3,
        cache=False,
        output=tmp_path / "p.csv",
        format="csv",
        copy_to=tmp_path / "novel",
        report=tmp_path / "r.html",
        contact_sheet=tmp_path / "s.png",
        on_progress=events.append,
    )
    assert (tmp_path / "p.csv").read_bytes() == result.to_text("csv").encode()
    assert len([p for p in (tmp_path / "novel").iterdir() if not p.name.startswith(".")]) == 3
    assert "3 most novel photos of 33" in (tmp_path / "r.html").read_text()
    assert (tmp_path / "s.png").stat().st_size > 0
    assert [(e.done, e.total) for e in events if e.stage == "write"] == [(i, 4) for i in range(5)]


# --------------------------------------------------------------------------- parameters


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 0}, "k must be at least 1, got 0"),
        ({"k": 2.5}, "k must be a whole number, got 2.5"),
        ({"k": True}, "k must be a whole number, got True"),
        ({"lr": 0.0}, "lr must be greater than 0, got 0.0"),
        ({"lr": float("nan")}, "lr must be a finite number, got nan"),
        ({"momentum": 1}, "momentum must be less than 1, got 1.0"),
        ({"batch_size": 5000}, "batch_size must be at most 4096, got 5000"),
        ({"workers": -1}, "workers must be at least 0, got -1"),
        ({"method": "power"}, f"method must be one of {', '.join(METHODS)}, got 'power'"),
        (
            {"format": "xml"},
            ("format must be one of tsv, json, jsonl, csv, paths, paths0, members, members0, got 'xml'"),
        ),
        ({"engine": "spark"}, "engine must be one of local, ray, got 'spark'"),
        ({"decoder": "nvjpeg"}, "decoder must be one of auto, pillow, gpu, got 'nvjpeg'"),
        ({"device": "tpu"}, "device must be one of auto, cpu, cuda, got 'tpu'"),
        (
            {"since": "last tuesday"},
            (
                "since 'last tuesday' is not a date: use 7d, 2w, 36h, today, yesterday, 2026-01-01, "
                "2026-01-01T10:00:00 or 2026-01-01T10:00:00+02:00"
            ),
        ),
        ({"since": 20240101}, "since must be a datetime or a date's text, got 20240101"),
        ({"contact_sheet": "sheet.gif"}, "contact sheet sheet.gif: use a .jpg, .png or .webp name"),
        ({"xmp_keyword": "Picks|novel"}, "xmp_keyword takes effect only with xmp=True"),
        ({"ray_address": "auto"}, "ray_address takes effect only with engine='ray'"),
        ({"paths": []}, "paths must name at least one folder or image"),
    ],
)
def test_bad_parameters_are_input_errors_before_any_work(library, fake_extractor, kwargs, message):
    kwargs = {"paths": library["root"], **kwargs}
    with pytest.raises(InputError) as info:
        novelfind.scan(**kwargs)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError) and info.value.exit_code == ExitCode.USAGE
    assert fake_extractor.images == 0


def test_scan_signature_parameters_and_command_line_share_their_defaults():
    signature = inspect.signature(novelfind.scan)
    callbacks = {"on_progress", "on_warning", "on_failure"}
    arguments = {name: p.default for name, p in signature.parameters.items() if name not in callbacks}
    fields = {f.name: f.default for f in dataclasses.fields(novelfind.ScanParameters)}
    assert list(arguments) == list(fields)
    assert {k: v for k, v in arguments.items() if k != "paths"} == params.parameter_defaults() == DEFAULTS
    # the solver's defaults are the paper's, as ADSConfig has them
    config = novelfind.ADSConfig()
    for name in ("epochs", "partners", "lr", "momentum", "seed", "restarts"):
        assert fields[name] == getattr(config, name), name
    # every parameter is documented in scan()'s docstring
    doc = novelfind.scan.__doc__
    for name in list(arguments) + sorted(callbacks):
        assert f"{name}" in doc, f"scan() does not document {name}"


def test_help_reads_like_documentation():
    for name, must in [
        ("scan", ("Args:", "Returns:", "Raises:", "Example")),
        ("rank", ("(N, M)", "Returns", "Raises ValueError", "Example")),
        ("ads", ("(N, M)", "ValueError")),
        ("Cache", ("open", "info", "prune", "clear")),
    ]:
        text = pydoc.render_doc(getattr(novelfind, name), renderer=pydoc.plaintext)
        for word in must:
            assert word in text, f"help(novelfind.{name}) lacks {word!r}"
    proc = subprocess.run(
        [sys.executable, "-c", "import novelfind; help(novelfind.scan)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Find the ``k`` most novel photos" in proc.stdout and "ScanResult" in proc.stdout


def test_docstring_examples_run():
    import doctest

    for function in (novelfind.rank,):
        finder = doctest.DocTestFinder()
        runner = doctest.DocTestRunner()
        for test in finder.find(function, globs={}):
            runner.run(test)
        assert runner.failures == 0 and runner.tries > 0


# --------------------------------------------------------------------------- seams for other engines


ENGINE_CALLS: list[tuple] = []


def recording_engine(files, extractor, cache, *, address, device, **kwargs):
    """An extraction engine from outside the package: records its call, then extracts locally."""
    ENGINE_CALLS.append((sorted(kwargs), address, device))
    return local.extract(files, extractor, cache, **kwargs)


def test_another_engine_plugs_in_by_name(library, fake_extractor, monkeypatch):
    recording = engines.Engine(f"{__name__}:recording_engine", {"ray_address": "address", "device": "device"})
    monkeypatch.setitem(engines.ENGINES, "recording", recording)
    ENGINE_CALLS.clear()
    result = novelfind.scan(library["root"], 3, engine="recording", ray_address="head:6379", cache=False)
    keywords = ["batch_size", "decoder", "keep_vectors", "on_failure", "on_progress", "on_warning", "workers"]
    assert ENGINE_CALLS == [(keywords, "head:6379", "auto")]  # where, and the workers' device
    assert {p.path for p in result.picks} == set(library["odd"])


# --------------------------------------------------------------------------- locks and the cache


def test_a_busy_output_raises_or_waits(library, fake_extractor, tmp_path):
    out = tmp_path / "picks.tsv"
    lock = output_lock_path(out)
    lock.parent.mkdir(parents=True, exist_ok=True)
    code = (
        "import sys; from novelfind.base.lock import RunLock\n"
        f"with RunLock({str(lock)!r}):\n    print('held', flush=True); sys.stdin.read()\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(LockedError, match=f"pid {holder.pid}"):
            novelfind.scan(library["root"], 2, output=out, wait=False, cache=False)
        events = []

        def release_when_waiting(event):
            events.append(event)
            if event.stage == "wait":
                holder.stdin.close()

        novelfind.scan(library["root"], 2, output=out, cache=False, on_progress=release_when_waiting)
    finally:
        if not holder.stdin.closed:
            holder.stdin.close()
        holder.wait(timeout=30)
    assert [e.path for e in events if e.stage == "wait"] == [out.absolute()]
    assert len(out.read_text().splitlines()) == 2
    with RunLock(lock):  # released again
        pass


def test_cache_open_info_prune_clear(library, fake_extractor, tmp_path):
    path = tmp_path / "c.sqlite"
    with pytest.raises(CacheError, match=f"no cache at {path}"):
        novelfind.Cache.open(path, create=False)
    with novelfind.Cache.open(path) as cache:  # created empty
        assert cache.info()["entries"] == 0
        novelfind.scan(library["root"], 2, cache=cache)  # a Cache object: its file is used
        assert cache.info()["entries"] == 33
        library["odd"][0].unlink()
        assert cache.prune() == 1
        cache.clear()
        assert cache.info()["entries"] == 0


def test_default_cache_is_the_users(fake_extractor, library, isolated_user_dirs):
    novelfind.scan(library["root"], 2)
    with novelfind.Cache.open(create=False) as cache:
        assert cache.path == isolated_user_dirs / "cache" / "novelfind" / "features.sqlite"
        assert cache.info()["files"] == 33


def test_errors_are_novelfind_errors(tmp_path, fake_extractor):
    (tmp_path / "empty").mkdir()
    with pytest.raises(NovelfindError, match="no images found"):
        novelfind.scan(tmp_path / "empty")
    with pytest.raises(InputError, match="no such folder"):
        novelfind.scan(tmp_path / "missing")


# --------------------------------------------------------------------------- the package's shape


def _imports(path: Path) -> set[str]:
    """novelfind modules that ``path`` imports, anywhere in it (functions and TYPE_CHECKING included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("novelfind"):
            if node.module == "novelfind":
                found |= {a.name for a in node.names if (PACKAGE / f"{a.name}.py").exists()}
            else:
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("novelfind.")}
    return found


def test_no_import_cycles_and_no_module_above_its_station():
    graph = {p.stem: _imports(p) - {p.stem} for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    # the command line is a package: what any of its modules imports, "cli" imports
    graph["cli"] = set().union(*(_imports(p) for p in (PACKAGE / "cli").glob("*.py"))) - {"cli"}
    assert "run" in graph["cli"]  # the package's modules were read
    # nothing imports the command line but __main__, and only the command line imports the orchestrator
    assert {m for m, deps in graph.items() if "cli" in deps} == {"__main__"}
    assert {m for m, deps in graph.items() if "run" in deps} == {"cli"}

    def visit(module: str, path: tuple[str, ...]) -> None:
        for dep in graph.get(module, ()):
            assert dep not in path, f"import cycle: {' -> '.join(path + (dep,))}"
            visit(dep, path + (dep,))

    for module in graph:
        visit(module, (module,))


def test_import_and_help_do_not_pay_for_torch():
    code = (
        "import sys, novelfind, novelfind.cli.group; novelfind.Cache; novelfind.scan; "
        "print(sorted(m for m in ('torch', 'onnxruntime', 'faiss') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_public_names_resolve():
    for name in novelfind.__all__:
        assert getattr(novelfind, name) is not None
    assert novelfind.Cache.__name__ == "FeatureCache"
    assert isinstance(novelfind.ScanParameters(paths="x").paths[0], Path)
    with pytest.raises(AttributeError):
        novelfind.no_such_name  # noqa: B018


def test_the_walk_offers_the_decoders_extensions_and_raw_files():
    """The walk and the decoders agree on the file types (the kinds' lists, in novelfind.media.extensions;
    what this installation reads, in novelfind.media.decode); RAW names are walked even without rawpy, to
    be kept with their JPEG twins."""
    from novelfind.media.decode import IMAGE_EXTENSIONS
    from novelfind.media.extensions import RAW_EXTENSIONS
    from novelfind.media.walk import is_image_name

    assert all(is_image_name(f"a{ext.upper()}") for ext in IMAGE_EXTENSIONS | RAW_EXTENSIONS)
    assert is_image_name("IMG_0001.CR2") and is_image_name("x.nef")
    assert not is_image_name("notes.txt") and not is_image_name("IMG_0001.CR2.xmp")


def test_scan_prints_nothing_even_when_something_goes_wrong(library, fake_extractor, tmp_path, capfd):
    """The library speaks through its result: warnings (here an unusable cache) and notices are kept
    there, stdout and stderr stay empty, and a library of one photo says that it cannot be ranked."""
    import warnings as python_warnings

    not_a_cache = tmp_path / "folder"
    not_a_cache.mkdir()
    with python_warnings.catch_warnings():
        python_warnings.simplefilter("error")  # a warning that escaped would raise here
        result = novelfind.scan(library["root"], k=3, cache=not_a_cache)
        assert len(result.picks) == 3
        assert any("running without the cache" in w for w in result.warnings)
        one = tmp_path / "one"
        make_photo(one / "only.jpg", (10, 20, 30), seed=1)
        alone = novelfind.scan(one, k=3)
    assert capfd.readouterr() == ("", "")
    assert [p.path.name for p in alone.picks] == ["only.jpg"]
    assert any("one photo" in n and "cannot be ranked" in n for n in alone.notices)


def test_a_scan_of_one_photo_says_it_cannot_be_ranked(tmp_path, fake_extractor):
    make_photo(tmp_path / "only.jpg", (10, 20, 30), seed=1)
    result = CliRunner().invoke(cli, ["scan", str(tmp_path)])
    assert result.exit_code == 0
    assert result.stdout.startswith("1\t")
    assert "note: the library is one photo" in result.stderr and "cannot be ranked" in result.stderr
    quiet = CliRunner().invoke(cli, ["scan", str(tmp_path), "-q"])
    assert (quiet.exit_code, quiet.stderr) == (0, "")
