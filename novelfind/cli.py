"""The command line: parse, check, call the library, print.

stdout carries results only. Warnings, progress and the summary go to stderr; ``-q`` leaves only
errors and unreadable files there. Exit codes live in :mod:`novelfind.errors`.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import click
import numpy as np

from novelfind import __version__
from novelfind.config import default_config_path, read_config, to_default_map
from novelfind.errors import (
    CacheError,
    ExitCode,
    InputError,
    Interrupted,
    LockedError,
    NovelfindError,
    OutputError,
)

EXIT_CODES_HELP = """\b
Exit codes:
  0    success, every file read
  1    error: nothing could be ranked (no images, weights missing, output not writable)
  2    usage: bad option, missing folder, unknown config key
  3    finished, but some files could not be read (each named on stderr)
  4    another run holds the lock on the same output (with --no-wait)
  130  interrupted (Ctrl-C, SIGTERM); finished batches stay in the cache
"""

FORMATS = ("tsv", "json", "jsonl", "csv", "paths", "paths0")
LINK_MODES = ("copy", "symlink", "hardlink")


class NovelfindGroup(click.Group):
    """A group whose errors are one line on stderr and a documented exit code, in every mode."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):  # noqa: D102
        try:
            code = super().main(
                args=args, prog_name=prog_name or "novelfind", complete_var=complete_var,
                standalone_mode=False, **extra,
            )
            code = int(code or 0)
        except NovelfindError as err:
            click.echo(f"error: {err}", err=True)
            code = int(err.exit_code)
        except click.UsageError as err:
            click.echo(f"error: {err.format_message()}", err=True)
            code = int(ExitCode.USAGE)
        except click.ClickException as err:
            click.echo(f"error: {err.format_message()}", err=True)
            code = int(err.exit_code)
        except click.exceptions.Abort:
            click.echo("interrupted", err=True)
            code = int(ExitCode.INTERRUPTED)
        except Exception as err:  # a bug: still one line, the traceback only on request
            if os.environ.get("NOVELFIND_DEBUG"):
                raise
            click.echo(f"error: internal error: {type(err).__name__}: {err} (set NOVELFIND_DEBUG=1 for "
                       "the traceback)", err=True)
            code = int(ExitCode.ERROR)
        if standalone_mode:
            sys.exit(code)
        return code


def _env(name: str) -> str:
    return "NOVELFIND_" + name.upper()


def _load_config(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Eager callback: read the config file into Click's default_map before other options parse."""
    path = Path(value) if value else default_config_path()
    if path is None:
        return value
    data = read_config(path)
    ctx.default_map = {**(ctx.default_map or {}), **to_default_map(ctx.command, data, path)}
    return str(path)


@click.group(cls=NovelfindGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="novelfind", message="%(prog)s %(version)s")
def cli() -> None:
    """Find the most novel photos in a large library.

    \b
    Examples:
      novelfind scan ~/Pictures --k 100
      novelfind scan ~/Pictures --k 20 --report novel.html --copy-to ~/novel
      novelfind cache info
    """


# --- scan ----------------------------------------------------------------------------------------


@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path), is_eager=True,
              expose_value=False, callback=_load_config, envvar="NOVELFIND_CONFIG",
              help="TOML file of defaults for these options (keys: the long option names).")
@click.option("--k", "k", type=int, default=100, show_default=True, envvar=_env("k"),
              help="How many novel photos to pick.")
@click.option("--method", type=click.Choice(["ads", "ads-paper", "knn"]), default="ads", show_default=True,
              envvar=_env("method"),
              help="Ranking: ads (default, whitened ADS), ads-paper (Algorithm 1 as published), "
                   "knn (distance to nearest neighbours).")
@click.option("--feature", type=click.Choice(["logits", "pooled"]), default="logits", show_default=True,
              envvar=_env("feature"), help="MobileNet-V2 output used as the feature vector.")
@click.option("--epochs", type=int, default=20, show_default=True, envvar=_env("epochs"),
              help="ADS: SGD steps E.")
@click.option("--partners", type=int, default=16, show_default=True, envvar=_env("partners"),
              help="ADS: partners sampled per image per step J.")
@click.option("--lr", type=float, default=0.001, show_default=True, envvar=_env("lr"),
              help="ADS: learning rate alpha.")
@click.option("--momentum", type=float, default=0.9, show_default=True, envvar=_env("momentum"),
              help="ADS: momentum beta.")
@click.option("--seed", type=int, default=0, show_default=True, envvar=_env("seed"),
              help="Random seed; the same seed gives the same ranking on the same device.")
@click.option("--restarts", type=int, default=1, show_default=True, envvar=_env("restarts"),
              help="ADS: average this many runs with different seeds.")
@click.option("--dedup", type=float, default=None, envvar=_env("dedup"),
              help="Near-duplicate threshold: a pick this close to a better one (distance between "
                   "L2-normalised features) is replaced by the next candidate; 0 disables [default: 0.15].")
@click.option("--batch-size", type=int, default=32, show_default=True, envvar=_env("batch_size"),
              help="Images per batch: decoded, featurised and committed to the cache together.")
@click.option("--workers", type=int, default=None, envvar=_env("workers"),
              help="Decoding processes (default: chosen from the CPU count).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              envvar=_env("device"), help="Where the model and the solver run; auto = CUDA when available.")
@click.option("--backend", type=click.Choice(["auto", "torch", "onnx"]), default="auto", show_default=True,
              envvar=_env("backend"), help="Inference engine; auto = the fastest available for the device.")
@click.option("--weights", type=click.Path(dir_okay=False, path_type=Path), default=None,
              envvar=_env("weights"), help="MobileNet-V2 weights file (mobilenet_v2-b0353104.pth).")
@click.option("--cache", "cache_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              envvar=_env("cache"), help="Feature cache file (default: the user cache folder).")
@click.option("--no-cache", is_flag=True, default=False, envvar=_env("no_cache"),
              help="Neither read nor write the feature cache (wins over a cache set in the environment "
                   "or a config file).")
@click.option("--exclude", multiple=True, metavar="GLOB", envvar=_env("exclude"),
              help="Skip paths matching GLOB (repeatable; NOVELFIND_EXCLUDE takes several, space-separated).")
@click.option("--follow-symlinks", is_flag=True, default=False, envvar=_env("follow_symlinks"),
              help="Follow symbolic links to files and folders (loops are detected).")
@click.option("--since", type=click.DateTime(["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"]),
              default=None, envvar=_env("since"), metavar="DATE",
              help="Rank only photos modified since DATE, against the whole library.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="tsv", show_default=True,
              envvar=_env("format"), help="Result format on stdout or in -o.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              envvar=_env("output"), help="Write results to FILE (atomically) instead of stdout.")
@click.option("--copy-to", type=click.Path(file_okay=False, path_type=Path), default=None,
              envvar=_env("copy_to"), help="Put the picks in DIR as 001_name.jpg, 002_...")
@click.option("--link", type=click.Choice(LINK_MODES), default="copy", show_default=True, envvar=_env("link"),
              help="How --copy-to places the picks.")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path), default=None,
              envvar=_env("report"), help="Write a self-contained HTML report of the picks.")
@click.option("--contact-sheet", type=click.Path(dir_okay=False, path_type=Path), default=None,
              envvar=_env("contact_sheet"),
              help="Write a grid of the picks with their ranks (.jpg, .png or .webp).")
@click.option("--wait/--no-wait", default=True, show_default=True, envvar=_env("wait"),
              help="When another run writes the same outputs: wait for it, or exit with code 4.")
@click.option("-q", "--quiet", is_flag=True, default=False, envvar=_env("quiet"),
              help="Print nothing on stderr but errors and unreadable files.")
def scan(paths: tuple[Path, ...], **opts: Any) -> int:
    """Rank the most novel photos under PATHS.

    \b
    Examples:
      novelfind scan ~/Pictures --k 100
      novelfind scan /srv/photos --k 50 --format json -o novel.json -q
      novelfind scan ~/Pictures --k 20 --copy-to ~/novel --link symlink
      novelfind scan ~/Pictures --since 2026-01-01 --report new.html
    """
    ctx = click.get_current_context()
    if opts["no_cache"] and opts["cache_path"] is not None:
        if ctx.get_parameter_source("cache_path") == click.core.ParameterSource.COMMANDLINE:
            raise InputError("--cache and --no-cache contradict each other")
        opts["cache_path"] = None
    options = ScanOptions.from_click(paths, opts)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return run_scan(options)
    except KeyboardInterrupt:
        raise Interrupted("interrupted; finished batches are kept in the cache") from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@dataclass
class ScanOptions:
    """Everything ``scan`` was asked to do, checked."""

    paths: tuple[Path, ...]
    k: int
    method: str
    feature: str
    epochs: int
    partners: int
    lr: float
    momentum: float
    seed: int
    restarts: int
    dedup: float | None
    batch_size: int
    workers: int | None
    device: str
    backend: str
    weights: Path | None
    cache_path: Path | None
    no_cache: bool
    exclude: tuple[str, ...]
    follow_symlinks: bool
    since: datetime | None
    fmt: str
    output: Path | None
    copy_to: Path | None
    link: str
    report: Path | None
    contact_sheet: Path | None
    wait: bool
    quiet: bool

    @classmethod
    def from_click(cls, paths: tuple[Path, ...], opts: dict[str, Any]) -> ScanOptions:
        options = cls(paths=paths, **opts)
        options.check()
        return options

    def check(self) -> None:
        """Reject impossible values with the option name and the value given."""
        _at_least("--k", self.k, 1)
        _at_least("--epochs", self.epochs, 1)
        _at_least("--partners", self.partners, 1)
        _at_least("--restarts", self.restarts, 1)
        _at_least("--seed", self.seed, 0)
        _at_most("--restarts", self.restarts, 1000)
        _at_least("--batch-size", self.batch_size, 1)
        _at_most("--batch-size", self.batch_size, 4096)
        _at_most("--epochs", self.epochs, 100_000)
        _at_most("--partners", self.partners, 100_000)
        if self.workers is not None:
            _at_least("--workers", self.workers, 0)
            _at_most("--workers", self.workers, 256)
        if not (self.lr > 0 and self.lr < float("inf")):
            raise InputError(f"--lr must be a positive number, got {self.lr}")
        if not (0 <= self.momentum < 1):
            raise InputError(f"--momentum must be in [0, 1), got {self.momentum}")
        if self.dedup is not None and not (0 <= self.dedup < float("inf")):
            raise InputError(f"--dedup must be a non-negative number, got {self.dedup}")


def _at_least(name: str, value: int, low: int) -> None:
    if value < low:
        raise InputError(f"{name} must be at least {low}, got {value}")


def _at_most(name: str, value: int, high: int) -> None:
    if value > high:
        raise InputError(f"{name} must be at most {high}, got {value}")


class Console:
    """stderr messages; -q leaves only errors and unreadable files."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def unreadable(self, path: Path, reason: str) -> None:
        """A file that could not be read: always reported, once."""
        click.echo(f"warning: cannot read {path}: {reason}", err=True)

    def warn(self, message: str) -> None:
        if not self.quiet:
            click.echo(f"warning: {message}", err=True)

    @contextmanager
    def capturing(self) -> Iterator[None]:
        """Route Python warnings and the package's log records through :meth:`warn`, one line each."""
        import logging
        import warnings

        console = self

        class Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                console.warn(record.getMessage())

        def show(message, category, filename, lineno, file=None, line=None) -> None:
            console.warn(str(message))

        logger = logging.getLogger("novelfind")
        handler = Handler(logging.WARNING)
        logger.addHandler(handler)
        propagate, logger.propagate = logger.propagate, False
        previous = warnings.showwarning
        warnings.showwarning = show
        try:
            yield
        finally:
            warnings.showwarning = previous
            logger.removeHandler(handler)
            logger.propagate = propagate

    def note(self, message: str) -> None:
        if not self.quiet:
            click.echo(f"note: {message}", err=True)

    def info(self, message: str) -> None:
        if not self.quiet:
            click.echo(message, err=True)

    @property
    def progress(self) -> bool:
        """Progress bars only for a person watching: not with -q and not into a file or pipe."""
        return not self.quiet and sys.stderr.isatty()


def run_scan(opt: ScanOptions) -> int:
    """The whole scan: walk, extract (cached), rank, write. Returns the exit code."""
    from novelfind import report
    from novelfind.features import build_extractor
    from novelfind.pipeline import extract
    from novelfind.ranking import rank
    from novelfind.solver import ADSConfig
    from novelfind.walk import walk

    started = time.monotonic()
    console = Console(opt.quiet)
    _check_output_targets(opt)

    with ExitStack() as stack:
        stack.enter_context(console.capturing())
        for target in _own_outputs(opt):
            stack.enter_context(_output_lock(target, wait=opt.wait, console=console))

        walk_errors: list[tuple[Path, str]] = []

        def on_walk_error(path: Path, reason: str) -> None:
            walk_errors.append((Path(path), reason))
            console.unreadable(path, reason)

        outputs = OwnOutputs(_own_outputs(opt))
        files = [f for f in walk(opt.paths, exclude=opt.exclude, follow_symlinks=opt.follow_symlinks,
                                 on_error=on_walk_error)
                 if not outputs.contains(f.path)]
        if not files:
            where = ", ".join(str(p) for p in opt.paths)
            raise NovelfindError(f"no images found in {where}")

        extractor = build_extractor(feature=opt.feature, device=opt.device, backend=opt.backend,
                                    weights=opt.weights)
        cache = stack.enter_context(_open_cache(opt, extractor.model_key, console))

        extraction = extract(files, extractor, cache, batch_size=opt.batch_size, workers=opt.workers,
                             progress=console.progress, on_failure=console.unreadable,
                             on_warning=console.warn)
        failures = walk_errors + list(extraction.failures)
        n = len(extraction.files)
        if n == 0:
            raise NovelfindError(f"none of the {len(files)} images could be read")

        candidates = _candidates(extraction.files, opt.since)
        if not candidates:
            console.note(f"no photos modified since {opt.since:%Y-%m-%d %H:%M:%S}; nothing to rank")
        if candidates and opt.k > len(candidates):
            console.note(f"--k {opt.k} is more than the {len(candidates)} images to rank; "
                         "ranking all of them")

        config = ADSConfig(epochs=opt.epochs, partners=opt.partners, lr=opt.lr, momentum=opt.momentum,
                           seed=opt.seed, restarts=opt.restarts)
        picks: list[report.Pick] = []
        ranking = None
        if candidates:
            # With --since the whole library is scored; the picks are the best of the recent photos.
            try:
                ranking = rank(extraction.features, opt.k, method=opt.method, config=config, dedup=opt.dedup,
                               device=_solver_device(opt.device),
                               candidates=None if opt.since is None else np.asarray(candidates))
            except ValueError as err:  # e.g. a learning rate so large that the weights overflow
                raise InputError(f"cannot rank with these settings: {err}") from None
            picks = _picks(ranking, extraction.files)

        run = _run_record(opt, len(files), extraction, failures, time.monotonic() - started, ranking)
        text = report.format_results(picks, opt.fmt, failures=failures, run=run)
        if opt.output is not None:
            report.write_atomic(opt.output, text)
        else:
            _write_stdout(report.encode_output(text))
        if opt.copy_to is not None:  # with no picks, this removes the picks of an earlier run
            report.place_picks(picks, opt.copy_to, mode=opt.link)
        if opt.report is not None:
            row_of = {f.path: i for i, f in enumerate(extraction.files)}
            pick_rows = [row_of[p.path] for p in picks]
            report.write_html_report(opt.report, picks, points2d=report.pca_2d(extraction.features),
                                     pick_indices=pick_rows, run=run, failures=failures,
                                     paths=[f.path for f in extraction.files])
        if opt.contact_sheet is not None:
            report.write_contact_sheet(opt.contact_sheet, picks)

        console.info(_summary(len(files), extraction, failures, time.monotonic() - started))
    return int(ExitCode.PARTIAL if failures else ExitCode.OK)


def _write_stdout(data: bytes) -> None:
    """Results to stdout. A reader that stops early (``| head``) is not an error: the rest is dropped."""
    if sys.stdout is None:  # started with stdout closed
        return
    try:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
        os.close(devnull)


def _check_output_targets(opt: ScanOptions) -> None:
    """Fail before the slow part when an output cannot possibly be written (exit 1), or is misnamed (2)."""
    sheet = opt.contact_sheet
    if sheet is not None and sheet.suffix.lower() not in (".jpg", ".jpeg", ".png", ".webp"):
        raise InputError(f"--contact-sheet {opt.contact_sheet}: use a .jpg, .png or .webp name")
    targets = (("-o", opt.output), ("--report", opt.report), ("--contact-sheet", opt.contact_sheet))
    for name, target in targets:
        if target is None:
            continue
        parent = target.parent if str(target.parent) else Path(".")
        if target.is_dir():
            raise OutputError(f"{name} {target} is a folder")
        if not parent.is_dir():
            raise OutputError(f"{name}: folder {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise OutputError(f"{name}: folder {parent} is not writable")
    if opt.copy_to is not None:
        if opt.copy_to.exists() and not opt.copy_to.is_dir():
            raise OutputError(f"--copy-to {opt.copy_to} is not a folder")
        existing = opt.copy_to.absolute()
        while not existing.exists() and existing.parent != existing:
            existing = existing.parent
        if not existing.is_dir():
            raise OutputError(f"--copy-to {opt.copy_to}: {existing} is not a folder")
        if not os.access(existing, os.W_OK):
            raise OutputError(f"--copy-to {opt.copy_to}: {existing} is not writable")


def _own_outputs(opt: ScanOptions) -> list[Path]:
    """What this run writes, absolute and sorted (the order locks are taken in)."""
    targets = [opt.output, opt.copy_to, opt.report, opt.contact_sheet]
    return sorted({t.absolute() for t in targets if t is not None})


class OwnOutputs:
    """Files novelfind wrote are never ranked as photos: this run's outputs, and any folder of picks
    placed by --copy-to (marked by its manifest)."""

    def __init__(self, targets: list[Path]) -> None:
        self.targets = targets
        self._picks_folder: dict[Path, bool] = {}

    def contains(self, path: Path) -> bool:
        if any(path == t or t in path.parents for t in self.targets):
            return True
        folder = path.parent
        if folder not in self._picks_folder:
            from novelfind.report import MANIFEST_NAME

            self._picks_folder[folder] = (folder / MANIFEST_NAME).is_file()
        return self._picks_folder[folder]


def output_lock_path(target: Path) -> Path:
    """The lock file guarding one output path (in the user cache folder, never next to the output)."""
    from novelfind.cache import default_cache_path

    digest = hashlib.sha1(str(target.absolute()).encode()).hexdigest()[:16]
    return default_cache_path().parent / "locks" / f"{digest}.lock"


@contextmanager
def _output_lock(target: Path, *, wait: bool, console: Console) -> Iterator[None]:
    """Hold a lock on one output so two runs writing it never interleave."""
    from novelfind.lock import RunLock

    path = output_lock_path(target)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        console.warn(f"cannot create lock folder {path.parent} ({err.strerror}); running without a lock")
        yield
        return
    lock = RunLock(path, wait=False, label=str(target))
    try:
        lock.acquire()
    except LockedError:
        if not wait:
            raise
        console.note(f"waiting for another novelfind run writing {target}")
        lock = RunLock(path, wait=True, label=str(target))
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


@contextmanager
def _open_cache(opt: ScanOptions, model_key: str, console: Console) -> Iterator[Any]:
    from novelfind.cache import FeatureCache, NullCache, default_cache_path

    if opt.no_cache:
        yield NullCache()
        return
    path = opt.cache_path or default_cache_path()
    try:
        cache = FeatureCache(path, model_key, on_warning=console.warn)
    except CacheError as err:
        console.warn(f"{err}; running without the cache")
        yield NullCache()
        return
    try:
        yield cache
    finally:
        cache.close()


def _candidates(files: list, since: datetime | None) -> list[int]:
    if since is None:
        return list(range(len(files)))
    cutoff_ns = int(since.timestamp() * 1e9)
    return [i for i, f in enumerate(files) if f.mtime_ns >= cutoff_ns]


def _solver_device(device: str) -> str:
    """The solver runs where the model ran: auto means CUDA when available."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _picks(ranking: Any, files: list) -> list:
    from novelfind.report import Pick

    picks = []
    for index, score, neighbour, distance in zip(ranking.indices, ranking.scores, ranking.neighbour,
                                                 ranking.distance, strict=True):
        f = files[int(index)]
        found = int(neighbour) >= 0
        picks.append(Pick(
            rank=len(picks) + 1, score=float(score), path=f.path, size=f.size, mtime_ns=f.mtime_ns,
            neighbour=files[int(neighbour)].path if found else None,
            distance=float(distance) if found else None,
        ))
    return picks


def _run_record(opt: ScanOptions, found: int, extraction: Any, failures: list, seconds: float,
                ranking: Any) -> dict[str, Any]:
    return {
        "version": __version__,
        "paths": [str(p) for p in opt.paths],
        "k": opt.k,
        "method": opt.method,
        "feature": opt.feature,
        "epochs": opt.epochs,
        "partners": opt.partners,
        "lr": opt.lr,
        "momentum": opt.momentum,
        "seed": opt.seed,
        "restarts": opt.restarts,
        "dedup": _effective_dedup(opt.dedup),
        "since": opt.since.isoformat() if opt.since else None,
        "images_found": found,
        "from_cache": extraction.from_cache,
        "extracted": extraction.extracted,
        "failed": len(failures),
        "duplicates_dropped": int(getattr(ranking, "duplicates_dropped", 0) or 0),
        "seconds": round(seconds, 3),
    }


def _effective_dedup(dedup: float | None) -> float:
    from novelfind.ranking import DEFAULT_DEDUP

    return DEFAULT_DEDUP if dedup is None else dedup


def _summary(found: int, extraction: Any, failures: list, seconds: float) -> str:
    return (f"{found} images found, {extraction.from_cache} read from cache, "
            f"{extraction.extracted} extracted, {len(failures)} failed, {seconds:.1f} s")


# --- cache ---------------------------------------------------------------------------------------

cache_option = click.option("--cache", "cache_path", type=click.Path(dir_okay=False, path_type=Path),
                            default=None, envvar=_env("cache"),
                            help="Feature cache file (default: the user cache folder).")


@cli.group()
def cache() -> None:
    """Inspect and tidy the feature cache.

    \b
    Examples:
      novelfind cache info
      novelfind cache prune --cache /srv/novelfind.sqlite
      novelfind cache clear
    """


def _existing_cache(path: Path | None) -> Any:
    """The cache a scan would use: --cache, $NOVELFIND_CACHE, the config file's ``cache``, the default."""
    from novelfind.cache import FeatureCache, default_cache_path
    from novelfind.config import configured_cache

    path = path or configured_cache(scan) or default_cache_path()
    if not path.exists():
        raise NovelfindError(f"no cache at {path}")
    return FeatureCache(path, model_key=None)


@cache.command("info")
@cache_option
def cache_info(cache_path: Path | None) -> int:
    """Show entries, size and models of the cache.

    \b
    Example:
      novelfind cache info --cache ~/.cache/novelfind/features.sqlite
    """
    with _existing_cache(cache_path) as store:
        info = store.info()
    click.echo(f"path\t{info['path']}")
    click.echo(f"vectors\t{info['entries']}")
    click.echo(f"files\t{info['files']}")
    click.echo(f"bytes\t{info['size_bytes']}")
    for key, count in sorted(info["models"].items()):
        click.echo(f"model\t{key}\t{count}")
    return 0


@cache.command("prune")
@cache_option
def cache_prune(cache_path: Path | None) -> int:
    """Drop entries whose files no longer exist.

    \b
    Example:
      novelfind cache prune
    """
    with _existing_cache(cache_path) as store:
        dropped = store.prune()
    click.echo(f"pruned\t{dropped}")
    return 0


@cache.command("clear")
@cache_option
def cache_clear(cache_path: Path | None) -> int:
    """Delete every entry in the cache.

    \b
    Example:
      novelfind cache clear
    """
    with _existing_cache(cache_path) as store:
        store.clear()
    click.echo("cleared")
    return 0


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name="novelfind")
