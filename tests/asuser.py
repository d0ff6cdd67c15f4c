"""Run a click command in-process as a real unprivileged uid (system tests that require
root: @pytest.mark.requires("root"), tests/conftest.py).

`run_as(uid, command, args)` forks; the child drops every group and sets its gid and
uid (so it really is that user: files, the UDB, the auth file are checked by the
kernel), runs the command through CliRunner and sends its exit code and output back
through a pipe; `forked(fn, uid=..., new_session=...)` is the general form.
Everything the command needs must be imported before the fork, since the child
cannot read the interpreter's files under /root afterwards.

`shared_dir()` makes a directory every test uid can use (the pytest tmp_path under
/tmp/pytest-of-root is not); a SQLite UDB there must be world-writable for its WAL.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import traceback
from pathlib import Path

from click.testing import CliRunner

from udb.session import dispose_all

#: Test uids with no passwd entry: their login name is their number (fairshare.admin.shrdist).
UIDS = (62001, 62002, 62003)


def forked(fn, *, uid: int | None = None, new_session: bool = False):
    """Call `fn()` in a forked child and return its result (anything JSON can carry).

    The child first leads a session of its own when `new_session` (so getsid names
    it even where the test runs in init's session, whose id reads 0 in a container),
    then drops every group and becomes real uid and gid `uid` when given.  An
    exception in the child fails the caller with the child's traceback.
    """
    dispose_all()  # no connection of ours is shared with the child
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.close(r)
            if new_session:
                os.setsid()
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                os.umask(0)  # SQLite's -wal and -shm must stay usable by the next uid
            data = json.dumps({"result": fn()})
            dispose_all()
        except BaseException:  # noqa: BLE001 - report anything to the parent
            data = json.dumps({"error": traceback.format_exc()})
        with os.fdopen(w, "w") as f:
            f.write(data)
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        data = f.read()
    os.waitpid(pid, 0)
    reply = json.loads(data) if data else {"error": "the child died without a word"}
    if "error" in reply:
        raise AssertionError(f"in the forked child:\n{reply['error']}")
    return reply["result"]


def run_as(uid: int, command, args: list[str], env: dict | None = None) -> tuple[int, str]:
    """Run `command` (a click command) with `args` as real uid and gid `uid`.

    Returns its exit code and output (stdout and stderr together).
    """

    def invoke():
        result = CliRunner().invoke(command, args, env=env, catch_exceptions=True)
        out = result.output
        if result.exception and not isinstance(result.exception, SystemExit):
            out += f"\nexception: {result.exception!r}"
        return result.exit_code, out

    return tuple(forked(invoke, uid=uid))


def shared_dir() -> Path:
    """A new directory under /tmp that every uid may use (remove it with `remove`)."""
    path = Path(tempfile.mkdtemp(prefix="fairshare-asuser-", dir="/tmp"))
    path.chmod(0o777)
    return path


def open_up(directory: Path) -> None:
    """Make every file in `directory` readable and writable by everyone (the UDB)."""
    dispose_all()
    for p in directory.iterdir():
        if p.is_file() and p.name.startswith("udb"):
            p.chmod(0o666)


def remove(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)
