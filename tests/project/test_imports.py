"""Imports run one way: every module imports alone, and no two modules import each other.

The graph is read from the source with ``ast``: every ``import`` (at the top, inside a function, under
``TYPE_CHECKING``) and every ``"novelfind.module:attribute"`` string (the registries ``DECODERS`` and
``ENGINES`` in ``novelfind.extract``, which are imported when chosen) is an edge; the subpackages'
modules are modules like the others. The package itself (``__init__``) is left out as a target:
Python imports it before any of its modules, it imports none of them while it loads (its API is
imported on first use), so ``from novelfind import __version__`` cannot close a cycle.
"""

from __future__ import annotations

import ast
import graphlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import novelfind

PACKAGE = Path(novelfind.__file__).resolve().parent
REPO = PACKAGE.parent
REGISTRY_ENTRY = re.compile(r"(novelfind(?:\.\w+)+):\w+")


def _name(path: Path, package: Path) -> str:
    """``extract/decoders/gpu.py`` -> ``novelfind.extract.decoders.gpu``; a package's ``__init__.py`` is
    the package."""
    parts = path.relative_to(package).with_suffix("").parts
    return ".".join(("novelfind", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def module_names(package: Path = PACKAGE) -> list[str]:
    return sorted(_name(path, package) for path in package.rglob("*.py"))


def _module_of(name: str, modules: set[str]) -> str | None:
    """The package module ``name`` is or lies in (``novelfind.x.attr`` -> ``novelfind.x``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(path: Path, name: str, modules: set[str]) -> set[str]:
    """The package modules the file at ``path`` (module ``name``) imports or names in a registry string."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    found: set[str | None] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(_module_of(alias.name, modules) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:  # `from novelfind import run` imports the module novelfind.run
                found.add(_module_of(f"{base}.{alias.name}", modules) or _module_of(base, modules))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = REGISTRY_ENTRY.fullmatch(node.value)
            if match:
                found.add(_module_of(match.group(1), modules))
    return {m for m in found if m is not None and m != name and m != "novelfind"}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    modules = set(module_names(package))
    graph = {}
    for path in package.rglob("*.py"):
        name = _name(path, package)
        graph[name] = imports_of(path, name, modules)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph as a path (first and last the same module), or None."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as err:
        return list(err.args[1])
    return None


def test_the_graph_sees_registry_strings_function_imports_and_from_package_imports(tmp_path):
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "a.py").write_text('ENGINES = {"x": "novelfind.b:run"}\n')
    (tmp_path / "b.py").write_text("def run():\n    from novelfind import c\n")
    (tmp_path / "c.py").write_text("from novelfind.a import ENGINES\nimport novelfind\n")
    graph = import_graph(tmp_path)
    assert graph == {
        "novelfind": set(),
        "novelfind.a": {"novelfind.b"},
        "novelfind.b": {"novelfind.c"},
        "novelfind.c": {"novelfind.a"},
    }
    cycle = find_cycle(graph)
    assert (
        cycle is not None
        and cycle[0] == cycle[-1]
        and set(cycle) == {"novelfind.a", "novelfind.b", "novelfind.c"}
    )


def test_no_import_cycle_in_the_package():
    graph = import_graph()
    assert "novelfind.extract.stage" in graph["novelfind.run"]  # the graph is read, not empty
    # the registries' strings are edges
    assert "novelfind.extract.decoders.gpu" in graph["novelfind.extract.decoders"]
    assert "novelfind.extract.engines.ray" in graph["novelfind.extract.engines"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize("module", module_names())
def test_every_module_imports_alone(module):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
