"""The parameters of a scan, declared once: name, type, default, limits or choices, doc and command line.

Each field of :class:`ScanParameters` carries in its ``metadata`` what every other place needs: the
API doc (``scan()``'s docstring is made from it), the command line's help text and flags (``cli/scan.py``
makes the ``scan`` command's options from the fields, with Click range types from the limits and
the environment variable ``NOVELFIND_<NAME>``), the numeric limit or the named choices (checked here,
so a notebook gets the command line's errors as :class:`~novelfind.errors.InputError`), and whether
the parameter goes into the run record of the JSON formats. A new option is one field here, plus
its line in ``docs/options.md`` and in ``configs/default.toml``.
"""

from __future__ import annotations

import dataclasses
import inspect
import numbers
import os
from collections.abc import Callable, Collection
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from novelfind.base.devices import DEVICES
from novelfind.base.limits import Limit
from novelfind.base.signature import fields_doc, fields_signature
from novelfind.base.since import since_value
from novelfind.cache import DEFAULT_DTYPE, DTYPES, FeatureCache
from novelfind.errors import InputError, NeedsError, ParameterError
from novelfind.extract.decoders import DECODERS
from novelfind.extract.decoders.pillow import DECODE_TIMEOUT_S
from novelfind.extract.engines import ENGINES, engine_settings
from novelfind.model.features import BACKENDS
from novelfind.model.weights import FEATURE_DIMS
from novelfind.outputs.contact_sheet import CONTACT_SHEET_FORMATS
from novelfind.outputs.formats import FORMATS
from novelfind.outputs.placement import PLACE_MODES
from novelfind.outputs.xmp import DEFAULT_KEYWORD as DEFAULT_XMP_KEYWORD
from novelfind.outputs.xmp import check_keyword
from novelfind.ranking.adsconfig import ADS_LIMITS, ADSConfig
from novelfind.ranking.driver import DEFAULT_DEDUP
from novelfind.ranking.methods import DEFAULT_METHOD, METHODS, features_help, method_settings, methods_help

ADS = ADSConfig()  # the solver's defaults: the scan's ADS parameters default to them


def param(
    default: Any,
    doc: str,
    *,
    help: str | None = None,
    flags: tuple[str, ...] = (),
    limit: Limit | None = None,
    choices: Collection[str] | None = None,
    metavar: str | None = None,
    folder: bool = False,
    record: bool = False,
    group: str | None = None,
    needs: tuple[str, Any] | None = None,
) -> Any:
    """One parameter: its default and everything said about it.

    ``doc``: what ``scan()``'s docstring says. ``help``: the ``scan`` command's help text (None: the
    parameter has no command-line option). ``flags``: the option's names (default ``--name-with-dashes``).
    ``limit`` / ``choices``: the allowed values, checked by :class:`ScanParameters` and shown by
    ``--help``. ``metavar``: the value's name in ``--help``. ``folder``: a path that names a folder.
    ``record``: part of the run record of the JSON formats (``docs/output-schema.md``). ``group``: the
    section of ``novelfind scan --help`` the option is listed in (``cli.scan.OPTION_GROUPS``). ``needs``:
    (another parameter, its value) without which this one takes no effect, so a value other than the
    default is refused there (``NeedsError``) rather than silently unused.
    """
    metadata = {
        "doc": doc,
        "help": help,
        "flags": flags,
        "limit": limit,
        "choices": choices,
        "metavar": metavar,
        "folder": folder,
        "record": record,
        "group": group,
        "needs": needs,
    }
    return field(default=default, metadata=metadata)


def _ads_param(name: str, symbol: str, doc: str, help: str, group: str = "solver") -> Any:
    """A setting of the ADS solver as a parameter: its default and its limit are ``ADSConfig``'s, and
    ``doc``'s ``{range}`` says the limit in words (``symbol`` names the value there)."""
    limit = ADS_LIMITS[name]
    return param(
        getattr(ADS, name),
        doc.format(range=limit.describe(symbol)),
        help=help,
        limit=limit,
        record=True,
        group=group,
    )


@dataclass(frozen=True)
class ScanParameters:
    """Everything a scan is asked to do: the keyword arguments of :func:`novelfind.scan`, checked.

    Creating one checks every value (InputError naming the parameter) and normalises the types:
    paths become :class:`~pathlib.Path` objects and sequences tuples. The defaults of the ADS
    solver's settings are the paper's (:class:`novelfind.ranking.solver.ADSConfig`). The field order is the
    order of ``scan()``'s keywords and of the command line's options.
    """

    paths: tuple[Path, ...] = param(
        dataclasses.MISSING,
        "a folder or image file, or several. Hidden files and folders are skipped.",
        record=True,
    )
    k: int = param(
        100,
        "how many photos to pick (at least 1); more than there are ranks them all.",
        help="How many novel photos to pick.",
        flags=("-k", "--k"),
        limit=Limit(1),
        record=True,
        group="ranking",
    )
    _: KW_ONLY
    # ranking
    method: str = param(
        DEFAULT_METHOD,
        f"{methods_help(code=True)}. See :func:`novelfind.rank`.",
        help=f"Ranking: {methods_help()}.",
        choices=METHODS,
        record=True,
        group="ranking",
    )
    feature: str = param(
        "auto",
        f'``"auto"`` (default: the one the method was chosen on, {features_help()}), ``"logits"`` '
        '(1000-d classifier output) or ``"pooled"`` (1280-d pooled features). The run record names the '
        "one used.",
        help=f"MobileNet-V2 output used as the feature vector (auto: {features_help()}).",
        choices=("auto", *FEATURE_DIMS),
        record=True,
        group="ranking",
    )
    epochs: int = _ads_param("epochs", "E", "the ADS solver's SGD steps E ({range}).", "ADS: SGD steps E.")
    partners: int = _ads_param(
        "partners",
        "J",
        "the ADS solver's partners J sampled per image per step ({range}).",
        "ADS: partners sampled per image per step J.",
    )
    lr: float = _ads_param(
        "lr", "alpha", "the ADS solver's learning rate alpha ({range}).", "ADS: learning rate alpha."
    )
    momentum: float = _ads_param(
        "momentum", "beta", "the ADS solver's momentum beta ({range}).", "ADS: momentum beta."
    )
    seed: int = _ads_param(
        "seed",
        "seed",
        "the ADS solver's random seed ({range}): the same seed on the same device, the same ranking.",
        "ADS: random seed; the same seed gives the same ranking on the same device.",
        group="ranking",
    )
    restarts: int = _ads_param(
        "restarts",
        "restarts",
        "average the solver over this many seeds ({range}).",
        "ADS: average this many runs with different seeds.",
    )
    dedup: float = param(
        DEFAULT_DEDUP,
        "the link radius of moments: photos linked by steps shorter than this (distance between "
        "L2-normalised features) are one moment, one pick with the others as its members "
        "(near-duplicates, burst frames; ``docs/moments.md``); 0 makes every photo its own moment.",
        help="Moment link radius: photos linked by steps shorter than this (distance between "
        "L2-normalised features) are one pick, the others its members; 0 disables.",
        limit=Limit(0),
        record=True,
        group="ranking",
    )
    min_score: float | None = param(
        None,
        "keep only the picks that score at least this (None: every pick, up to ``k``). The scale is the "
        "method's (``docs/ranking.md``): for ``cosine-knn`` a mean distance between unit vectors, 0 to "
        "2. A run where no photo reaches it picks nothing: a weekly run without ``output`` then prints "
        "nothing, so cron mails only the weeks with an odd photo.",
        help="Keep only picks scoring at least SCORE (the method's scale, docs/ranking.md; cosine-knn: "
        "0-2). No pick reaches it: no output, exit code 0.",
        limit=Limit(),
        metavar="SCORE",
        record=True,
        group="ranking",
    )
    # extraction
    batch_size: int = param(
        32,
        "images per batch, decoded, featurised and committed to the cache together (1-4096).",
        help="Images per batch: decoded, featurised and committed to the cache together.",
        limit=Limit(1, 4096),
        group="performance",
    )
    workers: int | None = param(
        None,
        "decoding processes (0-256; None: one per core, or one for fewer than 16 new files; 0: one).",
        help="Decoding processes; 0 = one (default: one per CPU core, one for a few new files).",
        limit=Limit(0, 256),
        group="performance",
    )
    decode_timeout: float = param(
        DECODE_TIMEOUT_S,
        "seconds a decoding process may spend on one file (> 0); past that it is stopped and the file "
        "reported as unreadable. Every Pillow or PyAV decode runs in such a process (also with "
        "``workers`` 0, the GPU decoder's fallback, and the thumbnails of the report and the contact "
        "sheet), so the limit holds for each. Not used by other engines than the local one.",
        help="Seconds a decoding process may spend on one file before it is stopped and the file "
        "reported as unreadable.",
        limit=Limit(0, low_open=True),
        metavar="SECONDS",
        group="performance",
    )
    max_decode_pixels: int | None = param(
        None,
        "pixels one decode may hold (1 or more; None: half the machine's memory shared among the decode "
        "workers and the scanning process, at most 268 million); a larger image is refused from its "
        "header, before it is decoded, and reported as unreadable.",
        help="Pixels one decode may hold; larger images are refused before decoding (default: from the "
        "machine's memory and the decode workers).",
        limit=Limit(1),
        metavar="PIXELS",
        record=True,
        group="performance",
    )
    device: str = param(
        "auto",
        '``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``; the model and the '
        "solver run there.",
        help="Where the model and the solver run; auto = CUDA when available.",
        choices=DEVICES,
        group="performance",
    )
    backend: str = param(
        "auto",
        '``"auto"`` (the fastest available for the device), ``"torch"`` or ``"onnx"``.',
        help="Inference engine; auto = the fastest available for the device.",
        choices=BACKENDS,
        group="performance",
    )
    engine: str = param(
        "local",
        'where decoding and the model run: ``"local"`` (this machine) or ``"ray"`` (the workers of a '
        "Ray cluster, ``pip install 'novelfind[ray]'``; the photos must be at the same path on every "
        "node); see ``novelfind.extract.engines.ENGINES``. Walking, the cache and the ranking stay on this "
        'machine either way. With ``"ray"``, ``device`` picks the workers\' device (``auto``: GPU '
        "workers when the cluster has GPUs) and the solver runs here, on CUDA when this machine has it "
        '(unless ``device`` is ``"cpu"``).',
        help="Where decoding and the model run: local (this machine) or ray (the workers of a Ray "
        "cluster; pip install 'novelfind[ray]'). The cache and the ranking stay here.",
        choices=ENGINES,  # the registry itself: an engine added at run time is accepted
        group="cluster",
    )
    ray_address: str | None = param(
        None,
        'the Ray cluster for ``engine="ray"``: None starts Ray on this machine for the scan, ``"auto"`` '
        'joins the cluster this machine belongs to (``ray start`` was run here), ``"HOST:PORT"`` the '
        "cluster whose head listens there (``ray://HOST:PORT`` through Ray Client). Not used by the "
        "local engine.",
        help="The Ray cluster for --engine ray: auto joins the cluster this machine is part of, HOST:PORT "
        "the head node at that address (default: start Ray on this machine for the scan).",
        metavar="auto|HOST:PORT",
        group="cluster",
        needs=("engine", "ray"),
    )
    weights: Path | None = param(
        None,
        "the MobileNet-V2 weights file; None searches the usual places.",
        help="MobileNet-V2 weights file (mobilenet_v2-b0353104.pth).",
        group="performance",
    )
    decoder: str = param(
        "auto",
        'what decodes the photos: ``"auto"`` (JPEGs on the GPU when the model runs on CUDA and '
        'nvImageCodec is installed, else Pillow), ``"pillow"`` or ``"gpu"``; see '
        "``novelfind.extract.decoders.DECODERS``.",
        choices=DECODERS,  # the registry itself, as ENGINES
    )
    cache: bool | Path | FeatureCache = param(
        True,
        "True for the user's feature cache (``~/.cache/novelfind/features.sqlite`` or "
        "``$NOVELFIND_CACHE``), False for none, a path to a cache file, or a :class:`novelfind.Cache` "
        "(its file and its dtype are used). A cache that cannot be opened is reported through "
        "``on_warning`` and the scan runs without one.",
        help="Feature cache file (default: the user cache folder).",
        group="cache",
    )
    cache_dtype: str = param(
        DEFAULT_DTYPE,
        'how new vectors are stored: ``"float32"`` (default, 4 KB per photo of logits) or '
        '``"float16"`` (half that; rankings on the benchmark sets kept their picks, see '
        "``docs/cache.md``). A cache may hold both; each vector is read back as it was stored.",
        help="How new vectors are stored in the cache: float16 halves its size (docs/cache.md).",
        choices=tuple(DTYPES),
        group="cache",
    )
    # walking
    exclude: tuple[str, ...] = param(
        (),
        'glob patterns of files and folders to skip (``"*.png"``, ``"**/thumbs/**"``).',
        help="Skip paths matching GLOB (repeatable; NOVELFIND_EXCLUDE takes several, space-separated).",
        metavar="GLOB",
        group="input",
    )
    follow_symlinks: bool = param(
        False,
        "follow symbolic links to files and folders (loops are detected).",
        help="Follow symbolic links to files and folders (loops are detected).",
        group="input",
    )
    since: datetime | None = param(
        None,
        "rank only photos taken at or after this time (their capture date when known, else their "
        "file time; ``docs/dates.md``), against the whole library: a datetime (naive: local time) or "
        'the text the command line takes (``"7d"``, ``"yesterday"``, ``"2026-01-01"``).',
        help="Rank only photos taken since DATE (the capture date, else the file time), against the whole "
        "library. DATE: 7d, 2w, 36h (ago), today, yesterday (from midnight), 2026-01-01, "
        "2026-01-01T10:00:00 (local time), or with an offset: 2026-01-01T10:00:00Z, ...+02:00.",
        metavar="DATE",
        record=True,
        group="input",
    )
    # outputs
    format: str = param(
        "tsv",
        'the format of ``output`` and of :meth:`ScanResult.to_text` (``"tsv"``, ``"json"``, '
        '``"jsonl"``, ``"csv"``, ``"paths"``, ``"paths0"``, ``"members"`` (every photo of every pick\'s '
        'moment), ``"members0"``: ``docs/output-schema.md``; ``paths0`` and ``members0`` are the exact '
        "ones, for ``xargs -0``).",
        help="Result format on stdout or in -o.",
        choices=FORMATS,
        group="outputs",
    )
    output: Path | None = param(
        None,
        "write the results to this file, atomically, in ``format``.",
        help="Write results to FILE (atomically) instead of stdout.",
        flags=("-o", "--output"),
        group="outputs",
    )
    copy_to: Path | None = param(
        None,
        "put the picks in this folder as ``001_name.jpg``, ... (by ``link``); earlier picks placed "
        "there by novelfind are replaced.",
        help="Put the picks in DIR as 001_name.jpg, 002_...",
        folder=True,
        group="outputs",
    )
    link: str = param(
        "copy",
        'how ``copy_to`` places the picks: ``"copy"``, ``"symlink"`` or ``"hardlink"``.',
        help="How --copy-to places the picks.",
        choices=PLACE_MODES,
        group="outputs",
    )
    copy_members: bool = param(
        False,
        "``copy_to`` also places the other photos of each pick's moment, as ``001m01_name.jpg``, ... "
        "(nearest first); otherwise the results list names them (``members``).",
        help="With --copy-to, also place each pick's moment members as 001m01_name.jpg, ...",
        group="outputs",
    )
    report: Path | None = param(
        None,
        "write a self-contained HTML report of the picks to this file.",
        help="Write a self-contained HTML report of the picks.",
        group="outputs",
    )
    contact_sheet: Path | None = param(
        None,
        "write a grid of the picks to this .jpg, .png or .webp file.",
        help="Write a grid of the picks with their ranks (.jpg, .png or .webp).",
        group="outputs",
    )
    shared_outputs: bool = param(
        False,
        "give ``output``, ``report`` and ``contact_sheet`` mode ``0644`` (readable by everyone), less the "
        "umask, instead of ``0600`` (the user alone): for outputs others are meant to read.",
        help="Make -o, --report and --contact-sheet readable by everyone (0644 less the umask; default "
        "0600: you alone).",
        group="outputs",
    )
    xmp: bool = param(
        False,
        "write the picks into the photos' XMP sidecars (``NAME.EXT.xmp``, or an existing ``NAME.xmp``), "
        "the members of each pick's moment too: ``xmp_keyword``, the rank and the score; earlier picks "
        "under ``paths`` that are no longer picked lose what novelfind wrote. Needs ``pip install "
        "'novelfind[xmp]'`` (``MissingExtraError`` otherwise). A sidecar that cannot be read or "
        "written is reported through ``on_warning`` and "
        "in ``ScanResult.sidecars``; the photos themselves are never written.",
        help="Write the picks into the photos' XMP sidecars (a keyword, the rank and score) for digiKam, "
        "darktable, Lightroom; earlier picks no longer picked lose what novelfind wrote. The photos "
        "are never written. Needs pip install 'novelfind[xmp]'.",
        group="workflow",
    )
    xmp_keyword: str = param(
        DEFAULT_XMP_KEYWORD,
        'the keyword ``xmp`` writes (default ``"novel"``; ``"Picks|novel"`` is hierarchical).',
        help="The keyword --xmp writes; 'Picks|novel' is a hierarchical one.",
        metavar="TEXT",
        group="workflow",
        needs=("xmp", True),
    )
    # the ignore list
    ignore_file: Path | None = param(
        None,
        "the ignore list (default: ``ignored.json`` in the user data folder, or "
        "``$NOVELFIND_IGNORE_FILE``); see :class:`novelfind.IgnoreList`.",
        help="The ignore list (default: ignored.json in the user data folder).",
        record=True,
        group="workflow",
    )
    ignore_picks: bool = param(
        False,
        "after writing the outputs, put this run's picks and the members of their moments on the "
        "ignore list, so that the next run shows other photos.",
        help="After writing the results, add the picks and their moments' members to the ignore list: "
        "the next run shows others.",
        group="workflow",
    )
    include_ignored: bool = param(
        False,
        "let the photos on the ignore list be picked again. Otherwise they are never picked, but still "
        "ranked with the rest: they keep making their neighbours look ordinary.",
        help="Let photos on the ignore list be picked again (otherwise they are ranked but never picked).",
        record=True,
        group="workflow",
    )
    wait: bool = param(
        True,
        "when another run writes the same outputs, wait for it (True) or raise LockedError.",
        help="When another run writes the same outputs: wait for it, or exit with code 4.",
        flags=("--wait/--no-wait",),
        group="outputs",
    )

    def __post_init__(self) -> None:
        paths = [self.paths] if isinstance(self.paths, (str, os.PathLike)) else list(self.paths)
        if not paths:
            raise InputError("paths must name at least one folder or image")
        self._set("paths", tuple(Path(p).expanduser() for p in paths))
        exclude = [self.exclude] if isinstance(self.exclude, str) else list(self.exclude)
        self._set("exclude", tuple(str(e) for e in exclude))
        for f in FIELDS:
            value = getattr(self, f.name)
            if f.type == "Path | None" and value is not None:  # "~/x" from a config file or the API
                self._set(f.name, Path(value).expanduser())
            elif f.type in ("int", "int | None") and value is not None:
                if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                    raise InputError(f"{f.name} must be a whole number, got {value!r}")
            elif f.type == "float":
                if isinstance(value, bool) or not isinstance(value, numbers.Real):
                    raise InputError(f"{f.name} must be a number, got {value!r}")
                self._set(f.name, float(value))
        if self.feature == "auto" and self.method in METHODS:
            self._set("feature", METHODS[self.method].feature)
        if not isinstance(self.cache, (bool, FeatureCache)):
            self._set("cache", Path(self.cache).expanduser())
        for name, limit in LIMITS.items():
            value = getattr(self, name)
            if value is not None:
                limit.check(name, value)
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            numbered_gpu = name == "device" and isinstance(value, str) and value.startswith("cuda:")
            if value not in allowed and not numbered_gpu:
                raise InputError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        if self.ray_address is not None and not isinstance(self.ray_address, str):
            raise InputError(f"ray_address must be a string (auto, HOST:PORT), got {self.ray_address!r}")
        self._set("since", since_value(self.since))
        sheet = self.contact_sheet
        if sheet is not None and sheet.suffix.lower() not in CONTACT_SHEET_FORMATS:
            raise ParameterError("contact_sheet", f"contact sheet {sheet}: use a .jpg, .png or .webp name")
        try:
            check_keyword(self.xmp_keyword)
        except ValueError as err:
            raise InputError(f"xmp_keyword: {err}") from None
        for name in conditional():
            if getattr(self, name) != DEFAULTS[name]:
                unused = ignored(name, lambda n: getattr(self, n))
                if unused is not None:
                    raise unused

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def solver_config(self) -> ADSConfig:
        """The ADS solver's settings of this scan (``novelfind.ranking.solver.ADSConfig``)."""
        return ADSConfig(**{name: getattr(self, name) for name in ADS_LIMITS if name in LIMITS})

    def outputs(self) -> list[Path]:
        """What this run writes, absolute and sorted (the order their locks are taken in)."""
        targets = (self.output, self.copy_to, self.report, self.contact_sheet)
        return sorted({t.absolute() for t in targets if t is not None})

    def record(self) -> dict[str, Any]:
        """The parameters in the run record of the JSON formats, as JSON values, in field order."""
        return {f.name: _json_value(getattr(self, f.name)) for f in FIELDS if f.metadata["record"]}


def _json_value(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


FIELDS: tuple[dataclasses.Field, ...] = dataclasses.fields(ScanParameters)

# The numeric limits and the named choices, by parameter: ScanParameters checks them, the command line
# shows them in --help. Engines and decoders are the registries themselves.
LIMITS: dict[str, Limit] = {f.name: f.metadata["limit"] for f in FIELDS if f.metadata["limit"]}
CHOICES: dict[str, Collection[str]] = {
    f.name: f.metadata["choices"] for f in FIELDS if f.metadata["choices"] is not None
}
# parameter -> (the parameter it takes effect with, that one's value)
NEEDS: dict[str, tuple[str, Any]] = {f.name: f.metadata["needs"] for f in FIELDS if f.metadata["needs"]}
DEFAULTS: dict[str, Any] = {f.name: f.default for f in FIELDS}


def takes_effect(name: str, value_of: Callable[[str], Any]) -> bool:
    """Whether the parameter ``name`` of ``NEEDS`` takes effect with the others' values (``value_of``).
    One the engine needs takes effect with every engine whose record takes it (``Engine.takes``: an
    engine added at run time may take ``ray_address`` too)."""
    other, value = NEEDS[name]
    if other == "engine":
        engine = ENGINES.get(value_of("engine"))
        return engine is not None and name in engine.takes
    return value_of(other) == value


# What some engine ignores but an output uses with every engine: set, they give the parameter effect
# (the report's and the contact sheet's thumbnails are decoded here, under the decode time limit).
ENGINE_FREE_WITH: dict[str, tuple[str, ...]] = {"decode_timeout": ("report", "contact_sheet")}


def conditional() -> frozenset[str]:
    """The parameters that take effect only with certain values of others: those of ``NEEDS``, those
    only some methods use (``Method.settings``) and those only some engines use (``Engine.settings``)."""
    return frozenset(NEEDS) | method_settings() | engine_settings()


def ignored(name: str, value_of: Callable[[str], Any]) -> NeedsError | None:
    """Why the parameter ``name`` of ``conditional()`` takes no effect with the others' values
    (``value_of``): the error a value given for it raises; None where it takes effect. A setting is
    refused rather than left unused in silence, as the method's or engine's record says it is."""
    if name in NEEDS:
        return None if takes_effect(name, value_of) else NeedsError(name, *NEEDS[name])
    for kind, registry in (("method", METHODS), ("engine", ENGINES)):
        chosen = value_of(kind)
        record = registry.get(chosen)
        users = tuple(n for n, r in registry.items() if name in r.settings)
        if record is None or not users or name in record.settings:
            continue
        also = ENGINE_FREE_WITH.get(name, ()) if kind == "engine" else ()
        if not any(value_of(a) is not None for a in also):
            return NeedsError(name, kind, users, chosen=chosen, also=also)
    return None


def parameter_defaults() -> dict[str, Any]:
    """Each parameter's default, for the command line's options (so the two never disagree)."""
    return {name: default for name, default in DEFAULTS.items() if name != "paths"}


def describe(indent: str = "        ") -> str:
    """The ``Args:`` entries of ``scan()``'s docstring, one per parameter, from the fields' docs."""
    return fields_doc(FIELDS, indent)


# What scan() accepts where a parameter is stored normalised (paths as Path objects, sequences as tuples)
_ACCEPTS = {
    "tuple[Path, ...]": "str | os.PathLike[str] | Iterable[str | os.PathLike[str]]",
    "tuple[str, ...]": "str | Iterable[str]",
    "Path | None": "str | os.PathLike[str] | None",
    "bool | Path | FeatureCache": "bool | str | os.PathLike[str] | FeatureCache",
}


def scan_signature(extra: list[inspect.Parameter], returns: str) -> inspect.Signature:
    """The signature of a function taking the parameters as keywords (``paths`` and ``k`` also by
    position), then ``extra``: what ``help(novelfind.scan)`` and editors show."""
    return fields_signature(FIELDS, extra, returns, positional=("paths", "k"), accepts=_ACCEPTS)
