"""Guard, "Every error one line": a UDB shrdaemon cannot write at start because root made
it immutable (chattr +i), as a bad day leaves it: one line and exit status 2, where the
daemon died with a traceback from the store's recovery.  Another writer holding a
transaction: tests/integration/test_one_line_errors.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from udb import directives
from udb.session import dispose_all, open_udb

ROOT = Path(__file__).resolve().parents[2]
ACME = ROOT / "examples" / "acme" / "acme.udb"

pytestmark = pytest.mark.requires("root")  # chattr +i


def test_an_immutable_udb_stops_the_daemon_in_one_line(tmp_path):
    db = tmp_path / "udb.sqlite"
    directives.run(open_udb(str(db), create=True), directives.parse(ACME.read_text(), "acme"))
    dispose_all()
    if subprocess.run(["chattr", "+i", str(db)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported on this file system")
    try:
        before = db.read_bytes()
        r = subprocess.run(
            [sys.executable, "-m", "fairshare.cli.shrdaemon", "--udb", str(db), "--once"]
            + ["--enforcer", "none", "--socket", "", "--log-file", str(tmp_path / "log")],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        )
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(
        "cannot write the UDB at start (attempt to write a readonly database): the daemon "
        "must write it; is it immutable, read-only, or held by another writer?"
    ), r.stderr
    assert "Traceback" not in (tmp_path / "log").read_text()
    assert db.read_bytes() == before
