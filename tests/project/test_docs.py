"""The README runs as written: every shell command in it, the cron lines across a simulated week, the
samples it shows; and the documentation covers every option and links only to what exists.

Commands run through a ``novelfind`` on ``PATH`` that is the real command line with the fake extractor
(``tests/support/fake_cli.py``), in a home folder holding a small ``~/Pictures``, so that they run exactly as
written. Install lines (``pip``, ``python3 -m venv``) are checked, not run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from common import make_photo
from PIL import Image

from novelfind.cli.scan import scan as scan_command

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CRON_PATH = "/usr/bin:/bin"  # what cron gives a job
SCHEDULE = re.compile(r"^(\S+\s+){5}")


def shell_blocks(text: str) -> list[list[str]]:
    """The commands of each ```sh block: comment lines and trailing comments dropped."""
    blocks = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        lines = [re.sub(r"\s+# .*$", "", line).rstrip() for line in block.splitlines()]
        blocks.append([line for line in lines if line and not line.startswith("#")])
    return blocks


def is_install(line: str) -> bool:
    return line.startswith(("pip ", "python3 -m venv"))


def is_cron(line: str) -> bool:
    return bool(re.match(r"^[\d*]", line))


@pytest.fixture
def shim(tmp_path) -> Path:
    """A folder holding ``novelfind``: this checkout's command line with the fake extractor."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "novelfind"
    fake_cli = ROOT / "tests" / "support" / "fake_cli.py"
    script.write_text(f'#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} {fake_cli} "$@"\n')
    script.chmod(0o755)
    return folder


def distinct_photo(path: Path, seed: int, size=(64, 48)) -> Path:
    """A photo of 8 x 8 cells of random colours: unlike the others, so it is a moment of its own (photos
    of one colour are near-duplicates, members of one moment, for the test extractor)."""
    rng = np.random.default_rng(seed)
    cells = rng.integers(0, 256, (8, 8, 3)).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(cells).resize(size, Image.Resampling.NEAREST).save(path)
    return path


def home_with_pictures(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    pictures = home / "Pictures"
    for i in range(48):  # enough for the README's "20 other photos" after 20 are ignored
        path = pictures / f"trip{i % 2}" / f"IMG_{i:04d}.jpg"
        distinct_photo(path, seed=i)
    make_photo(pictures / "2019" / "cat.jpg", (220, 30, 30), seed=101)
    make_photo(pictures / "screenshots" / "shot.png", (250, 250, 250), seed=102)
    (home / "example-photos").symlink_to(pictures, target_is_directory=True)
    return home


def sh(line: str, *, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_readme_is_a_front_page():
    assert len(README.read_text().splitlines()) <= 300


QUICK_START = ["bash scripts/quickstart.sh", "bash scripts/test.sh"]  # set up and scan; the tests


def test_the_quick_start_is_two_commands_and_ci_runs_the_second():
    readme = README.read_text()
    section = readme.split("## Quick start\n", 1)[1].split("\n## ", 1)[0]
    assert shell_blocks(section)[0] == QUICK_START
    assert readme.index("## Quick start") < readme.index("## Install")  # at the top
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert QUICK_START[1] in ci
    for line in QUICK_START:
        assert (ROOT / line.split()[1]).is_file()


def test_every_readme_command_runs_as_written(tmp_path, shim):
    home = home_with_pictures(tmp_path)
    # the quick start's installs are install lines (checked, not run); example-photos is there already
    # (test_the_samples_are_current builds the real one)
    env = {**os.environ, "HOME": str(home), "PATH": f"{shim}:{CRON_PATH}", "QUICKSTART_SKIP_INSTALL": "1"}
    ran = 0
    for block in shell_blocks(README.read_text()):
        for line in block:
            if is_install(line) or is_cron(line):
                continue
            if line == QUICK_START[1]:
                continue  # the test suite itself
            if line == QUICK_START[0]:
                line = f"bash {ROOT / 'scripts' / 'quickstart.sh'}"  # run from the home folder
            done = sh(line, env=env, cwd=home)
            assert done.returncode == 0, f"{line}\n{done.stderr}"
            if line.startswith("novelfind scan") and " -o " not in line:
                assert done.stdout, line
            if line.endswith("quickstart.sh"):
                assert len(done.stdout.splitlines()) == 5, done.stdout  # --k 5
            ran += 1
    assert ran >= 15


def test_the_install_lines_name_what_exists():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    lines = [line for block in shell_blocks(README.read_text()) for line in block if is_install(line)]
    assert "pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu" in lines
    for line in lines:
        for name in re.findall(r"'\.\[([\w-]+)\]'", line):
            assert name in extras, line
    named = set(re.findall(r"pip install '\.\[([\w-]+)\]'", README.read_text())) - {"NAME"}
    assert named and named <= set(extras)
    extras_table = README.read_text().split("| extra | for |", 1)[1].split("\n\n", 1)[0]
    table = re.findall(r"^\| `([\w-]+)`(?:, `([\w-]+)`)? \|", extras_table, re.M)
    assert len(table) >= 5
    assert {name for row in table for name in row if name} <= set(extras)


def cron_lines() -> list[str]:
    return [line for block in shell_blocks(README.read_text()) for line in block if is_cron(line)]


def as_cron_runs_it(line: str, *, novelfind: Path, photos: Path, out: Path) -> str:
    """The command part of a crontab line, as cron hands it to sh: schedule dropped, ``\\%`` made ``%``;
    the README's example paths replaced by the test's."""
    command = SCHEDULE.sub("", line).replace("\\%", "%")
    command = command.replace("/home/you/.venvs/novelfind/bin/novelfind", str(novelfind))
    return command.replace("/srv/photos", str(photos)).replace("/srv/novel", str(out))


def test_the_cron_lines_work_as_copied_across_a_week(tmp_path, shim):
    """Nightly and Sunday lines as the README writes them, with cron's PATH: a week of new photos, Sunday
    tags and ignores the oddest, and the next night's list still holds every new photo of the week."""
    pytest.importorskip("exiv2", reason="the Sunday line needs the xmp extra")
    nightly, sunday = cron_lines()
    assert nightly.startswith("0 3 * * * ") and sunday.startswith("0 4 * * 0 ")
    assert "/bin/novelfind scan" in nightly and "mkdir -p" in nightly and "mkdir -p" in sunday
    photos, out = tmp_path / "photos", tmp_path / "novel"
    old = time.time() - 40 * 86400
    for i in range(15):
        p = make_photo(photos / "2026" / f"IMG_{i:04d}.jpg", (40, 60 + i % 5, 200), seed=i)
        os.utime(p, (old, old))
    two_days_ago = time.time() - 2 * 86400
    week = [distinct_photo(photos / "week" / f"NEW_{i}.jpg", seed=50 + i) for i in range(4)]
    for p in week:
        os.utime(p, (two_days_ago, two_days_ago))
    env = {"PATH": CRON_PATH, "HOME": os.environ.get("HOME", str(tmp_path)), "SHELL": "/bin/sh"}
    env.update({k: v for k, v in os.environ.items() if k.startswith(("XDG_", "NOVELFIND_"))})

    def run_line(line: str) -> subprocess.CompletedProcess:
        command = as_cron_runs_it(line, novelfind=shim / "novelfind", photos=photos, out=out)
        done = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=300)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), command
        return done

    def week_list() -> set[str]:
        return {Path(pick["path"]).name for pick in json.loads((out / "week.json").read_text())["picks"]}

    run_line(nightly)  # Saturday night: the output folder is made, the week's 4 photos listed
    assert week_list() == {p.name for p in week}
    run_line(sunday)  # Sunday: all 4 tagged (fewer than 20) and put on the ignore list
    tagged = (out / "tagged.tsv").read_text().splitlines()
    assert len(tagged) == 4
    assert all(Path(str(p) + ".xmp").exists() for p in week)
    later = [distinct_photo(photos / "week" / f"LATER_{i}.jpg", seed=70 + i) for i in range(2)]
    run_line(nightly)  # Monday night: Sunday's picks are still new photos of the week
    assert week_list() == {p.name for p in week + later}
    run_line(sunday)  # the next Sunday: only the photos not yet tagged and ignored
    assert {Path(line.split("\t")[2]).name for line in (out / "tagged.tsv").read_text().splitlines()} == {
        p.name for p in later
    }


def test_every_scan_option_is_documented():
    options = (ROOT / "docs" / "options.md").read_text()
    for param in scan_command.params:
        for name in getattr(param, "opts", []):
            if name.startswith("--") and name != "--help":
                assert f"`{name}" in options or f" {name}" in options, f"{name} is not in docs/options.md"
    for name in ("--cache-dtype", "-k N", "--since DATE", "--no-cache", "--include-ignored"):
        assert name in options


def test_links_between_the_documents_resolve():
    files = [README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    for path in files:
        for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            where, _, anchor = target.partition("#")
            dest = (path.parent / where).resolve() if where else path
            assert dest.exists(), f"{path.name}: {target}"
            if anchor and dest.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", dest.read_text(), re.M)
                slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
                assert anchor in slugs, f"{path.name}: {target}"


def test_the_samples_are_current():
    """The README's sample output is what the quick start prints now (real model; seconds aside)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import make_docs_samples
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    made = {name: make() for name, make in make_docs_samples.SAMPLES.items()}
    assert make_docs_samples.stale(made) == []
    readme = README.read_text()
    assert "<!-- sample: quickstart -->" in readme and "1\t" in made["quickstart"]


def test_the_changelog_has_this_version_on_top_and_it_is_newer_than_the_last():
    from novelfind import __version__

    text = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?", text, re.M)
    (top, date), (last, _) = releases[0], releases[1]
    assert top == __version__ and date, "the version's release is the changelog's first section, dated"
    assert "0.1.0" in [name for name, _ in releases]
    assert tuple(map(int, __version__.split("."))) > tuple(map(int, last.split(".")))
    section = text.split(f"## [{top}]", 1)[1].split("\n## [", 1)[0]
    assert "### Changed" in section or "### Added" in section
    # no release is tagged in the repository: the changelog links none
    assert "/compare/" not in text and "/releases/tag/" not in text


# ----------------------------------------------------------------------------- the output columns


OUTPUT_DOCS = {"README.md": README, "docs/output.md": ROOT / "docs" / "output.md"}
SCHEMA = ROOT / "docs" / "output-schema.md"


def format_table(text: str) -> dict[str, list[str]]:
    """The rows of the first table whose header starts ``| format``: each format named in the first
    cell (``tsv``, ``paths0`` / ``paths``) -> the row's cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"^\|\s*format\s*\|", line))
    rows: dict[str, list[str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        for name in re.findall(r"`([a-z0-9]+)`", cells[0]):
            rows[name] = cells
    return rows


def one_pick():
    from novelfind.picks import Label, Member, Pick

    member = Member(Path("/p/IMG_2.jpg"), 10, 0, 0.05)
    return Pick(
        1,
        0.5,
        Path("/p/IMG_1.jpg"),
        10,
        0,
        Path("/p/IMG_9.jpg"),
        0.7,
        (Path("/p/IMG_1.CR2"),),
        members=(member,),
        labels=(Label("telescope", 0.41), Label("planetarium", 0.12)),
    )


def test_every_format_is_in_the_format_tables():
    from novelfind.outputs.formats import FORMATS

    for name, path in {**OUTPUT_DOCS, "docs/output-schema.md": SCHEMA}.items():
        documented = format_table(path.read_text())
        assert sorted(documented) == sorted(FORMATS), name


def test_the_documented_tsv_columns_are_the_ones_written():
    from novelfind.outputs.formats import TSV_COLUMNS, format_results

    line = format_results([one_pick()], "tsv").rstrip("\n")
    assert len(line.split("\t")) == len(TSV_COLUMNS) == 6
    assert line.split("\t")[3] == "1"  # member_count
    written = "`" + "<TAB>".join(TSV_COLUMNS) + "`"
    for name, path in {**OUTPUT_DOCS, "docs/output-schema.md": SCHEMA}.items():
        cells = format_table(path.read_text())["tsv"]
        assert any(cell.split(" ")[-1] == written for cell in cells), name  # "a line `rank<TAB>...`"
    schema = SCHEMA.read_text()
    ordinals = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth"]
    assert f"the {ordinals[len(TSV_COLUMNS) - 1]} column is `{TSV_COLUMNS[-1]}`" in schema


def test_the_documented_csv_columns_are_the_ones_written():
    import csv
    import io

    from novelfind.outputs.formats import CSV_COLUMNS, format_results

    header, row = list(csv.reader(io.StringIO(format_results([one_pick()], "csv"))))
    assert tuple(header) == CSV_COLUMNS and len(row) == len(header)
    assert row[header.index("labels")] == "telescope 0.41, planetarium 0.12"
    for name, path in OUTPUT_DOCS.items():
        cell = format_table(path.read_text())["csv"][1]
        assert [c.strip() for c in cell.split(",")] == header, name
    schema = SCHEMA.read_text()
    block = schema.split("## csv", 1)[1].split("```", 2)[1]
    documented = list(csv.reader(io.StringIO(block.strip("\n"))))
    assert documented[0] == header  # the sample's header row
    assert all(len(r) == len(header) for r in documented[1:]), "every sample row has every column"


def test_every_pick_field_is_documented():
    """The JSON pick record's fields are in the schema's table and its samples; the Pick record's
    fields and properties in docs/api.md."""
    import dataclasses

    from novelfind.outputs.formats import _pick_record
    from novelfind.picks import Pick

    record = _pick_record(one_pick())
    schema = SCHEMA.read_text()
    table = {m for m in re.findall(r"^\| `(\w+)`", schema.split("## Fields of a pick", 1)[1], re.M)}
    assert set(record) <= table, set(record) - table
    json_sample = json.loads(schema.split("## json", 1)[1].split("```json", 1)[1].split("```", 1)[0])
    for pick in json_sample["picks"]:
        assert list(pick) == list(record)  # the order written
    jsonl = schema.split("## jsonl", 1)[1]
    line = next(ln for ln in jsonl.splitlines() if ln.startswith('{"type": "pick"'))
    assert list(json.loads(line)) == ["type", *record]
    api = (ROOT / "docs" / "api.md").read_text()
    names = [f.name for f in dataclasses.fields(Pick)]
    names += [n for n, v in vars(Pick).items() if isinstance(v, property)]
    missing = [n for n in names if f"`{n}`" not in api]
    assert not missing, f"docs/api.md does not name Pick's {missing}"
