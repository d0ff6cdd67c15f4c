"""Shell completion through click for every console command of pyproject.toml."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT_DIR = Path(__file__).resolve().parents[2]
SCRIPTS = tomllib.loads((ROOT_DIR / "pyproject.toml").read_text())["project"]["scripts"]


def command(target: str):
    module, attr = target.split(":")
    entry = getattr(importlib.import_module(module), attr)
    if hasattr(entry, "module"):  # a display's script (udb.cli.start): its command's main
        return importlib.import_module(entry.module).main
    return entry


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_command_completes_its_options(name):
    cmd = command(SCRIPTS[name])
    var = f"_{name.upper()}_COMPLETE"
    r = CliRunner().invoke(cmd, [], prog_name=name, env={var: "bash_source"})
    assert r.exit_code == 0 and f"complete -o nosort -F _{name}_completion {name}" in r.output
    longs = sorted(o for p in cmd.params for o in p.opts + p.secondary_opts if o.startswith("--"))
    env = {var: "bash_complete", "COMP_WORDS": f"{name} --", "COMP_CWORD": "1"}
    r = CliRunner().invoke(cmd, [], prog_name=name, env=env)
    offered = {ln.split(",", 1)[1] for ln in r.output.splitlines() if ln.startswith("plain,")}
    assert set(longs) <= offered, set(longs) - offered
    assert "--help" in offered
