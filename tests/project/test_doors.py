"""Files are opened through the doors, so that a new feature cannot reopen an old hole.

A library file (a photo, clip, RAW file, sidecar, a pick) is read through :mod:`novelfind.base.door`
(no link followed, no FIFO waited on, a bound on what is read); an SQLite file through the store guard
(:mod:`novelfind.cache.guard`); a write through :mod:`novelfind.base.atomic` (descriptors, never names).
This test walks the package's syntax trees and fails on a call that opens or replaces a file by name
anywhere else: ``open``, ``io.open``, ``Path.open``/``read_bytes``/``read_text``, ``Image.open`` or
``av.open`` or ``rawpy.imread`` on a path, ``os.open`` of a path for reading, ``sqlite3.connect``,
``os.replace``/``os.rename`` by name.
What must do one of these is on :data:`ALLOWED` with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "novelfind"

# The doors themselves.
DOORS = {
    "base/door.py": "the library files' door",
    "base/atomic.py": "the writes' door: reads back files novelfind wrote, through descriptors",
    "cache/guard.py": "the stores' door: every SQLite connection",
}

# (module, function) -> why it may open by name.
ALLOWED = {
    ("base/atomic.py", "current_umask"): "the kernel's /proc/self/status, no one else's file",
    ("media/decode.py", "_address_space"): "the kernel's /proc/self/status",
    ("extract/decoders/pillow.py", "_gone"): "the kernel's /proc/PID/stat of a decode worker",
    ("cli/console.py", "redirect_engine_output"): "os.devnull and a dup of stderr, for a quiet run",
    ("cache/recovery.py", "move_aside"): "renames a damaged cache aside in the user's own cache folder",
    ("model/weights.py", "categories"): "the package's own data file (importlib.resources)",
    ("model/weights.py", "_hash_file"): "the weights file (the package's, or one the user named), hashed",
    ("model/weights.py", "read_weights"): "the weights file (the package's, or one the user named)",
    ("outputs/xmp_ledger.py", "_load_ledger"): "renames a damaged record aside in the user's data folder",
}

NAMES = {"open"}
METHODS = {"read_bytes", "read_text", "write_bytes", "write_text"}
PATH_OPENERS = {("Image", "open"), ("av", "open"), ("rawpy", "imread"), ("io", "open")}
ALWAYS = {("sqlite3", "connect"), ("os", "replace"), ("os", "rename")}


def _is_in_memory(arg: ast.expr) -> bool:
    """``io.BytesIO(...)``, or a file object named as one (not a path's name)."""
    if isinstance(arg, ast.Call):
        func = arg.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name == "BytesIO"
    if isinstance(arg, ast.Name):
        return not any(word in arg.id.lower() for word in ("path", "name", "file", "candidate"))
    return False


def _os_open_reads_by_name(call: ast.Call) -> bool:
    """``os.open`` of a path by name that may read it: not relative to a folder's descriptor
    (``dir_fd``), not ``os.devnull``, and not write-only (a lock file's pid cleared)."""
    if any(k.arg == "dir_fd" for k in call.keywords) or not call.args:
        return False
    if ast.unparse(call.args[0]) == "os.devnull":
        return False
    flags = ast.unparse(call.args[1]) if len(call.args) > 1 else ""
    return not ("O_WRONLY" in flags and "O_RDWR" not in flags)


def _opens_by_name(call: ast.Call) -> str | None:
    """What the call is when it opens or replaces a file by name, else None."""
    func = call.func
    if isinstance(func, ast.Name) and func.id in NAMES:
        return f"{func.id}()"
    if not isinstance(func, ast.Attribute):
        return None
    owner = func.value.id if isinstance(func.value, ast.Name) else None
    if (owner, func.attr) == ("os", "open"):
        return "os.open() of a path for reading" if _os_open_reads_by_name(call) else None
    if (owner, func.attr) in ALWAYS:
        relative = any(k.arg and k.arg.endswith("dir_fd") for k in call.keywords)
        if func.attr in ("replace", "rename") and relative:
            return None  # relative to folder descriptors
        first = call.args[0] if call.args else None
        if func.attr == "connect" and isinstance(first, ast.Constant) and first.value == ":memory:":
            return None  # no file at all
        return f"{owner}.{func.attr}()"
    if (owner, func.attr) in PATH_OPENERS:
        if call.args and _is_in_memory(call.args[0]):
            return None
        return f"{owner}.{func.attr}() on a path"
    if func.attr in METHODS and owner != "atomic":  # atomic.write_bytes is the writes' door
        return f".{func.attr}()"
    if func.attr == "open" and isinstance(func.value, ast.Call):
        inner = func.value.func
        if getattr(inner, "id", None) == "Path":
            return "Path(...).open()"
    return None


def _findings(module: Path) -> list[tuple[str, int, str]]:
    rel = str(module.relative_to(PACKAGE))
    tree = ast.parse(module.read_text(encoding="utf-8"))
    found = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else function
            if isinstance(child, ast.Call):
                what = _opens_by_name(child)
                if what is not None and (rel, function) not in ALLOWED:
                    found.append((function, child.lineno, what))
            visit(child, name)

    visit(tree, "<module>")
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if str(p.relative_to(PACKAGE)) not in DOORS)


@pytest.mark.parametrize("module", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_opens_a_file_by_name_outside_the_doors(module):
    found = _findings(module)
    assert not found, (
        f"novelfind/{module.relative_to(PACKAGE)} opens files by name: "
        + "; ".join(f"{what} in {fn} (line {line})" for fn, line, what in found)
        + ". Read library files through novelfind.base.door, SQLite files through novelfind.cache.guard, "
        "write through novelfind.base.atomic; or add the function to ALLOWED with its reason."
    )


def test_every_allowed_exception_still_exists():
    """An entry on the allow-list names a function that still opens by name: a stale entry would let the
    next one in unseen."""
    stale = []
    for module, function in ALLOWED:
        path = PACKAGE / module
        if not path.exists():
            stale.append((module, function))
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function]
        calls = [c for d in defs for c in ast.walk(d) if isinstance(c, ast.Call) and _opens_by_name(c)]
        if not calls:
            stale.append((module, function))
    assert not stale, f"allow-list entries that no longer open anything by name: {stale}"


@pytest.mark.parametrize(
    "source, flagged",
    [
        ("open(path)", True),
        ("Path(p).read_bytes()", True),
        ("self.path.read_text()", True),
        ("Path(p).open('rb')", True),
        ("Image.open(path)", True),
        ("Image.open(io.BytesIO(data))", False),
        ("Image.open(handle)", False),
        ("av.open(os.fspath(path))", True),
        ("rawpy.imread(io.BytesIO(data))", False),
        ("sqlite3.connect(p)", True),
        ("sqlite3.connect(':memory:')", False),
        ("os.replace(a, b)", True),
        ("os.replace(a, b, src_dir_fd=d, dst_dir_fd=d)", False),
        ("os.fdopen(fd, 'rb')", False),
        ("os.open(path, os.O_RDONLY | os.O_NONBLOCK)", True),
        ("os.open(path, flags)", True),
        ("os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)", True),
        ("os.open(name, os.O_RDONLY, dir_fd=parent)", False),
        ("os.open(os.devnull, os.O_WRONLY)", False),
        ("os.open(self.path, os.O_WRONLY | os.O_NOFOLLOW)", False),
        ("FeatureCache.open(p)", False),
    ],
)
def test_the_check_tells_a_read_by_name_from_one_through_a_descriptor(source, flagged):
    call = ast.parse(source).body[0].value
    assert (_opens_by_name(call) is not None) == flagged
