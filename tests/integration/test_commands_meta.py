"""What every command carries for an installed suite: --version, completion of the
option values that take names (shrview -d -o, shradmin -F --policy), the manual pages
and the license in the wheel's metadata (pyproject.toml)."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest
from click.shell_completion import ShellComplete
from click.testing import CliRunner

import udb

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SCRIPTS = PYPROJECT["project"]["scripts"]


def command(name: str):
    module, _, attr = SCRIPTS[name].partition(":")
    if module.endswith(".start"):  # the displays' entry points wrap their module's main
        module, attr = f"{module.rsplit('.', 1)[0]}.{name}", "main"
    return getattr(importlib.import_module(module), attr)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_every_command_says_its_version(name, flag):
    r = CliRunner().invoke(command(name), [flag], prog_name=name)
    assert r.exit_code == 0, r.output
    assert r.output == f"{name} (fairshare) {udb.__version__}\n"


def completions(name: str, args: list[str], incomplete: str) -> list[str]:
    comp = ShellComplete(command(name), {}, name, f"_{name.upper()}_COMPLETE")
    return [item.value for item in comp.get_completions(args, incomplete)]


def test_shrview_completes_its_displays_and_sort_keys():
    assert completions("shrview", ["-d"], "") == ["m", "a", "s", "n", "l", "g"]
    assert completions("shrview", ["-o"], "") == ["tree", "id", "name", "usage", "rate", "eshr"]
    assert completions("shrview", ["--sort"], "r") == ["rate"]


def test_shradmin_completes_flags_one_name_after_another_and_policies():
    assert completions("shradmin", ["-F"], "ADJ") == ["ADJGROUPS"]
    assert completions("shradmin", ["-F"], "ADJGROUPS,L") == ["ADJGROUPS,LIMSHARE"]
    assert completions("shradmin", ["--policy"], "") == ["unicos", "feedback", "slurm"]
    assert completions("shradmin", ["--idle-share"], "e") == ["even"]


def test_the_wheel_installs_every_manual_page_where_man_looks():
    data = PYPROJECT["tool"]["setuptools"]["data-files"]
    shipped = {Path(p).name: section for section, pages in data.items() for p in pages}
    pages = {p.name for p in (ROOT / "man").iterdir()}
    assert set(shipped) == pages
    for name, section in shipped.items():
        assert section == f"share/man/man{name.rsplit('.', 1)[1]}"


def test_the_license_file_is_the_license_pyproject_names():
    assert PYPROJECT["project"]["license"] == {"text": "MIT"}
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")
