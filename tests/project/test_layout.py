"""The package's shape holds: a short top level, modules of a readable size, package faces that say what
they are for, and tests laid out like the package, every module with a test file of its own.

These are the limits docs/development.md states; a change that breaks one either splits the module, or
says here, with its reason, why it may not."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "novelfind"
TESTS = ROOT / "tests"

MAX_TOP_LEVEL_MODULES = 12
MAX_LINES = 600
MAX_LINES_OF = {"run.py": 400}  # the pipeline as one call: it orchestrates, the stages do the work
MAX_FACE_LINES = 25  # a package's docstring: a few lines on what it is for and what it offers

# Test folders that are not packages: whole-program scenarios, project-wide checks, shared helpers.
OTHER_TEST_FOLDERS = {"scenarios", "project", "support"}
# Modules whose tests live in another module's file, and why.
TESTED_ELSEWHERE = {
    "__main__.py": "two lines that call cli.main; tests/cli/test_scan.py runs `python -m novelfind`",
}


def modules() -> list[Path]:
    return sorted(p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py"))


def expected_tests(module: Path) -> Path:
    """``media/walk.py`` -> ``tests/media/test_walk.py``; a module of a nested package is tested beside its
    top package's (``extract/decoders/gpu.py`` -> ``tests/extract/test_gpu.py``); a top-level module's
    tests are at the top (``run.py`` -> ``tests/test_run.py``)."""
    name = f"test_{module.stem}.py"
    return TESTS / name if len(module.parts) == 1 else TESTS / module.parts[0] / name


def test_the_top_level_is_short():
    top = [p.name for p in PACKAGE.glob("*.py")]
    assert len(top) <= MAX_TOP_LEVEL_MODULES, sorted(top)


@pytest.mark.parametrize("module", modules(), ids=str)
def test_no_module_is_too_long(module):
    lines = len((PACKAGE / module).read_text(encoding="utf-8").splitlines())
    limit = MAX_LINES_OF.get(str(module), MAX_LINES)
    assert lines <= limit, f"novelfind/{module} has {lines} lines (at most {limit}): split it by concern"


@pytest.mark.parametrize("face", sorted(PACKAGE.rglob("__init__.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_package_face_says_what_the_package_is_for(face):
    """A docstring of a few lines: what the package is for and what it offers (its modules, its registry).
    The public API's face (novelfind/__init__.py) lists its names, so it may say more."""
    doc = ast.get_docstring(ast.parse(face.read_text(encoding="utf-8")))
    assert doc and len(doc.split()) >= 8, (
        f"{face.relative_to(ROOT)} needs a docstring: what it is for and offers"
    )
    if face.parent != PACKAGE:
        assert len(doc.splitlines()) <= MAX_FACE_LINES, f"{face.relative_to(ROOT)}: say it in fewer lines"


@pytest.mark.parametrize("module", [m for m in modules() if m.name != "__init__.py"], ids=str)
def test_every_module_has_a_test_file_of_its_own(module):
    if str(module) in TESTED_ELSEWHERE:
        return
    want = expected_tests(module)
    assert want.exists(), f"novelfind/{module} has no {want.relative_to(ROOT)}"


def test_the_tests_are_laid_out_like_the_package():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders - packages - OTHER_TEST_FOLDERS == set(), "test folders that match no package"
    top_level = {expected_tests(m) for m in modules() if len(m.parts) == 1}
    for test in sorted(TESTS.glob("test_*.py")):  # a package's tests live in its folder
        assert test in top_level, f"{test.relative_to(ROOT)} names no top-level module: move it to a folder"
    assert not list((TESTS / "support").glob("test_*.py")), "tests/support/ holds helpers, not tests"


def test_the_layout_checks_see_what_they_check():
    assert expected_tests(Path("extract/decoders/gpu.py")) == TESTS / "extract" / "test_gpu.py"
    assert expected_tests(Path("run.py")) == TESTS / "test_run.py"
    assert Path("media/walk.py") in modules() and Path("cli/group.py") in modules()
