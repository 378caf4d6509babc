"""Where novelfind keeps its files: every user folder is decided here, and only here.

platformdirs knows each platform's convention: the XDG base directories on Linux (``~/.cache``,
``~/.config``, ``~/.local/share``; a relative ``$XDG_CACHE_HOME``, ``$XDG_CONFIG_HOME`` or
``$XDG_DATA_HOME`` is ignored, as the XDG spec requires), ``~/Library`` on macOS, ``%LOCALAPPDATA%`` on
Windows. Each file novelfind keeps can be moved by its own environment variable, named below.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP = "novelfind"

CACHE_ENV = "NOVELFIND_CACHE"
CONFIG_ENV = "NOVELFIND_CONFIG"
MODEL_CACHE_ENV = "NOVELFIND_MODEL_CACHE"
IGNORE_FILE_ENV = "NOVELFIND_IGNORE_FILE"
SIDECAR_RECORD_ENV = "NOVELFIND_SIDECAR_RECORD"


def _from_env(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value).expanduser() if value else None


def cache_dir() -> Path:
    """novelfind's user cache folder: ``~/.cache/novelfind`` on Linux."""
    return platformdirs.user_cache_path(APP)


def config_dir() -> Path:
    """novelfind's user config folder: ``~/.config/novelfind`` on Linux."""
    return platformdirs.user_config_path(APP)


def user_data_dir() -> Path:
    """novelfind's user data folder (what the user made, not cache: ``novelfind cache clear`` leaves
    it): ``~/.local/share/novelfind`` on Linux."""
    return platformdirs.user_data_path(APP)


def feature_cache_path() -> Path:
    """The feature cache: ``$NOVELFIND_CACHE``, else ``features.sqlite`` in :func:`cache_dir`."""
    return _from_env(CACHE_ENV) or cache_dir() / "features.sqlite"


def config_path() -> Path | None:
    """The config file used when none is named: ``$NOVELFIND_CONFIG`` if set, else
    ``config.toml`` in :func:`config_dir` when that file exists, else None."""
    explicit = _from_env(CONFIG_ENV)
    if explicit is not None:
        return explicit
    candidate = config_dir() / "config.toml"
    return candidate if candidate.is_file() else None


def model_dir() -> Path:
    """Exported ONNX graphs and the weights' hash record: ``$NOVELFIND_MODEL_CACHE``, else ``models`` in
    :func:`cache_dir`."""
    return _from_env(MODEL_CACHE_ENV) or cache_dir() / "models"


def ignore_list_path() -> Path:
    """The ignore list: ``$NOVELFIND_IGNORE_FILE``, else ``ignored.json`` in :func:`user_data_dir`."""
    return _from_env(IGNORE_FILE_ENV) or user_data_dir() / "ignored.json"


def sidecar_record_path() -> Path:
    """The record of the XMP sidecars novelfind has tagged: ``$NOVELFIND_SIDECAR_RECORD``, else
    ``sidecars.json`` in :func:`user_data_dir`."""
    return _from_env(SIDECAR_RECORD_ENV) or user_data_dir() / "sidecars.json"


def lock_dir() -> Path:
    """Lock files of the outputs being written (never next to the outputs themselves)."""
    return cache_dir() / "locks"


def torch_hub_checkpoints() -> Path:
    """Where torch keeps downloaded weights, by torch's own rule (``torch.hub.get_dir()``), worked out
    without importing torch: ``$TORCH_HOME/hub/checkpoints``, ``$TORCH_HOME`` defaulting to
    ``$XDG_CACHE_HOME/torch`` or ``~/.cache/torch``."""
    xdg_cache = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    torch_home = os.environ.get("TORCH_HOME") or os.path.join(xdg_cache, "torch")
    return Path(os.path.expanduser(torch_home)) / "hub" / "checkpoints"
