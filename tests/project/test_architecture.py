"""The module map of ``docs/development.md`` matches the tree: every module of the package is on it, and it
names no module that is not there. The module list is read from the tree, so the test holds whatever the
layout (flat modules or packages)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "novelfind"
# a map line naming an entry: two spaces, a module or a package folder, then its description
ENTRY = re.compile(r"^  (?P<name>[A-Za-z_]\w*(?:\.py|/))(?:\s+(?P<text>.*))?$")
NAMED = re.compile(r"(?<![\w./-])([A-Za-z_]\w*(?:\.py|/))(?![\w/])")


def module_map(text: str) -> dict[str, str]:
    """The map's entries (``cli.py``, ``cache/``) with their descriptions, continuation lines joined."""
    block = re.search(r"^```\nnovelfind/\n(.*?)^(?:\S|```)", text, re.S | re.M)
    assert block is not None, "docs/development.md has no module map (a ``` block starting novelfind/)"
    entries: dict[str, str] = {}
    last = None
    for line in block.group(1).splitlines():
        match = ENTRY.match(line)
        if match:
            last = match.group("name")
            assert last not in entries, f"the module map lists {last} twice"
            entries[last] = match.group("text") or ""
        elif line.strip() and last is not None:
            entries[last] += " " + line.strip()
    return entries


def tree() -> dict[str, set[str]]:
    """Each top-level entry of the package (``cli.py``, ``cache/``) with the module files and folders
    under it (``store.py``, ``decoders/``) for a package."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if len(rel.parts) == 1:
            found[rel.name] = set()
            continue
        inside = found.setdefault(rel.parts[0] + "/", set())
        inside.update(part + "/" for part in rel.parts[1:-1])
        if rel.name != "__init__.py":
            inside.add(rel.name)
    return found


def test_the_module_map_reader_sees_entries_continuations_and_named_modules():
    text = (
        "```\nnovelfind/\n  cli.py        the command line\n  cache/        the store: schema.py (tables),\n"
        "                store.py (FeatureCache)\nconfigs/        default.toml\n```\n"
    )
    entries = module_map(text)
    assert entries == {
        "cli.py": "the command line",
        "cache/": "the store: schema.py (tables), store.py (FeatureCache)",
    }
    assert set(NAMED.findall(entries["cache/"])) == {"schema.py", "store.py"}


def test_the_module_map_names_every_module_and_no_missing_one():
    entries = module_map((ROOT / "docs" / "development.md").read_text())
    modules = tree()
    assert sorted(set(modules) - set(entries)) == [], "modules missing from docs/development.md's map"
    assert sorted(set(entries) - set(modules)) == [], "docs/development.md's map names missing modules"
    for package, inside in modules.items():
        if not package.endswith("/"):
            continue
        named = set(NAMED.findall(entries[package]))
        assert sorted(inside - named) == [], f"docs/development.md's {package} entry does not name these"
        assert sorted(named - inside) == [], f"docs/development.md's {package} entry names missing modules"


def test_the_architecture_doc_names_only_modules_that_exist():
    """``novelfind/x.py`` and ``novelfind.x`` in docs/architecture.md name real modules or packages."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    for path in set(re.findall(r"novelfind/((?:\w+/)*\w+\.py)", text)):
        assert (PACKAGE / path).exists(), f"docs/architecture.md names novelfind/{path}, which does not exist"
    for dotted in set(re.findall(r"`novelfind((?:\.\w+)+)", text)):
        parts = dotted.strip(".").split(".")
        # the longest prefix that is a module or package; the rest are attributes
        known = [
            n
            for n in range(1, len(parts) + 1)
            if (PACKAGE.joinpath(*parts[:n]).with_suffix(".py")).exists()
            or (PACKAGE.joinpath(*parts[:n]) / "__init__.py").exists()
        ]
        assert known or parts[0] in _public_api(), f"docs/architecture.md names novelfind{dotted}"


def _public_api() -> set[str]:
    import novelfind

    return set(novelfind.__all__)
