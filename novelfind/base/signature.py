"""A function's signature and the ``Args:`` entries of its docstring, made from a dataclass's fields.

A function that takes a dataclass's fields as keywords (``novelfind.scan`` takes ``ScanParameters``')
shows them in ``help()`` and editors as if written out: each field's default, its type as the caller
may pass it, and its ``doc`` metadata as the docstring's entry.
"""

from __future__ import annotations

import dataclasses
import inspect
import textwrap
from collections.abc import Iterable, Mapping


def fields_doc(fields: Iterable[dataclasses.Field], indent: str = "        ") -> str:
    """One ``name: doc`` entry per field, wrapped, from each field's ``doc`` metadata."""
    return "\n".join(
        textwrap.fill(
            f"{f.name}: {f.metadata['doc']}",
            width=106,
            initial_indent=indent,
            subsequent_indent=indent + "    ",
            break_on_hyphens=False,
        )
        for f in fields
    )


def fields_signature(
    fields: Iterable[dataclasses.Field],
    extra: list[inspect.Parameter],
    returns: str,
    *,
    positional: tuple[str, ...] = (),
    accepts: Mapping[str, str] | None = None,
) -> inspect.Signature:
    """The signature of a function taking the fields as keywords (those named in ``positional`` also by
    position), then ``extra``. ``accepts``: the annotation shown for a field type stored normalised
    (a ``tuple[Path, ...]`` field that takes any iterable of path-likes)."""
    accepts = accepts or {}
    parameters = [
        inspect.Parameter(
            f.name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD
            if f.name in positional
            else inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default,
            annotation=accepts.get(f.type, f.type),
        )
        for f in fields
    ]
    return inspect.Signature(parameters + extra, return_annotation=returns)
