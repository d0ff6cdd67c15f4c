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


def test_the_systemd_unit_runs_the_commands_where_install_sh_links_them():
    script = (ROOT / "packaging" / "install.sh").read_text()
    bindir = next(
        line.split(":-", 1)[1].rstrip("}")
        for line in script.splitlines()
        if line.startswith("BINDIR=")
    )
    unit = (ROOT / "examples" / "systemd" / "shrdaemon.service").read_text()
    run = [
        line.split("=", 1)[1].lstrip("-").split()[0]
        for line in unit.splitlines()
        if line.startswith(("ExecStart=", "ExecStartPre="))
    ]
    assert run == [f"{bindir}/shradmin", f"{bindir}/shrdaemon"]
    commands = script.split('COMMANDS="', 1)[1].split('"', 1)[0].split()
    assert sorted(commands) == sorted(SCRIPTS)  # install.sh links every command


def test_the_readme_opens_with_the_quick_start_and_loads_no_demo_onto_real_users():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert block == [
        "python3 -m pip install -e . && shrdaemon --simulate examples/scenarios/06_acme.toml"
        " && shrview -dm",
        "python3 -m pip install -e '.[test]' && lint-imports && python3 -m pytest"
        " && python3 -m pytest tests/system -n 0",
    ]
    deploying = readme.split("## Deploying on one machine", 1)[1].split("\n## ", 1)[0]
    assert "acme" not in deploying.lower()
    assert "packaging/install.sh" in deploying and "udbgen --init" in deploying
    for heading in ("## What it is", "## Concepts", "## A site", "## Troubleshooting",
                    "## Development"):  # fmt: skip
        assert heading in readme
    assert "bench_real" not in readme.split("## Development", 1)[0]
    assert (ROOT / "docs" / "benchmarks.md").exists()
