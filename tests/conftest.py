"""Fixtures and hooks shared by the whole suite, in its three tiers:

- tests/unit: pure, in-process (no database, no command line);
- tests/integration: SQLite UDBs, the commands through CliRunner, the daemon in this
  process, the simulator;
- tests/system: what needs the machine itself: root, the real CPU, setuid children
  and other uids, PostgreSQL, D-Bus, shrdaemon as a process of its own, real cgroups
  and nice values.

`python3 -m pytest` is the everyday run: unit and integration, in parallel
(pytest-xdist, pyproject.toml).  The system tier runs alone and serially, each test
holding the host's real-machine lock (tests/machine_lock.py):
`python3 -m pytest tests/system -n 0`.  Every test under tests/system is marked
`system`; a test says what it needs of the machine with
`@pytest.mark.requires("root", ...)` and skips, saying why, where that is missing
(NEEDS below).  The everyday run distributes with --dist loadgroup: tests that must not
run at the same time as each other would take `@pytest.mark.xdist_group("name")` (one
worker runs a group) with a comment saying why; none of unit and integration needs it
today (each test has its own tmp_path, UDB, socket and ports), and what needs the whole
machine is the system tier.

Every test runs with XDG_DATA_HOME and FAIRSHARE_SOCKET pointing into its tmp_path
and UDB_URL unset, so nothing can touch the real default UDB or the socket of
whoever runs the suite.  The helpers beside this file (asuser, busy, machine_lock,
pgserver, trees) are importable from every tier (pyproject.toml: pythonpath).

The stored renderings in tests/data (one per display, `assert_stored`) are written
again by running their tests with FAIRSHARE_UPDATE_DATA=1 in the environment (the
test then passes, having written what it got): review `git diff tests/data` and say
in the commit why each change is right.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import settings

from udb import directives
from udb.session import dispose_all, open_udb

# Hypothesis fails an example slower than its deadline (200 ms by default): a timing
# assertion, which a loaded machine running the tiers in parallel would trip.  None, as
# most property tests here already said; how fast things are is for tests/bench.
settings.register_profile("fairshare", deadline=None)
settings.load_profile("fairshare")

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
SYSTEM = TESTS / "system"
ACME = ROOT / "examples" / "acme" / "acme.udb"
ACME_ACCT = ROOT / "examples" / "acme" / "acme-acct.udb"
#: How to run the system tier (said wherever it is run the wrong way).
SYSTEM_RUN = "python3 -m pytest tests/system -n 0"


# -- what a test needs of the machine -------------------------------------------------------


def _root() -> str | None:
    if os.geteuid() != 0:
        return "needs root (setuid children, other uids, cgroups, renicing)"
    return None


def _postgresql() -> str | None:
    if os.environ.get("UDB_TEST_PG_URL"):
        return None  # a server of the tester's (fixture pg_url); pg_server may still skip
    from pgserver import unavailable

    return unavailable()


def _cgroup() -> str | None:
    from fairshare.enforce.detect import detect

    choice = detect("auto")
    if choice.name not in ("cgroup1", "cgroup2"):
        return f"no cgroup cpu controller here ({choice.reason})"
    return None


def _cgroup_v1() -> str | None:
    if not Path("/sys/fs/cgroup/cpu/cpu.shares").exists():
        return "no cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu"
    return None


def _autogroup() -> str | None:
    from fairshare.enforce.nice import autogroup_enabled

    return None if autogroup_enabled() else "kernel autogroup is off: per-process nice only"


def _dbus() -> str | None:
    return None if shutil.which("dbus-daemon") else "dbus-daemon is not installed"


def _strace() -> str | None:
    if shutil.which("strace") is None:
        return "strace is not installed"
    r = subprocess.run(["strace", "-f", "-o", os.devnull, "true"], capture_output=True)
    if r.returncode != 0:
        return f"strace cannot trace here: {r.stderr.decode().strip()[:200]}"
    return None


def _systemd_analyze() -> str | None:
    return None if shutil.which("systemd-analyze") else "systemd-analyze is not installed"


def _real_systemd() -> str | None:
    from realsystemd import unavailable

    why = unavailable()
    return f"cannot boot a real systemd: {why}" if why else None


def _real_cpu() -> str | None:
    if os.environ.get("FAIRSHARE_REAL_TESTS") == "0":
        return "FAIRSHARE_REAL_TESTS=0: the real-CPU proofs were asked to be left out"
    return None


#: Each need a test may name in @pytest.mark.requires: why it is missing here, or None.
NEEDS = {
    "root": _root,
    "postgresql": _postgresql,
    "cgroup": _cgroup,
    "cgroup-v1": _cgroup_v1,
    "autogroup": _autogroup,
    "dbus": _dbus,
    "strace": _strace,
    "systemd-analyze": _systemd_analyze,
    "real-systemd": _real_systemd,
    "real-cpu": _real_cpu,
}


@functools.cache
def missing(need: str) -> str | None:
    """Why `need` is not met on this machine (checked once a run), or None."""
    if need not in NEEDS:
        raise pytest.UsageError(f"@pytest.mark.requires({need!r}): expected one of {sorted(NEEDS)}")
    return NEEDS[need]()


def pytest_configure(config: pytest.Config) -> None:
    workers = config.getoption("numprocesses", default=None)
    if not workers or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for arg in config.args:
        path = Path(arg.split("::")[0]).resolve()
        if path == SYSTEM or SYSTEM in path.parents or path in SYSTEM.parents:
            raise pytest.UsageError(
                f"{arg}: the system tier (tests/system) runs alone and serially, not under "
                f"-n: {SYSTEM_RUN}; the everyday run (unit and integration, in parallel) is "
                "python3 -m pytest"
            )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if SYSTEM in Path(item.path).parents:
            item.add_marker(pytest.mark.system)


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("requires"):
        for need in mark.args:
            why = missing(need)
            if why:
                pytest.skip(why)


@pytest.fixture(autouse=True)
def _system_tests_take_turns(request):
    """A system test holds the host's real-machine lock while it runs: two runs of the
    system tier at once (CI jobs, people as root on one box) would measure each other."""
    if request.node.get_closest_marker("system") is None:
        yield
        return
    from machine_lock import machine_lock

    with machine_lock():
        yield


@pytest.fixture(autouse=True)
def _cgroups_of_their_own(request, monkeypatch):
    """A daemon the everyday tiers run in this process (shrdaemon --once through
    CliRunner) as root makes its cgroups under a parent of this test process's
    (fairshare-test-PID), never under MOUNT/fairshare: at start a daemon adopts every
    cgroup it finds there and removes what it does not want, and at exit it removes
    them all, which moved a system test's daemons' processes out of their lnode cgroups
    and removed their counters (charged twice, or not at all: issue 29)."""
    if request.node.get_closest_marker("system") is None:
        from fairshare.cli import shrdaemon
        from fairshare.enforce import cgroupfs

        made = shrdaemon.make_enforcer

        def own_parent(*args, **kwargs):  # only the daemon's: fake trees keep theirs
            monkeypatch.setattr(cgroupfs, "PARENT", f"fairshare-test-{os.getpid()}")
            return made(*args, **kwargs)

        monkeypatch.setattr(shrdaemon, "make_enforcer", own_parent)
    yield


@pytest.fixture(autouse=True)
def _shrdaemon_log_as_found():
    """shrdaemon's logger as each test found it: a daemon run in-process (CliRunner)
    points it at its own handler and stops it propagating, which would hide the next
    test's records from caplog."""
    import logging

    log = logging.getLogger("shrdaemon")
    saved = (log.handlers[:], log.level, log.propagate)
    yield
    log.handlers[:], log.level, log.propagate = saved


@pytest.fixture(autouse=True)
def _no_default_udb(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("UDB_URL", raising=False)
    # A daemon a test starts listens here, never on the machine's /run/fairshare.
    monkeypatch.setenv("FAIRSHARE_SOCKET", str(tmp_path / "shrdaemon.sock"))
    yield
    dispose_all()


# -- stored renderings ---------------------------------------------------------------------------

#: Write the stored renderings instead of comparing with them (see the module docstring).
UPDATE_DATA = os.environ.get("FAIRSHARE_UPDATE_DATA") == "1"


def assert_stored(path: Path, text: str) -> None:
    """`text` is the stored rendering at `path`; with FAIRSHARE_UPDATE_DATA=1, it
    becomes it."""
    if UPDATE_DATA:
        path.write_text(text)
        return
    assert text == path.read_text()


# -- UDBs --------------------------------------------------------------------------------------


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


# -- PostgreSQL (the system tier) --------------------------------------------------------------


@pytest.fixture(scope="session")
def pg_server():
    """The session's throwaway PostgreSQL server (tests/pgserver.py), started at its first
    use and removed at the end; skips, saying why, where none can be started."""
    from pgserver import throwaway_server

    server = throwaway_server()
    yield server
    server.remove()


@pytest.fixture
def pg_db(pg_server):
    """The URL of a new, empty UDB (schema at head) in a database of the test's own on
    the session's server, dropped afterwards."""
    from pgserver import drop_database, new_database

    url = new_database(pg_server)
    open_udb(url, create=True)  # an empty UDB, as udbgen makes one
    yield url
    dispose_all()
    drop_database(pg_server, url)


@pytest.fixture
def pg_url(request):
    """A PostgreSQL UDB URL: UDB_TEST_PG_URL when set (a server of the tester's, reused:
    the tests clear what they use), else `pg_db`."""
    url = os.environ.get("UDB_TEST_PG_URL")
    if url:
        return url
    return request.getfixturevalue("pg_db")
