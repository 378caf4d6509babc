"""User folders: one module decides them all, with the XDG rules applied the same way to each."""

from __future__ import annotations

import pytest

from novelfind.base import dirs


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "TORCH_HOME", "NOVELFIND_MODEL_CACHE"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


def test_defaults_under_home(home):
    assert dirs.feature_cache_path() == home / ".cache" / "novelfind" / "features.sqlite"
    assert dirs.model_dir() == home / ".cache" / "novelfind" / "models"
    assert dirs.lock_dir() == home / ".cache" / "novelfind" / "locks"
    assert dirs.config_dir() == home / ".config" / "novelfind"
    assert dirs.user_data_dir() == home / ".local" / "share" / "novelfind"
    assert dirs.ignore_list_path() == home / ".local" / "share" / "novelfind" / "ignored.json"
    assert dirs.sidecar_record_path() == home / ".local" / "share" / "novelfind" / "sidecars.json"
    assert dirs.torch_hub_checkpoints() == home / ".cache" / "torch" / "hub" / "checkpoints"
    assert dirs.config_path() is None  # no file there


def test_absolute_xdg_folders_are_used(home, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xc"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xg"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xd"))
    assert dirs.ignore_list_path() == tmp_path / "xd" / "novelfind" / "ignored.json"
    assert dirs.sidecar_record_path() == tmp_path / "xd" / "novelfind" / "sidecars.json"
    assert dirs.feature_cache_path() == tmp_path / "xc" / "novelfind" / "features.sqlite"
    assert dirs.model_dir() == tmp_path / "xc" / "novelfind" / "models"
    assert dirs.lock_dir() == tmp_path / "xc" / "novelfind" / "locks"
    assert dirs.torch_hub_checkpoints() == tmp_path / "xc" / "torch" / "hub" / "checkpoints"
    config = tmp_path / "xg" / "novelfind" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("k = 1\n")
    assert dirs.config_path() == config


@pytest.mark.parametrize("relative", ["relative/ignored", "~/tilde-is-not-absolute", "."])
def test_relative_xdg_folders_are_ignored_everywhere(home, monkeypatch, relative):
    """The XDG spec: a relative path in these variables is invalid and must be ignored."""
    monkeypatch.setenv("XDG_CACHE_HOME", relative)
    monkeypatch.setenv("XDG_CONFIG_HOME", relative)
    monkeypatch.setenv("XDG_DATA_HOME", relative)
    assert dirs.user_data_dir() == home / ".local" / "share" / "novelfind"
    assert dirs.feature_cache_path() == home / ".cache" / "novelfind" / "features.sqlite"
    assert dirs.model_dir() == home / ".cache" / "novelfind" / "models"
    assert dirs.lock_dir() == home / ".cache" / "novelfind" / "locks"
    assert dirs.config_dir() == home / ".config" / "novelfind"


def test_environment_overrides(home, tmp_path, monkeypatch):
    monkeypatch.setenv("NOVELFIND_CACHE", str(tmp_path / "mine.sqlite"))
    monkeypatch.setenv("NOVELFIND_MODEL_CACHE", "~/models")
    monkeypatch.setenv("NOVELFIND_CONFIG", str(tmp_path / "absent.toml"))  # named: used even if missing
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setenv("NOVELFIND_IGNORE_FILE", str(tmp_path / "keep-out.json"))
    monkeypatch.setenv("NOVELFIND_SIDECAR_RECORD", str(tmp_path / "tagged.json"))
    assert dirs.ignore_list_path() == tmp_path / "keep-out.json"
    assert dirs.sidecar_record_path() == tmp_path / "tagged.json"
    assert dirs.feature_cache_path() == tmp_path / "mine.sqlite"
    assert dirs.model_dir() == home / "models"
    assert dirs.config_path() == tmp_path / "absent.toml"
    assert dirs.torch_hub_checkpoints() == tmp_path / "torch" / "hub" / "checkpoints"
