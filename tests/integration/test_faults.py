"""Fault injection (issues 11 and 18): damaged and foreign databases, URLs that cannot be
used, the daemon's lock under every spelling of one UDB (and its file and directory taken
on trust no more: Guard, Books #5), a seeded fuzz of the directive
language, and huge and non-finite numbers in every numeric option.  Each refused run
prints one line, exits 2 and changes nothing.  The lock against a daemon of another uid:
tests/system/test_daemon_process.py."""

from __future__ import annotations

import hashlib
import logging
import os
import random
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fairshare.cli.shradmin import main as shradmin
from fairshare.cli.shrdaemon import main as shrdaemon
from fairshare.cli.shrdist import main as shrdist
from fairshare.cli.shrinfo import main as shrinfo
from fairshare.cli.shrsim import main as shrsim
from fairshare.cli.shrsync import main as shrsync
from fairshare.cli.shrtree import main as shrtree
from fairshare.cli.shrview import main as shrview
from fairshare.daemon.lock import AlreadyRunning, DaemonLock, lock_path
from fairshare.daemon.trust import Untrusted
from udb import directives as d
from udb import listing
from udb.cli.udbgen import main as udbgen
from udb.cli.udbsee import main as udbsee
from udb.errors import UdbError
from udb.session import dispose_all, open_udb, read_session, write_session

ROOT = Path(__file__).resolve().parents[2]
ACME = ROOT / "examples" / "acme" / "acme.udb"

#: A scenario that simulates whatever UDB --udb names (it brings none of its own).
SCENARIO = """
cpus = 1
duration = "40s"
delta = "4s"
[[workload]]
name = "u1"
"""

#: (command, arguments, writes): every command, as it first touches the UDB.
COMMANDS = [
    ("udbgen", udbgen, ["-c", "create:zz:uid:4242:"], True),
    ("udbsee", udbsee, ["-a"], False),
    ("shradmin", shradmin, [], False),
    ("shradmin -X", shradmin, ["-X", "3"], True),
    ("shrtree", shrtree, [], False),
    ("shrview", shrview, [], False),
    ("shrinfo", shrinfo, ["u1"], False),
    ("shrdist", shrdist, ["-g", "Proj1", "-b", "Proj1A=10"], True),
    ("shrsync", shrsync, ["-u", "--timeout", "0"], True),
    ("shrdaemon", shrdaemon, ["--once", "--enforcer", "none"], True),
    ("shrsim", shrsim, ["SCENARIO"], False),
]


def invoke(cmd, args, udb: str, tmp_path: Path):
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(SCENARIO)
    args = [str(scenario) if a == "SCENARIO" else a for a in args]
    dispose_all()
    return CliRunner().invoke(cmd, ["--udb", udb, *args])


def one_line_exit_2(r, *needles: str) -> str:
    """The single stderr line of a refused run (asserting exit 2 and no traceback)."""
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    assert isinstance(r.exception, SystemExit), r.exception
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def digest(path: Path) -> str | None:
    if not path.is_file():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """An ACME UDB file, WAL checkpointed into it, to copy and damage."""
    path = tmp_path_factory.mktemp("template") / "udb.sqlite"
    engine = open_udb(str(path), create=True)
    d.run(engine, d.parse(ACME.read_text(), str(ACME)))
    dispose_all()
    return path


# -- damaged, foreign and missing databases -------------------------------------------------


def _zeros(p: Path) -> None:
    p.write_bytes(bytes(p.stat().st_size))


def _truncated(p: Path) -> None:
    os.truncate(p, p.stat().st_size // 2 + 100)


def _header(p: Path) -> None:
    with open(p, "r+b") as f:
        f.write(b"garbled garbage!")


def _page(p: Path) -> None:
    # Page 3 (of an ACME UDB's dozen) filled with noise: the header is intact, so only
    # an integrity check finds it (udbgen used to write to such a file and exit 0).
    with open(p, "r+b") as f:
        f.seek(2 * 4096)
        f.write(random.Random(7).randbytes(4096))


def _text(p: Path) -> None:
    p.write_text("create:u1:uid:1000:\n")


def _directory(p: Path) -> None:
    p.unlink()
    p.mkdir()


def _fifo(p: Path) -> None:
    p.unlink()
    os.mkfifo(p)


def _devnull(p: Path) -> None:
    p.unlink()
    p.symlink_to("/dev/null")


def _sql(statement: str):
    def damage(p: Path) -> None:
        conn = sqlite3.connect(p)
        conn.execute(statement)
        conn.commit()
        conn.close()

    return damage


def _foreign(p: Path) -> None:
    p.unlink()
    _sql("CREATE TABLE photos (id INTEGER PRIMARY KEY, jpeg BLOB)")(p)


#: (kind, damage, words the one-line error must hold)
CORRUPTIONS = [
    ("zeros", _zeros, "not an SQLite database"),
    ("truncated", _truncated, "not a whole number of 4096-byte pages"),
    ("header", _header, "not an SQLite database"),
    ("page", _page, ""),
    ("text", _text, "not an SQLite database"),
    ("directory", _directory, "is a directory"),
    ("fifo", _fifo, "is a FIFO"),
    ("devnull", _devnull, "is a device"),
    ("dropped-table", _sql("DROP TABLE lnodes"), "table lnodes missing"),
    ("newer", _sql("UPDATE alembic_version SET version_num = '9999'"), "revision 9999"),
    ("foreign", _foreign, "not a UDB: it holds tables (photos)"),
]


@pytest.mark.parametrize("kind, damage, says", CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_a_damaged_or_foreign_udb_gives_one_line_and_is_left_untouched(
    tmp_path, template, kind, damage, says
):
    path = tmp_path / "udb.sqlite"
    shutil.copy(template, path)
    damage(path)
    before = digest(path)
    for name, cmd, args, writes in COMMANDS:
        r = invoke(cmd, args, str(path), tmp_path)
        if kind == "page" and not writes:
            # A reader that never reads the garbled page may well succeed (or fail for
            # its own reasons), but never with a traceback.
            if r.exit_code != 0:
                one_line_exit_2(r)
            continue
        named = "/dev/null" if kind == "devnull" else str(path)  # the symlink resolved
        line = one_line_exit_2(r, named, says)
        assert "Traceback" not in r.output, (name, line)
        assert digest(path) == before, f"{name} changed the {kind} file"
    if kind == "newer":
        assert "needs a fairshare with schema revision 9999" in line
    if kind in ("directory", "fifo", "devnull"):
        assert not path.is_file() or path.is_symlink()


@pytest.mark.parametrize("empty", [False, True], ids=["missing", "empty"])
def test_only_udbgen_creates_a_udb(tmp_path, empty):
    path = tmp_path / "new.sqlite"
    if empty:
        path.touch()
    for name, cmd, args, _writes in COMMANDS:
        if name == "udbgen":
            continue
        r = invoke(cmd, args, str(path), tmp_path)
        one_line_exit_2(r, f"no UDB at {path}", "create one with udbgen")
        assert path.exists() == empty and (not empty or path.stat().st_size == 0), name
    r = invoke(udbgen, ["-c", "create:a:uid:5:"], str(path), tmp_path)
    one_line_exit_2(r, f"no UDB at {path}; udbgen --init creates one", "--create")
    assert path.exists() == empty
    r = invoke(udbgen, ["-p", "--create", "-c", "create:a:uid:5:"], str(path), tmp_path)
    one_line_exit_2(r, f"no UDB at {path}: test mode (-p) does not create one")
    assert path.exists() == empty
    r = invoke(
        udbgen, ["--create", "-c", "create:a:uid:5:gids:1:"], str(path), tmp_path
    )  # a gid: no warning
    assert r.exit_code == 0, r.output
    assert r.stderr.strip() == f"udbgen: created a new UDB at {path}"
    r = invoke(udbgen, ["-c", "create:b:uid:6:gids:1:"], str(path), tmp_path)
    assert r.exit_code == 0 and r.stderr == ""  # said once, when it was made


def test_a_refused_first_run_of_udbgen_leaves_no_udb(tmp_path):
    path = tmp_path / "new.sqlite"
    r = invoke(udbgen, ["--create", "-c", "update:nobody:shares:1:"], str(path), tmp_path)
    one_line_exit_2(r, "no entry named nobody")
    assert sorted(os.listdir(tmp_path)) == ["scenario.toml"]


def test_a_missing_parent_directory_is_not_made_by_a_reader(tmp_path):
    path = tmp_path / "no" / "such" / "udb.sqlite"
    one_line_exit_2(invoke(udbsee, ["-a"], str(path), tmp_path), f"no UDB at {path}")
    assert not (tmp_path / "no").exists()


def test_udbgen_makes_no_directory_for_a_udb_at_a_mistyped_path(tmp_path):
    path = tmp_path / "no" / "such" / "udb.sqlite"
    for args in (["--init"], ["--create", "-c", "create:a:uid:5:"]):
        r = invoke(udbgen, args, str(path), tmp_path)
        one_line_exit_2(r, f"no directory {path.parent} for the UDB")
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize(
    "url, says",
    [
        ("mysql://alice:s3cret@db.example/udb", "no database driver for 'mysql'"),
        ("postgresql://alice:s3cret@db.example:port99/udb", "cannot parse the UDB URL"),
        ("postgresql+psycopg://alice:s3cret@127.0.0.1:1/udb", "cannot use the UDB"),
    ],
    ids=["no-driver", "unparsable", "unreachable"],
)
def test_an_unusable_url_gives_one_line_with_the_password_masked(tmp_path, url, says):
    for name, cmd, args, _writes in COMMANDS:
        r = invoke(cmd, args, url, tmp_path)
        line = one_line_exit_2(r, says, "alice:***@")
        assert "s3cret" not in r.output, (name, line)


# -- the single-daemon lock under every spelling ----------------------------------------------


def spellings(directory: Path) -> list[str]:
    (directory / "sub").mkdir()
    (directory / "link.sqlite").symlink_to(directory / "c.sqlite")
    return [
        f"sqlite:///{directory}/./c.sqlite",
        f"sqlite:///{directory}//c.sqlite",
        f"sqlite:///{directory}/sub/../c.sqlite",
        f"sqlite:///{directory}/link.sqlite",
    ]


def test_every_spelling_of_one_udb_finds_the_same_lock(tmp_path, template):
    shutil.copy(template, tmp_path / "c.sqlite")
    held = DaemonLock(f"sqlite:///{tmp_path}/c.sqlite", "c")
    held.acquire()
    try:
        for url in spellings(tmp_path):
            with pytest.raises(AlreadyRunning, match=f"already served by pid {os.getpid()}"):
                DaemonLock(url, url).acquire()
        DaemonLock(f"sqlite:///{tmp_path}/c.sqlite", "c", host="another").acquire()
    finally:
        held.release()
    # The lock file sits beside the database, the same for root and everyone else.
    assert held.path.parent == tmp_path and held.path.name.startswith(".shrdaemon-")


def test_a_second_daemon_under_another_spelling_is_refused(tmp_path, template):
    shutil.copy(template, tmp_path / "c.sqlite")
    held = DaemonLock(f"sqlite:///{tmp_path}/c.sqlite", "c")
    held.acquire()
    try:
        for url in spellings(tmp_path):
            r = CliRunner().invoke(shrdaemon, ["--udb", url, "--once", "--enforcer", "none"])
            one_line_exit_2(r, "is already served by pid")
    finally:
        held.release()


# -- the lock's file and directory, taken on trust no more (Guard, Books #5) ---------------------


def test_the_lock_is_keyed_on_the_file_not_on_its_name(tmp_path, template):
    """Books #5: the lock file's name held the database's file name, so another name of
    the same file found a lock of its own."""
    db = tmp_path / "c.sqlite"
    shutil.copy(template, db)
    before = lock_path(f"sqlite:///{db}")
    db.rename(tmp_path / "e.sqlite")
    assert lock_path(f"sqlite:///{tmp_path}/e.sqlite") == before
    assert before.parent == tmp_path and before.name.startswith(".shrdaemon-")


def test_a_udb_file_with_a_second_hard_link_is_refused(tmp_path, template):
    """Books #5: a daemon on a hard link of a served UDB took a lock of its own, and
    SQLite kept a WAL of its own for the second name: writes were lost."""
    db = tmp_path / "c.sqlite"
    shutil.copy(template, db)
    held = DaemonLock(f"sqlite:///{db}", "c")
    held.acquire()
    try:
        os.link(db, tmp_path / "d.sqlite")
        for name in ("d.sqlite", "c.sqlite"):
            r = invoke(shrdaemon, ["--once", "--enforcer", "none"], str(tmp_path / name), tmp_path)
            one_line_exit_2(r, f"{tmp_path / name}: the UDB file has 2 hard links")
        r = invoke(udbgen, ["-c", "create:zz:uid:4242:"], str(tmp_path / "d.sqlite"), tmp_path)
        one_line_exit_2(r, "2 hard links: SQLite would keep a separate WAL for each name")
    finally:
        held.release()


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775, 0o757])
def test_a_udb_directory_others_can_write_is_refused(tmp_path, template, mode):
    """Guard: the lock file was made wherever the UDB was, so whoever could write there
    could plant it (a symbolic link, a lock they hold) before the daemon."""
    where = tmp_path / "shared"
    where.mkdir()
    shutil.copy(template, where / "c.sqlite")
    where.chmod(mode)
    r = invoke(shrdaemon, ["--once", "--enforcer", "none"], str(where / "c.sqlite"), tmp_path)
    one_line_exit_2(
        r, f"UDB directory {where}: writable by group or others (mode {mode:04o})", "refused"
    )
    assert not [p for p in where.iterdir() if p.name.endswith(".lock")]
    # Nor below a directory others may write (and swap for their own), unless sticky.
    where.chmod(0o755)
    (where / "below").mkdir()
    shutil.copy(template, where / "below" / "c.sqlite")
    where.chmod(mode)
    r = invoke(shrdaemon, ["--once", "--enforcer", "none"], f"{where}/below/c.sqlite", tmp_path)
    if mode & 0o1000:
        assert r.exit_code == 0, r.output
    else:
        one_line_exit_2(r, f"{where} (above {where}/below): writable by group or others")


def test_the_lock_file_is_never_opened_through_a_symbolic_link(tmp_path, template):
    """Guard: the lock file was opened, truncated and written through whatever link sat
    at its (predictable) name."""
    db = tmp_path / "c.sqlite"
    shutil.copy(template, db)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o600)
    lock = DaemonLock(f"sqlite:///{db}", "c")
    lock.path.symlink_to(victim)
    with pytest.raises(Untrusted, match="is a symbolic link: not followed, refused"):
        lock.acquire()
    r = invoke(shrdaemon, ["--once", "--enforcer", "none"], str(db), tmp_path)
    one_line_exit_2(r, f"lock {lock.path}: is a symbolic link")
    assert victim.read_text() == "precious\n"


HOLD_WITH_TEXT = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, sys.argv[2].encode())
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(30)
"""


def test_what_a_lock_file_holds_is_only_ever_repeated_as_a_pid(tmp_path):
    """Guard: whoever held the lock could write any text into it, and the refused
    daemon printed that text in its error."""
    path = tmp_path / "shrdaemon.lock"
    text = "\x1b[2J\x1b[31mpid 1 (systemd)\nERROR: run rm -rf / to fix"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_WITH_TEXT, str(path), text], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(AlreadyRunning) as err:
            DaemonLock("sqlite:///x", "/x.sqlite", path).acquire()
        assert str(err.value) == f"UDB /x.sqlite is already served by pid ? (lock {path})"
    finally:
        holder.kill()
        holder.wait()


# -- the directive language, fuzzed in-process -------------------------------------------------

VALUES = [
    "0", "1", "25", "-1", "4294967294", "4294967295", "2147483647", "2147483648",
    "9" * 50, "9" * 5000, "1e308", "-1e308", "1e30", "1e31", "nan", "inf", "-inf", "0x10",
    "", " ", "1,2,3", "1,,2", "040000", "01000000", "0777777777777", "Proj1", "u1", "*",
    "a\x00b", "\x1b[2J", "é", "#", "1.5", "+3", "-20", "19", "20",
]  # fmt: skip
BASE = [
    "create:n{i}:uid:{u}:resgrp:Proj1:shares:10:",
    "update:u{k}:shares:5:",
    "update:u{k}:nice:3:comment:hi:",
    "delete:u{k}:",
    "acid:p{i}:{u}:",
    "create:g{i}:uid:{u}:shflags:040000:shares:1:",
    "update:Proj1:shares:7:",
]


def fuzz_lines(seed: int, count: int) -> list[str]:
    """`count` directive lines: valid ones mutated at one token (value, field, separator)."""
    rng = random.Random(seed)
    fields = [*d.FIELDS, "gid", "colour"]
    out = []
    for i in range(count):
        line = rng.choice(BASE).format(i=i, u=5000 + i, k=rng.randint(1, 12))
        parts = line.split(":")
        j = rng.randrange(len(parts))
        roll = rng.random()
        if roll < 0.6:
            parts[j] = rng.choice(VALUES)
        elif roll < 0.8:
            parts[j] = rng.choice(fields)
        elif roll < 0.9:
            parts.insert(j, rng.choice(VALUES))
        else:
            del parts[j]
        out.append(":".join(parts))
    return out


def test_fuzzed_directives_are_applied_or_refused_cleanly(tmp_path, template):
    path = tmp_path / "udb.sqlite"
    shutil.copy(template, path)
    engine = open_udb(str(path))
    before = snapshot(path)
    engine = open_udb(str(path))
    lines = fuzz_lines(2024, 10_000)
    parsed = refused = applied = 0
    batch: list = []
    for n, line in enumerate(lines, 1):
        try:
            batch += d.parse(line, "fuzz")
            parsed += 1
        except UdbError:
            refused += 1
        if n % 25 == 0 and batch:
            try:
                d.run(engine, batch, test=True)  # planned, checked, written, rolled back
                applied += 1
            except UdbError:
                refused += 1
            batch = []
    assert parsed > 2000 and refused > 2000 and applied > 10  # the fuzz reaches both sides
    assert snapshot(path) == before  # (how long 10,000 lines take: bench_responsiveness.py)
    # Every value the parser accepted is within its field's documented range.
    for line in lines:
        try:
            for directive in d.parse(line, "fuzz"):
                for fname, value, _ in directive.fields:
                    check_in_range(fname, value)
        except UdbError:
            pass


def check_in_range(fname: str, value) -> None:
    from udb import rules as m

    bounds = {
        "uid": (0, m.MAX_ID), "acid": (0, m.MAX_ID), "shares": (0, m.MAX_SHARES),
        "shflags": (0, m.MAX_SHFLAGS), "shusage": (0, m.MAX_USAGE),
        "shcharge": (0, m.MAX_USAGE), "shextime": (0, m.MAX_EPOCH),
        "cpuquota": (0, m.MAX_CPU_SECONDS), "cpuquotaused": (0, m.MAX_CPU_SECONDS),
        "nice": (-20, 19),
    }  # fmt: skip
    if fname in bounds:
        lo, hi = bounds[fname]
        assert lo <= value <= hi, (fname, value)
    elif fname in ("gids", "acids"):
        assert all(isinstance(v, str) or 0 <= v <= m.MAX_ID for v in value), (fname, value)
    elif fname in ("comment", "passwd"):
        assert value.isprintable() and len(value) <= m.MAX_COMMENT


def test_a_sample_of_fuzzed_runs_through_the_command_changes_nothing(tmp_path, template):
    path = tmp_path / "udb.sqlite"
    shutil.copy(template, path)
    lines = fuzz_lines(99, 400)
    for k in range(0, 400, 20):
        before = snapshot(path)
        dispose_all()
        r = CliRunner().invoke(
            udbgen, ["--udb", str(path), "-"], input="\n".join(lines[k : k + 20])
        )
        assert r.exit_code in (0, 2), (r.output, r.exception)
        assert isinstance(r.exception, SystemExit | None), r.exception
        if r.exit_code == 2:
            assert len(r.stderr.strip().splitlines()) == 1
            assert snapshot(path) == before


def snapshot(path: Path):
    dispose_all()
    engine = open_udb(str(path))
    with read_session(engine) as s:
        return [
            listing.format_entry(e) for e in listing.select_entries(s)
        ], listing.select_accounts(s)


# -- huge and non-finite numbers in every option ------------------------------------------------

NUMBERS = ["1e308", "-1e308", "nan", "inf", "-inf", "9" * 400, "-" + "9" * 30, "1e-300", "0"]

#: (command, arguments before the number, option) for every numeric option.
OPTIONS = [
    *[
        (shradmin, [], opt)
        for opt in (
            "-K",
            "-R",
            "-t",
            "-b",
            "-s",
            "-m",
            "-y",
            "--sio",
            "-X",
            "-Y",
            "-Z",
            "-U",
            "-G",
            "-n",
            "--checkpoint",
            "--quota-threshold",
        )
    ],  # fmt: skip
    (shradmin, [], ""),  # PERCENT
    (shradmin, [], "-D"),
    (shradmin, ["--history"], "--last"),
    (shrdist, ["--history"], "--last"),
    (udbgen, ["-a"], "-G"),
    (udbgen, ["--passwd", "/etc/passwd", "--resgrp", "Proj1", "-p"], "--shares"),
    (udbgen, ["--passwd", "/etc/passwd", "--resgrp", "Proj1", "-p"], "--min-uid"),
    (udbgen, ["--passwd", "/etc/passwd", "--resgrp", "Proj1", "-p"], "--max-uid"),
    (shrdaemon, ["--simulate", "SCENARIO", "--enforcer", "none"], "--cycles"),
    (shrdaemon, ["--simulate", "SCENARIO", "--cycles", "2"], "--enforce-min-uid"),
    (shrview, [], "-r"),
    (shrview, [], "--now"),
    (shrtree, [], "--now"),
    (shrinfo, ["u1"], "--now"),
    (shrsync, ["-u"], "--timeout"),
    (shrsim, ["SCENARIO"], "--window"),
]


@pytest.mark.parametrize(
    "cmd, before, option", OPTIONS, ids=[f"{c.name}{o}" for c, _, o in OPTIONS]
)
def test_huge_and_non_finite_numbers_in_every_option(tmp_path, template, cmd, before, option):
    path = tmp_path / "udb.sqlite"
    shutil.copy(template, path)
    (tmp_path / "scenario.toml").write_text(SCENARIO)
    for number in NUMBERS:
        value = f"{number},60" if option == "-D" else number
        args = [str(tmp_path / "scenario.toml") if a == "SCENARIO" else a for a in before]
        args += [option, value] if option else ["--", value]
        dispose_all()
        r = CliRunner().invoke(cmd, ["--udb", str(path), *args])
        assert isinstance(r.exception, SystemExit | None), (args, r.exception)
        assert r.exit_code in (0, 1, 2), (args, r.output)
        if r.exit_code == 2:  # one line, or click's usage lines ending with the error
            lines = [line for line in r.stderr.splitlines() if line.strip()]
            assert len(lines) == 1 or (len(lines) == 3 and lines[-1].startswith("Error:")), lines
    dispose_all()
    with read_session(open_udb(str(path))) as s:  # whatever was accepted is in range
        from fairshare.core.consts import validate
        from fairshare.store.config import load_consts

        validate(load_consts(s))


# -- the constants at the edges of their ranges --------------------------------------------------


def edge_values():
    from fairshare.core.consts import ALL_FLAGS, RANGES, SHAREBYACCT

    # Every flag but SHAREBYACCT, which changes whose lnodes there are, not the arithmetic.
    out = [("flags", 0), ("flags", ALL_FLAGS & ~SHAREBYACCT)]
    for name, rng in RANGES.items():
        if name == "nice_decay":
            out += [(name, (rng.smallest, rng.smallest)), (name, (rng.largest, rng.largest))]
        else:
            out += [(name, rng.smallest), (name, rng.largest)]
    return out


EDGE_SCENARIO = """
cpus = 2
duration = "{duration}s"
delta = "{delta}s"
directives = '''
create:G:uid:500:shflags:040000:shares:3:
create:u1:uid:1001:resgrp:G:shares:1:shusage:1e30:cpuquota:1e12:
create:u2:uid:1002:resgrp:G:shares:2147483647:
create:u3:uid:4294967294:shares:0:
'''
[consts]
{name} = {value}
[[workload]]
name = "u1"
procs = 50
[[workload]]
name = "u2"
procs = 3
[[workload]]
name = "u3"
"""


@pytest.mark.parametrize("name, value", edge_values(), ids=lambda v: str(v)[:12])
def test_every_constant_at_its_edges_runs_the_daemon_and_the_simulator(tmp_path, name, value):
    from fairshare.sim.run import run_scenario
    from fairshare.sim.scenario import load_scenario

    if name == "halflife":
        toml_value = f'"{value!r}s"'
    elif name == "nice_decay":
        toml_value = f'"{value[0]!r},{value[1]!r}"'
    else:
        toml_value = repr(value)
    delta = value if name == "delta" else 4.0
    scenario = tmp_path / "edge.toml"
    scenario.write_text(
        EDGE_SCENARIO.format(duration=10 * delta, delta=delta, name=name, value=toml_value)
    )
    result = run_scenario(load_scenario(scenario))  # the simulator: ends, all finite
    for m in result.lnodes:
        assert all(map(_finite, (m.entitled, m.delivered))), m
    url = f"sqlite:///{tmp_path / 'udb.sqlite'}"
    r = CliRunner().invoke(
        shrdaemon, ["--udb", url, "--simulate", str(scenario), "--show", "--json"]
    )
    assert r.exit_code == 0, (r.output, r.exception)
    assert "not finite" not in r.stderr


def _finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")


# -- the cycle never stores a non-finite number ------------------------------------------------


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's overflow, on purpose
def test_a_non_finite_value_is_logged_and_the_last_finite_one_kept(tmp_path, template, caplog):
    # A usage near the largest float, written behind udbgen's back (an old UDB): the
    # priority overflows to infinity.  The daemon logs the lnode and keeps scheduling.
    from fairshare.sim.daemon import simulated_daemon
    from fairshare.store.published import LnodeStore
    from udb.models import Entry

    path = tmp_path / "udb.sqlite"
    shutil.copy(template, path)
    engine = open_udb(str(path))
    with write_session(engine) as s:
        s.query(Entry).filter(Entry.name.in_(["u1", "u2"])).update(
            {"shusage": 1.7e308, "shextime": 1e9}
        )
    scenario = tmp_path / "scenario.toml"  # u1 and u2 of Maint: the group's usage overflows
    scenario.write_text(SCENARIO + '[[workload]]\nname = "u2"\n')
    daemon, _, _ = simulated_daemon(engine, str(scenario), epoch=1e9)
    logger = logging.getLogger("shrdaemon")  # shrdaemon's own handler may not propagate
    logger.addHandler(caplog.handler)
    try:
        assert daemon.run(5) == 5
    finally:
        logger.removeHandler(caplog.handler)
    assert "lnode Maint: usage was not finite" in caplog.text, caplog.text
    _, rows = LnodeStore(engine, "simulator").read_published()
    for row in rows:
        for f in ("usage", "charge", "rate", "m_share", "e_share", "cpu", "priority"):
            assert _finite(getattr(row, f)), (row.name, f)
    with read_session(engine) as s:
        assert _finite(s.query(Entry.shusage).filter(Entry.name == "u1").scalar())


def test_a_stored_constant_out_of_range_is_ignored_with_a_warning(tmp_path, template, caplog):
    # shradmin 1e308 used to be accepted, and then every daemon start failed.  A value
    # stored before ranges were checked no longer stops anything.
    from fairshare.core.consts import Consts
    from fairshare.store.config import load_consts
    from udb.models import Const

    path = tmp_path / "udb.sqlite"
    shutil.copy(template, path)
    engine = open_udb(str(path))
    with write_session(engine) as s:
        s.add_all([Const(name="cost_tick", value=1e308), Const(name="delta", value=1e-300)])
    log = caplog.at_level(logging.WARNING, logger="fairshare.core.consts")
    with log, read_session(engine) as s:
        c = load_consts(s)
    assert (c.cost_tick, c.delta) == (Consts().cost_tick, Consts().delta)
    assert "stored constant ignored, set it again with shradmin: cost_tick" in caplog.text
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(SCENARIO.replace('delta = "4s"\n', ""))
    dispose_all()
    r = CliRunner().invoke(shrdaemon, ["--udb", str(path), "--simulate", str(scenario)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(shradmin, ["--udb", str(path), "-t", "50", "-R", "4"])  # fixed
    assert r.exit_code == 0, r.output
    with read_session(open_udb(str(path))) as s:
        assert (load_consts(s).cost_tick, load_consts(s).delta) == (50.0, 4.0)


SMALL = """
cpus = {cpus}
duration = "{duration}"
delta = "{delta}"
directives = "create:a:uid:5:shares:1:"
[consts]
cost_tick = {cost}
[[workload]]
name = "a"
procs = {procs}
"""


@pytest.mark.parametrize(
    "change, says",
    [
        ({"delta": "1e-300s"}, "delta: expected a number from 0.1 to 3600 s"),
        ({"delta": "0.1s", "duration": "100000h"}, "duration: expected at most 1,000,000 cycles"),
        ({"cpus": "1e308"}, "cpus: expected a number of CPUs above 0 up to 100000"),
        ({"cpus": "nan"}, "cpus"),
        ({"cost": "1e308"}, "cost_tick: expected a number from 0 to 1e+06"),
        ({"procs": "9" * 30}, "procs: expected 1 to 1,000,000 processes"),
    ],
    ids=["delta", "cycles", "cpus", "nan-cpus", "cost", "procs"],
)
def test_scenarios_with_huge_or_tiny_numbers_are_refused_at_once(tmp_path, change, says):
    # A scenario with delta = 1e-300 made shrsim run without end at 100% CPU.
    values = {"cpus": "1", "duration": "1h", "delta": "4s", "cost": "100", "procs": "1"}
    scenario = tmp_path / "s.toml"
    scenario.write_text(SMALL.format(**{**values, **change}))
    r = CliRunner().invoke(shrsim, [str(scenario)])  # (how soon: bench_responsiveness.py)
    one_line_exit_2(r, str(scenario), says)


SCENARIO_KEYS = [
    "cpus", "duration", "delta", "warmup",
    *(f"consts.{c}" for c in ("halflife", "delta", "cost_tick", "cost_mem", "percent",
                              "maxushare", "mingshare", "sharemin", "maxusage", "maxlevels",
                              "writeback", "quota_threshold")),
    "workload.procs", "workload.start", "workload.stop", "workload.demand",
]  # fmt: skip
TOML_NUMBERS = ["1e308", "-1e308", "nan", "inf", "-inf", "9" * 400, "-" + "9" * 30, "1e-300"]


@pytest.mark.parametrize("key", SCENARIO_KEYS)
def test_huge_and_non_finite_numbers_in_every_scenario_key(tmp_path, key):
    from fairshare.sim.scenario import MAX_CYCLES, ScenarioError, parse_scenario

    section, _, name = key.rpartition(".")
    for number in TOML_NUMBERS:
        top = {"cpus": "1", "duration": '"1h"', "delta": '"4s"'}
        consts = {}
        workload = {"name": '"a"'}
        {"": top, "consts": consts, "workload": workload}[section][name] = number
        text = "".join(f"{k} = {v}\n" for k, v in top.items())
        text += 'directives = "create:a:uid:5:shares:1:"\n[consts]\n'
        text += "".join(f"{k} = {v}\n" for k, v in consts.items())
        text += "[[workload]]\n" + "".join(f"{k} = {v}\n" for k, v in workload.items())
        try:
            sc = parse_scenario(text, "s.toml")
        except ScenarioError as err:
            assert "\n" not in str(err)
            continue
        assert sc.duration / sc.delta <= MAX_CYCLES and sc.cpus <= 100_000, (key, number)


# -- udbgen --replace ----------------------------------------------------------------------------


def test_replace_with_an_empty_input_is_refused_without_force(tmp_path, template):
    path = tmp_path / "udb.sqlite"
    shutil.copy(template, path)
    before = snapshot(path)
    n = len(before[0])
    dispose_all()
    r = CliRunner().invoke(udbgen, ["--udb", str(path), "--replace", "-"], input="")
    one_line_exit_2(r, f"{n} entries", "--force")
    assert snapshot(path) == before
    dispose_all()
    r = CliRunner().invoke(udbgen, ["--udb", str(path), "--replace", "--force", "-"], input="")
    assert r.exit_code == 0, r.output
    assert snapshot(path) == ([], [])


def test_fifo_is_never_opened(tmp_path):
    # SQLite would block forever on a FIFO; the check comes first.
    fifo = tmp_path / "udb.sqlite"
    os.mkfifo(fifo)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    one_line_exit_2(invoke(udbsee, ["-a"], str(fifo), tmp_path), "is a FIFO")
