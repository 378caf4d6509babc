"""``ScanParameters`` built directly: its defaults, how values are normalised, the checks not covered by
the API's table of refusals (tests/project/test_api.py) or by the settings a method or engine ignores
(tests/ranking/test_methods.py), and what it reports of itself."""

from __future__ import annotations

import dataclasses
import inspect
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from novelfind import params
from novelfind.errors import InputError, NeedsError, ParameterError
from novelfind.params import DEFAULTS, FIELDS, LIMITS, ScanParameters, parameter_defaults
from novelfind.ranking.adsconfig import ADSConfig
from novelfind.ranking.methods import DEFAULT_METHOD, METHODS


def test_defaults():
    p = ScanParameters("/lib")
    assert p.k == 100 and p.method == DEFAULT_METHOD and p.format == "tsv" and p.device == "auto"
    assert p.cache is True and p.exclude == () and p.since is None and p.min_score is None
    assert p.solver_config() == ADSConfig()
    assert parameter_defaults() == {name: value for name, value in DEFAULTS.items() if name != "paths"}


def test_paths_without_a_value_are_required():
    with pytest.raises(TypeError):
        ScanParameters()  # type: ignore[call-arg]


def test_values_are_normalised(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    p = ScanParameters(
        ["~/a", Path("b")], exclude="*.png", method="ads", lr=1, output="~/out.tsv", cache="~/c.sqlite", k=3
    )
    assert p.paths == (tmp_path / "a", Path("b"))
    assert p.exclude == ("*.png",)
    assert p.lr == 1.0 and type(p.lr) is float
    assert p.output == tmp_path / "out.tsv" and p.cache == tmp_path / "c.sqlite"
    assert ScanParameters("x", exclude=["a", "b"]).exclude == ("a", "b")
    assert ScanParameters(Path("one")).paths == (Path("one"),)


def test_feature_auto_becomes_the_methods_own():
    for name, method in METHODS.items():
        assert ScanParameters("x", method=name).feature == method.feature
    assert ScanParameters("x", method="knn", feature="pooled").feature == "pooled"


def test_since_as_text_becomes_a_datetime():
    p = ScanParameters("x", since="2026-01-01T10:00:00+02:00")
    assert p.since == datetime(2026, 1, 1, 8, 0, tzinfo=timezone.utc)


def test_a_since_without_a_timestamp_is_refused_before_any_work(monkeypatch):
    """Local midnight of 0001-01-01 east of UTC falls before year 1 in UTC: it has no timestamp."""
    try:
        with monkeypatch.context() as patch:
            patch.setenv("TZ", "Etc/GMT-14")  # UTC+14
            time.tzset()
            with pytest.raises(InputError) as err:
                ScanParameters("x", since=datetime(1, 1, 1))
    finally:
        time.tzset()
    assert str(err.value) == (
        "since 0001-01-01 is out of range: not a time this system can compare file times with"
    )


def test_numbered_gpus_are_devices_and_ray_addresses_are_text():
    assert ScanParameters("x", device="cuda:1").device == "cuda:1"
    with pytest.raises(InputError) as err:
        ScanParameters("x", engine="ray", ray_address=6379)  # type: ignore[arg-type]
    assert str(err.value) == "ray_address must be a string (auto, HOST:PORT), got 6379"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dedup": -0.1}, "dedup must be at least 0, got -0.1"),
        ({"decode_timeout": 0}, "decode_timeout must be greater than 0, got 0.0"),
        ({"max_decode_pixels": 0}, "max_decode_pixels must be at least 1, got 0"),
        ({"workers": 257}, "workers must be at most 256, got 257"),
        ({"batch_size": 0}, "batch_size must be at least 1, got 0"),
        ({"min_score": float("inf")}, "min_score must be a finite number, got inf"),
        ({"dedup": "0.1"}, "dedup must be a number, got '0.1'"),
        ({"max_decode_pixels": 1.5}, "max_decode_pixels must be a whole number, got 1.5"),
        ({"cache_dtype": "int8"}, "cache_dtype must be one of float16, float32, got 'int8'"),
        ({"link": "move"}, "link must be one of copy, symlink, hardlink, got 'move'"),
    ],
)
def test_limits_and_choices_are_refused_with_their_messages(kwargs, message):
    with pytest.raises(InputError) as err:
        ScanParameters("x", **kwargs)
    assert str(err.value) == message


def test_none_is_within_every_limit_of_an_optional_number():
    p = ScanParameters("x", workers=None, min_score=None, max_decode_pixels=None)
    assert (p.workers, p.min_score, p.max_decode_pixels) == (None, None, None)
    assert ScanParameters("x", min_score=-5).min_score == -5.0  # no bounds, only finite


def test_a_bad_xmp_keyword_and_sheet_name_are_parameter_errors():
    with pytest.raises(InputError, match=r"^xmp_keyword: "):
        ScanParameters("x", xmp=True, xmp_keyword="")
    with pytest.raises(ParameterError) as err:
        ScanParameters("x", contact_sheet="sheet.bmp")
    assert err.value.name == "contact_sheet"
    assert ScanParameters("x", contact_sheet="S.JPG").contact_sheet == Path("S.JPG")


def test_a_conditional_setting_at_its_default_is_no_setting():
    ScanParameters("x", xmp_keyword=DEFAULTS["xmp_keyword"])
    ScanParameters("x", engine="ray", workers=None)
    with pytest.raises(NeedsError):
        ScanParameters("x", xmp=False, xmp_keyword="other")
    assert ScanParameters("x", xmp=True, xmp_keyword="other").xmp_keyword == "other"


def test_the_outputs_are_absolute_sorted_and_unique(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = ScanParameters("x", output="z.tsv", copy_to="a", report="z.tsv", contact_sheet="m.png")
    assert p.outputs() == [tmp_path / "a", tmp_path / "m.png", tmp_path / "z.tsv"]
    assert ScanParameters("x").outputs() == []


def test_the_record_holds_the_recorded_fields_as_json_values():
    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    p = ScanParameters(["/a", "/b"], k=5, since=when, ignore_file="/i.json")
    record = p.record()
    assert list(record) == [f.name for f in FIELDS if f.metadata["record"]]
    assert record["paths"] == ["/a", "/b"] and record["k"] == 5
    assert record["since"] == "2026-01-01T00:00:00+00:00" and record["ignore_file"] == "/i.json"
    assert "batch_size" not in record and "output" not in record


def test_the_parameters_are_frozen_and_compare_by_value():
    p = ScanParameters("x", k=3)
    assert p == ScanParameters(Path("x"), k=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.k = 4  # type: ignore[misc]


def test_every_limit_is_a_numeric_field_and_the_signature_follows_the_fields():
    types = {f.name: f.type for f in FIELDS}
    assert all(types[name].split(" ")[0] in ("int", "float") for name in LIMITS)
    signature = params.scan_signature([], "ScanResult")
    names = list(signature.parameters)
    assert names == [f.name for f in FIELDS]
    assert signature.parameters["k"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert signature.parameters["method"].kind is inspect.Parameter.KEYWORD_ONLY
    assert signature.parameters["paths"].default is inspect.Parameter.empty
    assert signature.return_annotation == "ScanResult"
    assert params.describe().splitlines()[0].startswith("        paths: ")
