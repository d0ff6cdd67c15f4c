"""shrdaemon's socket: the one way users other than root read and change the UDB.

The daemon listens on a Unix-domain stream socket (shrdaemon --socket, default
/run/fairshare/shrdaemon.sock, mode 0666: anyone may ask).  The caller of each
request is the peer the kernel names (SO_PEERCRED: pid, uid, gid), never anything
the request says.  The protocol (newline-delimited JSON, one request and one reply
per connection) is documented in shrdaemon-protocol(7).

Serving never delays the scheduling cycle: it runs in threads of its own.  One
selector thread accepts connections, reads requests and writes replies without
ever blocking, holding each client to `Limits` (request size, time to send it, time
to take the reply, clients at once, per uid); a complete request goes to a small
pool of worker threads that answer it from the UDB (their own connections;
SQLite's WAL lets them read while the cycle writes) and hand the reply back, so no
client, however slow, holds a worker.  Every refused or broken request is logged
in one line naming the peer, a few lines per uid in a window (`PeerLog`).  A uid past
its pace of new connections is hung up on as soon as it is accepted, before anything
is read, sent or logged, and accepts go in batches, so a flood neither fills root's log
nor keeps the selector thread from the other clients; a uid's requests under way and
replies not taken are capped, so neither the workers nor the daemon's memory are one
uid's to take.  The connections and their count against the limits are
fairshare.server.clients; the requests, and who may make them,
fairshare.server.answers.
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import socket
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine

from fairshare.daemon.sessions import SessionAccounts
from fairshare.daemon.trust import Untrusted, untrusted_dir
from fairshare.server.answers import Answers, BadRequest, peer_of
from fairshare.server.clients import Client, Held, Pace, PeerLog, expired, wait
from udb.errors import UdbError
from udb.remote import VERSION

log = logging.getLogger("shrdaemon")

#: Connections accepted in one go before the held clients are served again.
ACCEPT_BATCH = 64


@dataclass(frozen=True)
class Limits:
    """What one client may ask of the daemon (documented in shrdaemon-protocol(7))."""

    max_request: int = 64 * 1024  # bytes, the request line with its newline
    request_timeout: float = 5.0  # s from connecting to the request's newline
    reply_timeout: float = 10.0  # s for the client to take the whole reply
    max_clients: int = 256  # connections held at once
    max_per_uid: int = 64  # connections held at once for one uid other than root
    reserve: int = 64  # of max_clients, kept for uids holding no connection
    workers: int = 4  # requests answered at once
    max_busy: int = 2  # requests of one uid other than root being answered at once
    max_unread: int = 64 * 1024 * 1024  # bytes of replies one uid has not taken
    rate: float = 100.0  # new connections a second, on average, for one uid other than root
    burst: int = 200  # new connections at once for one uid other than root
    log_lines: int = 20  # warnings about one uid's clients logged in log_window
    log_window: float = 10.0  # s


class Server:
    """The socket server for one daemon: its UDB `engine`, `host` (the published
    table's key), newacct's `accounts` and shrdist's `auth` file."""

    def __init__(
        self,
        path: str,
        engine: Engine,
        host: str,
        accounts: SessionAccounts | None,
        auth: Path,
        limits: Limits | None = None,
    ) -> None:
        self.path, self.engine, self.host = path, engine, host
        self.accounts = accounts
        self.auth = auth
        self.limits = limits or Limits()
        self.answers = Answers(engine, host, accounts, auth)  # .remote: shrdaemon's grid
        self.handlers = self.answers.handlers()
        self._listener: socket.socket | None = None
        self._inode: int | None = None
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._stop = threading.Event()
        lim = self.limits
        self._held = Held(
            lim.max_clients, lim.max_per_uid, lim.reserve, lim.max_busy, lim.max_unread
        )
        self._pace = Pace(lim.rate, lim.burst)
        self._log = PeerLog(log, lim.log_lines, lim.log_window)
        self._replies: list[Client] = []  # answered, waiting for the selector thread
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)

    # -- life -------------------------------------------------------------------------------

    def start(self) -> None:
        """Listen on the socket (replacing a stale one) and start serving.

        UdbError when the path is in use by a daemon that answers, or cannot be made;
        Untrusted when its directory is one others may write (fairshare.daemon.trust).
        """
        s = listen(self.path, self.limits.max_clients)
        s.setblocking(False)
        self._listener = s
        self._inode = os.lstat(self.path).st_ino
        self._pool = ThreadPoolExecutor(self.limits.workers, thread_name_prefix="shrdaemon-serve")
        self._thread = threading.Thread(target=self._loop, name="shrdaemon-socket", daemon=True)
        self._thread.start()
        log.info("serving requests on %s", self.path)

    def stop(self) -> None:
        """Stop serving and remove the socket (if it is still ours)."""
        self._stop.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(5)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        try:
            if os.lstat(self.path).st_ino == self._inode:
                os.unlink(self.path)
        except OSError:
            pass
        self._wake_r.close()
        self._wake_w.close()

    # -- the selector thread -------------------------------------------------------------------

    def _loop(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ)
        sel.register(self._wake_r, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(wait(sel)):
                    try:
                        self._event(sel, key)
                    except Exception:  # a bug: drop this client, keep serving the others
                        log.exception("socket %s: serving failed", self.path)
                        if isinstance(key.data, Client) and key.fileobj in sel.get_map():
                            self._close(sel, key.data)
                self._log.flush()
                for c in expired(sel, time.monotonic()):
                    if c.out:
                        why = f"did not take the reply to {c.request} within "
                        self._drop(sel, c, f"{why}{self.limits.reply_timeout:g} s")
                    else:
                        why = f"sent no complete request within {self.limits.request_timeout:g} s"
                        self._drop(sel, c, why)
        finally:
            for key in list(sel.get_map().values()):
                key.fileobj.close()
            sel.close()

    def _event(self, sel: selectors.BaseSelector, key: selectors.SelectorKey) -> None:
        if key.fileobj is self._listener:
            self._accept(sel)
        elif key.fileobj is self._wake_r:
            self._take_replies(sel)
        elif key.data.out:
            self._write(sel, key.data)
        else:
            self._read(sel, key.data)

    def _accept(self, sel: selectors.BaseSelector) -> None:
        # A bounded batch: under a flood the queue never empties, and the clients
        # already held must still be read and written between batches.
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:
                log.warning("socket %s: accept failed: %s", self.path, err)
                return
            peer = peer_of(conn)
            if not self._pace.allow(peer.uid, time.monotonic()):
                # Past its rate: hung up on at once, nothing read, sent or logged
                # but a few lines per window.
                conn.close()
                why = f"more than {self.limits.rate:g} connections a second: refused"
                self._log.warning(peer.uid, "%s: %s", peer, why)
                continue
            why = self._held.refusal(peer.uid)
            if why is not None:
                self._log.warning(peer.uid, "%s: refused: %s", peer, why)
                _send_nowait(conn, _error(f"busy: {why}, try again"))
                conn.close()
                continue
            self._held.hold(peer.uid)
            conn.setblocking(False)
            deadline = time.monotonic() + self.limits.request_timeout
            sel.register(conn, selectors.EVENT_READ, Client(conn, peer, deadline))

    def _read(self, sel: selectors.BaseSelector, c: Client) -> None:
        try:
            chunk = c.conn.recv(self.limits.max_request + 1)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(sel, c, "disconnected before completing a request")
            return
        c.buf += chunk
        end = c.buf.find(b"\n")
        if end < 0 and len(c.buf) < self.limits.max_request:
            return
        if end < 0 or end + 1 > self.limits.max_request:
            why = f"request longer than {self.limits.max_request} bytes"
            self._drop(sel, c, why, reply=True)
            return
        why = self._held.busy_refusal(c.peer.uid)
        if why is not None:
            self._drop(sel, c, why, reply=True)
            return
        sel.unregister(c.conn)
        self._held.work(c.peer.uid, +1)
        self._pool.submit(self._answer, c, bytes(c.buf[:end]))

    def _take_replies(self, sel: selectors.BaseSelector) -> None:
        """Start writing the replies the workers have finished."""
        try:
            self._wake_r.recv(4096)
        except BlockingIOError:
            pass
        while True:
            with self._lock:
                if not self._replies:
                    return
                c = self._replies.pop()
            uid = c.peer.uid
            self._held.work(uid, -1)
            why = self._held.unread_refusal(uid, len(c.out))
            if why is not None:
                self._log.warning(uid, "%s: %s refused: %s", c.peer, c.request, why)
                c.out = _encode(_error(why))
            c.pending = len(c.out)
            self._held.replies(uid, c.pending)
            c.deadline = time.monotonic() + self.limits.reply_timeout
            sel.register(c.conn, selectors.EVENT_WRITE, c)
            self._write(sel, c)

    def _write(self, sel: selectors.BaseSelector, c: Client) -> None:
        try:
            c.sent += c.conn.send(memoryview(c.out)[c.sent :])
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(sel, c, f"left before the reply to {c.request} was sent")
            return
        if c.sent >= len(c.out):
            self._close(sel, c)

    def _drop(self, sel, c: Client, why: str, reply: bool = False) -> None:
        self._log.warning(c.peer.uid, "%s: %s: dropped", c.peer, why)
        if reply:
            _send_nowait(c.conn, _error(why))
        self._close(sel, c)

    def _close(self, sel, c: Client) -> None:
        sel.unregister(c.conn)
        c.conn.close()
        self._held.release(c.peer.uid)
        self._held.replies(c.peer.uid, -c.pending)
        c.pending, c.out = 0, b""

    # -- the workers ---------------------------------------------------------------------------

    def _answer(self, c: Client, line: bytes) -> None:
        """Answer one request (a worker thread) and hand the reply to the selector thread."""
        peer = c.peer
        try:
            req = parse_request(line)
            c.request = str(req.get("request"))[:32]
            handler = self.handlers.get(c.request)
            if handler is None:
                raise BadRequest(f"unknown request {c.request!r}")
            try:
                reply = {"ok": True, **handler(peer, req)}
            except (ValueError, TypeError, RecursionError) as err:
                # A field the handler could not use: the request's fault, not the JSON's.
                raise BadRequest(f"malformed request: {c.request}: {_short(err)}") from None
            log.debug("%s: %s answered", peer, c.request)
        except NotJson as err:
            self._log.warning(peer.uid, "%s: malformed JSON: %s", peer, err)
            reply = _error(f"malformed request: not JSON ({err})")
        except UdbError as err:
            self._log.warning(peer.uid, "%s (%s): %s refused: %s", peer, peer.login, c.request, err)
            reply = _error(str(err))
        except Exception:  # a bug: the daemon keeps serving everyone else
            log.exception("%s: %s failed", peer, c.request)
            reply = _error("internal error (see the daemon's log)")
        c.out = _encode(reply)
        with self._lock:
            self._replies.append(c)
        self._wake()

    def _wake(self) -> None:
        """Cut the selector thread's wait short (a reply to send, or stopping)."""
        try:
            self._wake_w.send(b"x")
        except BlockingIOError:
            pass  # the selector thread has wake-ups pending already
        except OSError:
            pass  # stopped already: the pair is closed


def listen(where: str, backlog: int) -> socket.socket:
    """The listening socket at `where`, in a directory only root or the daemon's user
    can write, made mode 0666 as it is bound (nothing is changed by name after)."""
    path = Path(where)
    try:
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        why = untrusted_dir(path.parent, os.geteuid())
    except OSError as err:
        raise UdbError(f"{where}: cannot listen: {err.strerror or err}") from None
    if why:
        raise Untrusted(
            f"--socket {where}: directory {why}: others could swap the socket for "
            "their own or a link: refused (use a directory only root can write, e.g. "
            "/run/fairshare)"
        )
    try:
        if path.exists() or path.is_symlink():
            if not stat.S_ISSOCK(path.lstat().st_mode):
                raise UdbError(f"{where}: exists and is not a socket: not replaced")
            if _answers(where):
                raise UdbError(
                    f"{where}: another shrdaemon is listening there: give another --socket"
                )
            path.unlink()  # a stale socket left by a daemon that died
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError as err:
        raise UdbError(f"{where}: cannot listen: {err.strerror or err}") from None
    try:
        # Anyone may ask (the daemon decides what to answer): bind itself makes the
        # socket 0666 under this umask, and nothing is chmod-ed by name afterwards.
        # The umask is the process's; no other thread makes files while the
        # daemon starts.
        old = os.umask(0o111)
        try:
            s.bind(where)
        finally:
            os.umask(old)
        s.listen(backlog)
    except OSError as err:
        s.close()
        raise UdbError(f"{where}: cannot listen: {err.strerror or err}") from None
    return s


class NotJson(BadRequest):
    """A request line that is not one JSON text."""


def parse_request(line: bytes) -> dict:
    """The request object of one `line` (without its newline): BadRequest when it is
    not JSON (NotJson), nested too deeply, not an object or not of this protocol's
    version (an int: true is not 1)."""
    try:
        req = json.loads(line, parse_constant=_no_constant)
    except RecursionError:
        raise BadRequest("malformed request: nested too deeply") from None
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError, too many digits
        raise NotJson(_short(err)) from None
    if not isinstance(req, dict):
        raise BadRequest("malformed request: not a JSON object")
    v = req.get("v")
    if type(v) is not int or v != VERSION:
        raise BadRequest(
            f"protocol version {_short(repr(v))} not supported (this daemon speaks {VERSION})"
        )
    return req


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number this protocol takes")


def _short(err: object) -> str:
    """An error's text cut to a log line's worth."""
    text = str(err)
    return text if len(text) <= 200 else text[:200] + "..."


def _encode(reply: dict) -> bytes:
    """The reply's line.  A bytes value (base64 text, which needs no escaping) is put in
    as it is, so a large image is not scanned and copied by the JSON encoder while this
    thread holds the GIL the scheduling cycle also needs."""
    raw = {k: v for k, v in reply.items() if isinstance(v, bytes)}
    head = json.dumps({k: v for k, v in reply.items() if k not in raw}).encode()
    if not raw:
        return head + b"\n"
    parts = [head[:-1]]
    for k, v in raw.items():
        parts += [b", ", json.dumps(k).encode(), b': "', v, b'"']
    parts.append(b"}\n")
    return b"".join(parts)


def _error(message: str) -> dict:
    return {"ok": False, "error": message}


def _send_nowait(conn: socket.socket, reply: dict) -> None:
    """Best effort: a short error reply to a client we are dropping."""
    try:
        conn.setblocking(False)
        conn.send(json.dumps(reply).encode() + b"\n")
    except OSError:
        pass


def _answers(path: str) -> bool:
    """Whether something accepts connections at `path`."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()
