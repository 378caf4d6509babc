"""novelfind: find the most novel photos in a large library.

The Python API (the command line is a shell over it)::

    import novelfind

    result = novelfind.scan("photos", k=20)          # walk, extract (cached), rank: a ScanResult
    for pick in result.picks:
        print(pick.rank, pick.score, pick.path, pick.neighbour)

    ranking = novelfind.rank(result.features, 10, method="knn")   # any (N, M) matrix
    weights = novelfind.ads(result.features, 10).weights          # the paper's Algorithm 1

    with novelfind.Cache.open() as cache:                # the feature cache: info, prune, clear
        print(cache.info())

    novelfind.IgnoreList().add(["photos/IMG_4411.jpg"])  # never picked again (by content)
    novelfind.scan("photos", k=20, xmp=True, ignore_picks=True)  # tag the picks, ignore them next time

Names: :func:`scan`, :class:`ScanResult`, :class:`ScanParameters`, :class:`Pick` (a moment: its photo or
clip, with its :class:`ClipInfo`, its :class:`Member` photos and the :class:`Label` s the model gives
it), :class:`Progress`,
:func:`rank`, :class:`Ranking`, :func:`ads`, :class:`ADSConfig`, :class:`Cache`, :class:`IgnoreList`
(with :class:`Ignored` entries and :class:`IgnoreChange` results), and the exceptions
:class:`NovelfindError` (every error a run can stop with), :class:`InputError` and
:class:`MissingExtraError`. They are imported on first use, so ``import novelfind`` itself is quick.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.5.0"

# public name -> (module, attribute)
_API = {
    "scan": ("novelfind.run", "scan"),
    "ScanResult": ("novelfind.results", "ScanResult"),
    "ScanParameters": ("novelfind.params", "ScanParameters"),
    "Counts": ("novelfind.results", "Counts"),
    "Progress": ("novelfind.results", "Progress"),
    "Pick": ("novelfind.picks", "Pick"),
    "Member": ("novelfind.picks", "Member"),
    "Label": ("novelfind.picks", "Label"),
    "Failure": ("novelfind.picks", "Failure"),
    "ClipInfo": ("novelfind.media.video", "ClipInfo"),
    "rank": ("novelfind.ranking.driver", "rank"),
    "Ranking": ("novelfind.ranking.driver", "Ranking"),
    "ads": ("novelfind.ranking.solver", "ads"),
    "ADSConfig": ("novelfind.ranking.adsconfig", "ADSConfig"),
    "ADSResult": ("novelfind.ranking.solver", "ADSResult"),
    "Cache": ("novelfind.cache", "FeatureCache"),
    "IgnoreList": ("novelfind.media.ignore", "IgnoreList"),
    "Ignored": ("novelfind.media.ignore", "Ignored"),
    "IgnoreChange": ("novelfind.media.ignore", "IgnoreChange"),
    "NovelfindError": ("novelfind.errors", "NovelfindError"),
    "InputError": ("novelfind.errors", "InputError"),
    "MissingExtraError": ("novelfind.errors", "MissingExtraError"),
}

__all__ = [
    "ADSConfig",
    "ADSResult",
    "Cache",
    "ClipInfo",
    "Counts",
    "Failure",
    "IgnoreChange",
    "IgnoreList",
    "Ignored",
    "InputError",
    "Label",
    "Member",
    "MissingExtraError",
    "NovelfindError",
    "Pick",
    "Progress",
    "Ranking",
    "ScanParameters",
    "ScanResult",
    "__version__",
    "ads",
    "rank",
    "scan",
]

if TYPE_CHECKING:  # for type checkers and editors; at run time, __getattr__ below imports on demand
    from novelfind.cache import FeatureCache as Cache
    from novelfind.errors import InputError, MissingExtraError, NovelfindError
    from novelfind.media.ignore import IgnoreChange, Ignored, IgnoreList
    from novelfind.media.video import ClipInfo
    from novelfind.params import ScanParameters
    from novelfind.picks import Failure, Label, Member, Pick
    from novelfind.ranking.adsconfig import ADSConfig
    from novelfind.ranking.driver import Ranking, rank
    from novelfind.ranking.solver import ADSResult, ads
    from novelfind.results import Counts, Progress, ScanResult
    from novelfind.run import scan


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _API[name]
    except KeyError:
        raise AttributeError(f"module 'novelfind' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
