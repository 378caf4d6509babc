"""The optional extras (pillow-heif, rawpy, python-exiv2, onnxruntime, nvImageCodec): is one there?

Each is imported the first time it is needed, never when novelfind is imported, and asked only once per
process. :func:`load` imports a module and remembers the module or the error; a broken install (a wheel
whose shared library is missing raises OSError, not ImportError) counts as absent, and its error is
raised again on every later call, so the message a user sees names the real cause. :func:`installed`
asks only whether a module can be found, for extras too heavy to import just to ask (onnxruntime,
nvImageCodec): their import, and its failures, come where they are used. (Ray is not asked about: the
Ray engine imports it when it connects, and a missing Ray is that call's error.)
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from types import ModuleType

_lock = threading.RLock()  # an extra whose import asks about another one takes it again
_loaded: dict[str, ModuleType | Exception] = {}  # module name -> the module, or why it did not import


def load(module: str) -> ModuleType:
    """``module`` imported (once per process). Raises what its first import raised, every time."""
    found = _loaded.get(module)
    if found is None:
        with _lock:
            found = _loaded.get(module)
            if found is None:
                try:
                    found = importlib.import_module(module)
                except Exception as err:  # noqa: BLE001 - ImportError, or OSError from a missing library, ...
                    found = err
                _loaded[module] = found
    if isinstance(found, Exception):
        raise found.with_traceback(None)
    return found


def available(module: str) -> bool:
    """Whether ``module`` imports (:func:`load` succeeds); imports it the first time it is asked."""
    try:
        load(module)
    except Exception:  # noqa: BLE001 - any failure of an optional import means "absent"
        return False
    return True


def installed(module: str) -> bool:
    """Whether ``module`` can be found, without importing it (a dotted name imports its parents)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
