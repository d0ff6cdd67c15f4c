"""Fixtures shared by the whole suite: a fresh SQLite UDB, and the ACME site loaded in one.

Every test runs with XDG_DATA_HOME and FAIRSHARE_SOCKET pointing into its tmp_path
and UDB_URL unset, so nothing can touch the real default UDB or the socket of
whoever runs the suite.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from udb import directives
from udb.session import dispose_all, open_udb

ROOT = Path(__file__).resolve().parent.parent
ACME = ROOT / "examples" / "acme" / "acme.udb"
ACME_ACCT = ROOT / "examples" / "acme" / "acme-acct.udb"


@pytest.fixture(autouse=True)
def _no_default_udb(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("UDB_URL", raising=False)
    # A daemon a test starts listens here, never on the machine's /run/fairshare.
    monkeypatch.setenv("FAIRSHARE_SOCKET", str(tmp_path / "shrdaemon.sock"))
    yield
    dispose_all()


@pytest.fixture
def udb_url(tmp_path) -> str:
    """The URL of a new, empty SQLite UDB (schema at head) in the test's tmp_path, made
    as udbgen makes one (only udbgen creates a UDB)."""
    url = f"sqlite:///{tmp_path / 'udb.sqlite'}"
    open_udb(url, create=True)
    return url


def load(url: str, path: Path) -> None:
    """Load the directive file at `path` into the UDB at `url` (created if missing, as
    udbgen does)."""
    directives.run(open_udb(url, create=True), directives.parse(path.read_text(), str(path)))


@pytest.fixture
def acme(udb_url) -> str:
    """A UDB holding examples/acme/acme.udb (Share by User); returns its URL."""
    load(udb_url, ACME)
    return udb_url


@pytest.fixture
def acme_acct(tmp_path) -> str:
    """A UDB (not udb_url's) holding examples/acme/acme-acct.udb (Share by Account); its URL."""
    url = f"sqlite:///{tmp_path / 'acme-acct.sqlite'}"
    load(url, ACME_ACCT)
    return url
