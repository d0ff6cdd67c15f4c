"""Progress bars: on a terminal (a pseudo-terminal here) long commands show rich's
progress on standard error; piped, they print nothing but their output."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

from udb.cli.progress import status, track

ROOT_DIR = Path(__file__).resolve().parents[2]
SCENARIO = ROOT_DIR / "examples" / "scenarios" / "06_acme.toml"


def run_on_terminal(args: list[str], env: dict) -> tuple[int, str, str]:
    """Run command module args[0]'s main with args[1:], standard error on a
    pseudo-terminal; (status, stdout, what the terminal received)."""
    master, slave = pty.openpty()
    main = f"import sys; from {args[0]} import main; sys.argv[0] = {args[0]!r}; main()"
    p = subprocess.Popen(
        [sys.executable, "-c", main, *args[1:]],
        stdout=subprocess.PIPE,
        stderr=slave,
        env=env,
        cwd=ROOT_DIR,
    )
    os.close(slave)
    term = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed its side
                break
            if not chunk:
                break
            term += chunk
        elif p.poll() is not None:
            break
    out = p.stdout.read().decode()
    os.close(master)
    return p.wait(), out, term.decode(errors="replace")


@pytest.fixture
def env(tmp_path):
    return dict(
        os.environ,
        PYTHONPATH=str(ROOT_DIR),
        UDB_URL=f"sqlite:///{tmp_path / 'udb.sqlite'}",
        COLUMNS="100",
        TERM="xterm",
    )


def big_file(tmp_path: Path, n: int = 3000) -> Path:
    lines = ["create:G:uid:500:shflags:040000:shares:1:resgrp:0:"]
    lines += [f"create:u{k}:uid:{10000 + k}:resgrp:500:shares:1:" for k in range(n)]
    path = tmp_path / "big.udb"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_udbgen_shows_progress_on_a_terminal_only(tmp_path, env):
    path = big_file(tmp_path)
    code, out, term = run_on_terminal(["udb.cli.udbgen", "--create", "-v", str(path)], env)
    assert code == 0, term
    assert "udbgen: applying" in term and "3001 created" in term
    env["UDB_URL"] = f"sqlite:///{tmp_path / 'piped.sqlite'}"
    r = subprocess.run(
        [sys.executable, "-m", "udb.cli.udbgen", "--create", "-v", str(path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT_DIR,
    )
    assert r.returncode == 0 and "applying" not in r.stderr and "\x1b[" not in r.stderr


def test_shrsim_shows_progress_on_a_terminal(env):
    code, out, term = run_on_terminal(["fairshare.cli.shrsim", str(SCENARIO), "--json"], env)
    assert code == 0, term
    assert "shrsim: simulating" in term
    assert out.lstrip().startswith("{")  # stdout stays clean JSON


def test_helpers_do_nothing_when_not_shown():
    assert list(track(range(3), "x", show=False)) == [0, 1, 2]
    with status("x", show=False):
        pass
