"""`novelfind scan --help` in sections, everyday options first; every option in one of them."""

from __future__ import annotations

import re

from click.testing import CliRunner

from novelfind import params
from novelfind.cli.group import cli
from novelfind.cli.scan import OPTION_GROUPS, scan


def help_text() -> str:
    result = CliRunner().invoke(cli, ["scan", "--help"], terminal_width=100)
    assert result.exit_code == 0
    return result.stdout


def sections(text: str) -> dict[str, str]:
    """Section title -> its lines, for the titled blocks of the help (``Title:`` at column 0)."""
    out, title = {}, None
    for line in text.splitlines():
        if re.match(r"^[A-Z][^ ].*:$", line) or re.match(r"^[A-Z][\w ]*\(.*\):$", line):
            title = line[:-1]
            out[title] = ""
        elif title is not None:
            out[title] += line + "\n"
    return out


def test_the_sections_come_in_order_everyday_ones_first():
    found = [title for title in sections(help_text()) if title in dict(OPTION_GROUPS).values()]
    assert found == [title for _, title in OPTION_GROUPS]
    assert help_text().index("Outputs:") < help_text().index("Solver tuning")


def test_every_parameter_option_has_a_section_and_only_help_is_left_over():
    for f in params.FIELDS:
        if f.metadata["help"] is not None:
            assert f.metadata["group"] in dict(OPTION_GROUPS), f.name
    other = sections(help_text())["Other options"]
    assert [line.split()[0] for line in other.splitlines() if line.strip().startswith("-")] == ["-h,"]


def test_options_land_in_their_sections():
    text = sections(help_text())
    assert "--epochs" in text["Solver tuning (--method ads and ads-paper)"]
    assert "--restarts" in text["Solver tuning (--method ads and ads-paper)"]
    assert "--ray-address" in text["Cluster (pip install 'novelfind[ray]')"]
    assert "--cache-dtype" in text["Cache"] and "--no-cache" in text["Cache"]
    assert "-o, --output" in text["Outputs"] and "-q, --quiet" in text["Outputs"]
    assert "--since" in text["Input"] and "--exclude" in text["Input"]
    assert "-k, --k" in text["Ranking"]


def test_k_has_a_short_form_and_since_shows_its_formats(library, fake_extractor, tmp_path):
    args = ["scan", str(library["root"]), "-k", "2", "--cache", str(tmp_path / "c")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout.splitlines()) == 2
    flat = " ".join(help_text().split())
    assert "2026-01-01, 2026-01-01T10:00:00 (local time), or with an offset: 2026-01-01T10:00:00Z" in flat
    since = next(p for p in scan.params if p.name == "since")
    for example in ("2026-01-01", "2026-01-01T10:00:00", "2026-01-01T10:00:00Z", "2026-01-01T10:00:00+02:00"):
        assert since.type.convert(example, since, None) is not None, example
