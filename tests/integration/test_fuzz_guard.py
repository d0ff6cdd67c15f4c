"""Guard, "How to know it is done": fuzzing with a fixed seed and a bounded number of
cases.  The commands over damaged and foreign databases, scenarios and auth files with
bad bytes, and socket requests of every malformed shape: never a traceback, every
refusal one line (exit 2, or one JSON error reply), and nothing changed by a refusal."""

from __future__ import annotations

import hashlib
import json
import logging
import random
import shutil
import socket
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from fairshare.admin.shrdist import Caller, NotAuthorised, authorise, read_auth
from fairshare.cli.shradmin import main as shradmin
from fairshare.cli.shrdist import main as shrdist
from fairshare.cli.shrinfo import main as shrinfo
from fairshare.cli.shrtree import main as shrtree
from fairshare.cli.shrview import main as shrview
from fairshare.core.tree import build_tree
from fairshare.daemon.sessions import SessionAccounts
from fairshare.server.server import Server
from fairshare.sim.scenario import load_scenario, scenario_brings_udb
from fairshare.store.config import load_consts, tree_rows
from udb.cli.udbgen import main as udbgen
from udb.cli.udbsee import main as udbsee
from udb.errors import UdbError
from udb.session import dispose_all, open_udb, read_session

ROOT_DIR = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT_DIR / "examples" / "scenarios").glob("0[1-6]_*.toml"))
SEED = 30  # the number: the same cases on every run

READERS = (
    (udbsee, ["-a"]),
    (shrtree, ["-l"]),
    (shrinfo, []),
    (shrview, ["-dm"]),
    (shradmin, []),
    (shrdist, ["--history"]),
    (udbgen, ["-c", "create:zz:uid:7001:resgrp:Proj2:shares:1:"]),
)


def settled(url: str) -> Path:
    """The SQLite file of `url` with its WAL folded in and removed, so that the file
    alone is the UDB (what a copy or a damaged disk sees), in WAL mode as udbgen left it."""
    dispose_all()
    path = Path(url.removeprefix("sqlite:///"))
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()  # the last connection: the -wal file goes (the file stays in WAL mode)
    return path


def check_one_line(result, what: str) -> None:
    """No traceback; exit 0, or 2 with one line on stderr."""
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        what,
        repr(result.exception),
    )
    assert "Traceback" not in result.output, (what, result.output)
    assert result.exit_code in (0, 2), (what, result.exit_code, result.output)
    if result.exit_code == 2:
        assert len(result.stderr.strip().splitlines()) == 1, (what, result.stderr)


def run_readers(db: Path, what: str) -> set[int]:
    """Every command of READERS on the UDB file `db`; the exit statuses seen."""
    codes = set()
    for cmd, args in READERS:
        before = db.read_bytes()
        r = CliRunner().invoke(cmd, ["--udb", str(db), *args])
        dispose_all()
        check_one_line(r, f"{what}: {cmd.name} {args}")
        if r.exit_code == 2:
            assert db.read_bytes() == before, f"{what}: {cmd.name} refused but wrote"
        codes.add(r.exit_code)
    return codes


def test_the_commands_over_damaged_udbs(acme, tmp_path):
    """Bytes flipped in the schema page and at random through the file, as a bad disk
    or a stray write leaves them."""
    good = settled(acme)
    data = good.read_bytes()
    rng = random.Random(SEED)
    seen = set()
    for case in range(24):
        damaged = bytearray(data)
        # Half the cases in the first page (the header and the schema), half anywhere.
        span = 4096 if case % 2 == 0 else len(data)
        for _ in range(rng.randint(1, 12)):
            damaged[rng.randrange(100 if span == 4096 else 0, span)] = rng.randrange(256)
        db = tmp_path / f"damaged{case}.sqlite"
        db.write_bytes(bytes(damaged))
        seen |= run_readers(db, f"damaged case {case}")
    assert 2 in seen  # some damage was found and refused


def test_the_commands_over_foreign_databases(tmp_path):
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('not a UDB')")
    conn.commit()
    conn.close()
    named = tmp_path / "names.sqlite"
    conn = sqlite3.connect(named)
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("CREATE TABLE t (a)")
    conn.execute("UPDATE sqlite_master SET name = CAST(X'74FF' AS TEXT) WHERE name = 't'")
    conn.commit()
    conn.close()
    rng = random.Random(SEED)
    foreign = {
        "another program's database": other,
        "a schema name not UTF-8": named,
        "random bytes": tmp_path / "random.sqlite",
        "a text file": tmp_path / "text.sqlite",
        "a SQLite header and garbage": tmp_path / "header.sqlite",
    }
    foreign["random bytes"].write_bytes(rng.randbytes(8192))
    foreign["a text file"].write_text("create:u1:uid:1:\n" * 50)
    foreign["a SQLite header and garbage"].write_bytes(b"SQLite format 3\0" + rng.randbytes(4080))
    for what, db in foreign.items():
        assert run_readers(db, what) == {2}, what


def mutations(data: bytes, rng: random.Random, count: int):
    """`count` copies of `data` with bytes that are not UTF-8 put in, or bytes changed."""
    for _ in range(count):
        out = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(out) + 1)
            if rng.random() < 0.5:
                out[at:at] = bytes([rng.randrange(0x80, 0x100)])
            elif out:
                out[min(at, len(out) - 1)] = rng.randrange(256)
        yield bytes(out)


def test_scenarios_with_bad_bytes(tmp_path, udb_url):
    rng = random.Random(SEED)
    path = tmp_path / "s.toml"
    loaded = refused = 0
    for scenario in SCENARIOS:
        for data in mutations(scenario.read_bytes(), rng, 10):
            path.write_bytes(data)
            try:
                scenario_brings_udb(path)
                load_scenario(path, udb=udb_url)
                loaded += 1
            except UdbError as err:
                assert "\n" not in str(err)
                refused += 1
    assert refused and loaded + refused == 10 * len(SCENARIOS)


def test_auth_files_with_bad_bytes(acme, tmp_path):
    rng = random.Random(SEED)
    auth = tmp_path / "shrdist.auth"
    with read_session(open_udb(acme)) as s:
        tree = build_tree(tree_rows(s), load_consts(s).mode)
    root = Caller("root", 0, "root")
    someone = Caller("mlb", 1234, "mlb")
    for data in mutations(b"mlb Proj2\n# the leads\ncarol Proj3 dave Proj1\n", rng, 60):
        auth.write_bytes(data)
        auth.chmod(0o644)
        try:
            read_auth(auth)
        except UdbError as err:
            assert "\n" not in str(err)
        assert authorise(root, tree, None, auth).group in ("/", "Proj2")
        try:
            authorise(someone, tree, None, auth)
        except UdbError as err:  # NotAuthorised, OptionError, NotFound: one line each
            assert "\n" not in str(err)
    assert issubclass(NotAuthorised, UdbError)


# -- the socket ---------------------------------------------------------------------------------

REQUESTS = ("hello", "udb", "cycle", "shrdist", "newacct", "shrsync", "nothing")
FIELDS = (
    "v",
    "request",
    "host",
    "group",
    "shares",
    "test",
    "account",
    "session",
    "kind",
    "default",
)


def odd_value(rng: random.Random, depth: int = 0):
    """A JSON value of an unexpected shape."""
    choices = [
        None,
        True,
        False,
        0,
        -1,
        2**63,
        10**300,
        1.5,
        -0.0,
        1e308,
        "",
        "x" * 300,
        "\ud800",
        "a\u0000b",
        "٢١٠١",
        "Proj2",
        "u9",
        [],
        {},
    ]
    if depth < 3 and rng.random() < 0.3:
        if rng.random() < 0.5:
            return [odd_value(rng, depth + 1) for _ in range(rng.randint(1, 3))]
        return {str(odd_value(rng, 3)): odd_value(rng, depth + 1) for _ in range(rng.randint(1, 3))}
    return rng.choice(choices)


def malformed_lines(rng: random.Random, count: int):
    """Request lines of every malformed shape (no newline inside)."""
    fixed = [
        b"",
        b"{",
        b"[]",
        b"null",
        b"1",
        b'"hello"',
        b"{this is not json",
        b"\xff\xfe{}",
        b"[" * 30000 + b"]" * 30000,
        b'{"v": 1, "request": "hello", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"v": true, "request": "hello"}',
        b'{"v": 1.0, "request": "hello"}',
        b'{"v": "1", "request": "hello"}',
        b'{"v": 1, "request": "hello", "n": NaN}',
        b'{"v": 1, "request": "hello", "n": -Infinity}',
        b'{"v": 1, "request": "hello", "n": ' + b"9" * 5000 + b"}",
        b'{"v": 1, "request": "cycle", "host": "\\ud800"}',
        b'{"v": 1, "request": "shrdist", "test": true, "shares": {"u9": "\\u0661\\u0662"}}',
        b'{"v": 1, "request": "shrdist", "test": true, "shares": {"u9": "\xb2"}}',
        b'{"v": 1, "request": "newacct", "account": "\\u0662\\u0661\\u0660\\u0661"}',
    ]
    yield from fixed
    for _ in range(count - len(fixed)):
        req = {"v": 1, "request": rng.choice(REQUESTS)}
        for field in rng.sample(FIELDS, rng.randint(1, 4)):
            req[field] = odd_value(rng)
        if req.get("request") == "shrdist" and rng.random() < 0.8:
            req["test"] = True
        if req.get("request") == "shrsync":
            req["kind"] = rng.choice([None, 1, "", "everything", ["update"]])
        line = json.dumps(req).encode()
        if rng.random() < 0.15:  # cut short, or a byte that is not UTF-8 put in
            at = rng.randrange(len(line))
            line = line[:at] if rng.random() < 0.5 else line[:at] + b"\xc3" + line[at:]
        yield line


def digest(db: Path) -> str:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        h = hashlib.sha256()
        for table in ("entries", "accounts", "share_changes"):
            h.update(repr(conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()).encode())
        return h.hexdigest()
    finally:
        conn.close()


def ask_raw(path: str, line: bytes) -> dict:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    try:
        s.connect(path)
        s.sendall(line + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    assert data.endswith(b"\n") and data.count(b"\n") == 1, (line[:80], data[:200])
    return json.loads(data)


@pytest.fixture
def server(acme, tmp_path):
    base = tmp_path / "srv"
    base.mkdir(mode=0o755)
    shutil.copy(settled(acme), base / "udb.sqlite")
    engine = open_udb(str(base / "udb.sqlite"))
    srv = Server(str(base / "s.sock"), engine, "fuzz", SessionAccounts(), base / "auth")
    srv.start()
    yield srv, base / "udb.sqlite"
    srv.stop()


def test_socket_requests_of_every_malformed_shape(server, caplog):
    srv, db = server
    rng = random.Random(SEED)
    refused = 0
    with caplog.at_level(logging.WARNING, logger="shrdaemon"):
        for line in malformed_lines(rng, 250):
            before = digest(db)
            reply = ask_raw(srv.path, line)
            assert isinstance(reply, dict) and isinstance(reply.get("ok"), bool), reply
            if not reply["ok"]:
                refused += 1
                error = reply["error"]
                assert isinstance(error, str) and "\n" not in error
                assert "internal error" not in error, (line[:120], error)
                assert digest(db) == before, line[:120]
    assert refused > 150
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
