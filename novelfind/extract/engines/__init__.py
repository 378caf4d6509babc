"""The engines of the extraction stage, by name (``ENGINES``): where decoding and the model run.

- ``local`` (``local.extract``): this machine;
- ``ray`` (``ray.extract``): the workers of a Ray cluster (``pip install 'novelfind[ray]'``).

An engine is a function with ``local.extract``'s signature plus the keywords its record names; it drives
a ``stage.Stage`` as ``local.extract`` does, so lookups, commits, checks and callbacks are the same. Its
:class:`Engine` record says what it needs from the scan and which of the engine-dependent settings it
uses, so the scan asks the record, never the name.
The functions are named as "module:attribute" strings, imported only when chosen, so an engine's
dependencies (Ray, say) stay optional; a record added here is a valid ``engine`` at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Engine:
    """One extraction engine: its function and what it takes from the scan's parameters."""

    target: str  # "module:attribute" of the function
    # scan parameter -> the keyword the function takes it as (beyond those every engine takes)
    takes: Mapping[str, str] = field(default_factory=dict)
    # decoding and the model run on workers of the engine's own machinery, elsewhere: they run the model
    # on ``device``, the scan keeps a CPU model for its name, the solver takes this machine's best device,
    # and what the machinery prints in this process goes to stderr (``cli``)
    remote: bool = False
    # the scan parameters it uses of those only some engines use (``engine_settings()``): a scan refuses a
    # value given for one its engine ignores (``novelfind.params``), rather than ignore it in silence
    settings: frozenset[str] = frozenset()


ENGINES: dict[str, Engine] = {
    "local": Engine(
        "novelfind.extract.engines.local:extract",
        {"decode_timeout": "decode_timeout"},
        settings=frozenset({"workers", "decoder", "decode_timeout"}),
    ),
    "ray": Engine(
        "novelfind.extract.engines.ray:extract",
        {"ray_address": "address", "device": "device"},
        remote=True,
        settings=frozenset({"ray_address"}),  # its workers decode with Pillow, as many as the cluster runs
    ),
}


def engine_settings() -> frozenset[str]:
    """The scan parameters only some engines use: those any ``ENGINES`` record names."""
    return frozenset().union(*(e.settings for e in ENGINES.values()))
