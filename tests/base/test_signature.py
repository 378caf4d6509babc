"""A signature and the ``Args:`` entries made from a dataclass's fields, on their own."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

from novelfind.base.signature import fields_doc, fields_signature


@dataclasses.dataclass
class Settings:
    paths: tuple[Path, ...] = dataclasses.field(metadata={"doc": "the folders to look in."})
    k: int = dataclasses.field(default=10, metadata={"doc": "how many to pick."})
    note: str = dataclasses.field(
        default="",
        metadata={"doc": "a long explanation " + "that keeps going " * 12 + "to the end, with-hyphen-words."},
    )


FIELDS = dataclasses.fields(Settings)
EXTRA = [
    inspect.Parameter("on_progress", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="Callable")
]


def test_each_field_gives_an_indented_entry_wrapped_under_its_name():
    doc = fields_doc(FIELDS[:2])
    assert doc == "        paths: the folders to look in.\n        k: how many to pick."
    long = fields_doc(FIELDS[2:], indent="  ").splitlines()
    assert long[0].startswith("  note: a long explanation")
    assert len(long) > 1 and all(line.startswith("      ") for line in long[1:])  # four more than indent
    assert all(len(line) <= 106 for line in long)
    assert any("with-hyphen-words." in line for line in long)  # never broken at a hyphen
    assert fields_doc([]) == ""


def test_the_fields_are_keywords_with_their_defaults_then_the_extra_parameters():
    sig = fields_signature(FIELDS, EXTRA, "Result")
    assert list(sig.parameters) == ["paths", "k", "note", "on_progress"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in sig.parameters.values())
    assert sig.parameters["paths"].default is inspect.Parameter.empty  # no default: required
    assert sig.parameters["k"].default == 10 and sig.parameters["note"].default == ""
    assert sig.parameters["on_progress"] is EXTRA[0]
    assert sig.return_annotation == "Result"


def test_named_fields_are_also_positional_and_bind_like_a_call():
    sig = fields_signature(FIELDS, EXTRA, "Result", positional=("paths", "k"))
    kinds = {name: p.kind for name, p in sig.parameters.items()}
    assert kinds["paths"] is kinds["k"] is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert kinds["note"] is inspect.Parameter.KEYWORD_ONLY
    assert sig.bind("/photos", 3, note="x").arguments == {"paths": "/photos", "k": 3, "note": "x"}
    assert str(sig).startswith("(paths: 'tuple[Path, ...]', k: 'int' = 10, *, note: 'str' = ''")


def test_a_type_stored_normalised_shows_what_a_caller_may_pass():
    accepts = {"tuple[Path, ...]": "str | PathLike[str] | Iterable[str | PathLike[str]]"}
    sig = fields_signature(FIELDS, [], "None", accepts=accepts)
    assert sig.parameters["paths"].annotation == accepts["tuple[Path, ...]"]
    assert sig.parameters["k"].annotation == "int"  # a type not named is shown as it is
