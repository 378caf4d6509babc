"""A method and an engine declare the settings they use; a setting given where it takes no effect is
refused (the API and the command line alike, naming both), and what the docs say of the methods follows
the records."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import novelfind
from novelfind import params
from novelfind.cli.group import cli
from novelfind.errors import ExitCode, InputError, NeedsError
from novelfind.extract.engines import ENGINES, Engine, engine_settings
from novelfind.ranking import methods as ranking

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
# a value other than the default, within the limits, for each setting only some methods or engines use
GIVEN = {
    "epochs": 7,
    "partners": 3,
    "lr": 0.01,
    "momentum": 0.5,
    "seed": 3,
    "restarts": 2,
    "workers": 2,
    "decoder": "pillow",
    "decode_timeout": 5.0,
    "ray_address": "auto",
}


def run(*args, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


def test_every_declared_setting_is_a_parameter_and_the_solver_settings_are_the_ads_methods():
    fields = {f.name for f in params.FIELDS}
    assert ranking.method_settings() | engine_settings() <= fields
    assert set(GIVEN) == ranking.method_settings() | engine_settings()
    assert {name for name, m in ranking.METHODS.items() if "epochs" in m.settings} == {"ads", "ads-paper"}
    assert ranking.method_settings() == ranking.SOLVER_SETTINGS
    # the solver's scan parameters are the ADS config's, less its internal block size
    assert ranking.SOLVER_SETTINGS == set(params.ADS_LIMITS) - {"block"}


@pytest.mark.parametrize("method", list(ranking.METHODS))
@pytest.mark.parametrize("name", sorted(ranking.SOLVER_SETTINGS))
def test_a_solver_setting_is_taken_by_the_methods_that_use_it_and_refused_by_the_others(method, name):
    used = name in ranking.METHODS[method].settings
    if used:
        p = params.ScanParameters(".", method=method, **{name: GIVEN[name]})
        assert getattr(p.solver_config(), name) == GIVEN[name]
        return
    with pytest.raises(NeedsError) as info:
        params.ScanParameters(".", method=method, **{name: GIVEN[name]})
    assert str(info.value) == (
        f"{name} takes effect only with method='ads' or method='ads-paper', not method={method!r}"
    )
    assert info.value.exit_code == ExitCode.USAGE and info.value.name == name
    # the default value is no setting: accepted with every method
    params.ScanParameters(".", method=method, **{name: params.DEFAULTS[name]})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"engine": "ray", "workers": 2}, "workers takes effect only with engine='local', not engine='ray'"),
        (
            {"engine": "ray", "decoder": "pillow"},
            "decoder takes effect only with engine='local', not engine='ray'",
        ),
        (
            {"engine": "ray", "decode_timeout": 5},
            "decode_timeout takes effect only with engine='local' or with report or contact_sheet, "
            "not engine='ray'",
        ),
        ({"ray_address": "auto"}, "ray_address takes effect only with engine='ray'"),
        ({"xmp_keyword": "odd"}, "xmp_keyword takes effect only with xmp=True"),
    ],
)
def test_a_setting_the_engine_ignores_is_refused(kwargs, message):
    with pytest.raises(NeedsError) as info:
        params.ScanParameters(".", **kwargs)
    assert str(info.value) == message


@pytest.mark.parametrize("output", ["report", "contact_sheet"])
def test_the_decode_limit_with_ray_is_taken_for_the_thumbnails_of_an_output(output, tmp_path):
    target = tmp_path / ("r.html" if output == "report" else "s.jpg")
    p = params.ScanParameters(".", engine="ray", decode_timeout=5, **{output: target})
    assert p.decode_timeout == 5.0
    # the local engine's own settings stay the local engine's
    with pytest.raises(NeedsError):
        params.ScanParameters(".", engine="ray", workers=2, **{output: target})


def test_an_engine_added_at_run_time_is_asked_through_its_record(monkeypatch):
    monkeypatch.setitem(
        ENGINES, "threads", Engine("novelfind.extract.engines.local:extract", settings=frozenset({"workers"}))
    )
    assert params.ScanParameters(".", engine="threads", workers=4).workers == 4
    with pytest.raises(NeedsError, match="decode_timeout takes effect only with engine='local'"):
        params.ScanParameters(".", engine="threads", decode_timeout=5)
    with pytest.raises(NeedsError, match=r"workers .* only with engine='local' or engine='threads'"):
        params.ScanParameters(".", engine="ray", workers=4)


def test_the_api_refuses_before_any_work(library, fake_extractor):
    with pytest.raises(InputError, match="^epochs takes effect only with"):
        novelfind.scan(library["root"], epochs=50)
    assert fake_extractor.images == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--epochs", "50"],
            "--epochs takes effect only with --method ads or --method ads-paper, not --method cosine-knn",
        ),
        (
            ["--method", "knn", "--seed", "4"],
            "--seed takes effect only with --method ads or --method ads-paper, not --method knn",
        ),
        (
            ["--engine", "ray", "--workers", "2"],
            "--workers takes effect only with --engine local, not --engine ray",
        ),
        (
            ["--engine", "ray", "--decode-timeout", "5"],
            "--decode-timeout takes effect only with --engine local or with --report or --contact-sheet, "
            "not --engine ray",
        ),
    ],
)
def test_the_command_line_refuses_a_typed_setting_that_takes_no_effect(
    library, fake_extractor, args, message
):
    result = run("scan", library["root"], *args)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"error: {message}\n")
    assert fake_extractor.images == 0


def test_a_config_file_setting_is_a_standing_one_for_the_runs_it_applies_to(
    library, fake_extractor, tmp_path
):
    """``epochs = 7`` in a config file serves the ads runs and is left out of the others in silence."""
    config = tmp_path / "novelfind.toml"
    config.write_text("[scan]\nepochs = 7\nseed = 3\nworkers = 0\nformat = 'json'\n")
    plain = run("scan", library["root"], "--config", config, "--k", "2", "-q")
    assert plain.exit_code == 0, plain.stderr
    assert plain.stderr == ""
    record = json.loads(plain.stdout)["run"]
    assert record["method"] == "cosine-knn" and "epochs" not in record  # a setting cosine-knn does not take
    ads = run("scan", library["root"], "--config", config, "--k", "2", "-q", "--method", "ads")
    assert ads.exit_code == 0, ads.stderr
    assert json.loads(ads.stdout)["run"]["epochs"] == 7
    # from the environment likewise
    env = run("scan", library["root"], "--k", "2", "-q", env={"NOVELFIND_EPOCHS": "9"})
    assert env.exit_code == 0, env.stderr


# -- what the docs say of the methods follows the records ------------------------------------------


def test_options_md_lists_the_methods_and_their_features_from_the_records():
    text = (ROOT / "docs" / "options.md").read_text()
    row = re.search(r"^\| `--method ([^`]+)` \| `([^`]+)` \|", text, re.M)
    assert row is not None, "docs/options.md has no --method row"
    assert row.group(1).split("\\|") == list(ranking.METHODS)
    assert row.group(2) == ranking.DEFAULT_METHOD
    feature = re.search(r"^\| `--feature [^|]*.*?\((pooled for [^)]*)\)", text, re.M)
    assert feature is not None and feature.group(1).replace("`", "") == ranking.features_help()
    solver = re.search(r"^## Solver tuning \((.*)\)$", text, re.M)
    assert solver is not None
    said = re.findall(r"`(?:--method )?([a-z-]+)`", solver.group(1))
    assert said == [n for n, m in ranking.METHODS.items() if m.settings >= ranking.SOLVER_SETTINGS]


def test_ranking_md_lists_every_method_and_the_users_of_the_solver_settings():
    text = (ROOT / "docs" / "ranking.md").read_text()
    table = text[text.index("| `--method` |") :].split("\n\n", 1)[0]  # the methods' table, the first one
    rows = re.findall(r"^\| `([a-z][a-z-]*)`( \(default\))? \|", table, re.M)
    assert [name for name, _ in rows] == list(ranking.METHODS)
    assert [name for name, default in rows if default] == [ranking.DEFAULT_METHOD]
    sentence = re.search(r"The solver's settings \((.*?)\) are used\s+by (.*?) only", text, re.S)
    assert sentence is not None
    flags = re.findall(r"`--([a-z-]+)`", sentence.group(1))
    assert {f.replace("-", "_") for f in flags} == ranking.SOLVER_SETTINGS
    users = re.findall(r"`([a-z-]+)`", sentence.group(2))
    assert users == [n for n, m in ranking.METHODS.items() if m.settings >= ranking.SOLVER_SETTINGS]


def test_default_config_keeps_the_solver_settings_under_a_heading_naming_their_methods():
    with open(ROOT / "configs" / "default.toml", "rb") as fh:
        documented = tomllib.load(fh)["scan"]
    assert ranking.SOLVER_SETTINGS <= set(documented)
    text = (ROOT / "configs" / "default.toml").read_text()
    heading = re.search(r"^# ADS solver \(paper Algorithm 1\), used by (.*) only", text, re.M)
    assert heading is not None
    users = [n for n, m in ranking.METHODS.items() if m.settings >= ranking.SOLVER_SETTINGS]
    assert heading.group(1) == " and ".join(users)
    # the keys under it, up to the next blank line, are the solver's (and dedup, said on its own)
    block = text[heading.start() :].split("\n\n")[0]
    keys = set(re.findall(r"^([a-z_]+) =", block, re.M))
    assert keys - {"dedup"} == ranking.SOLVER_SETTINGS
