"""New processes the moment they become a user's: the kernel's process-events connector.

Linux reports process events (fork, exec, uid change, exit, ...) to root over a
netlink socket (NETLINK_CONNECTOR, CN_IDX_PROC; the proc connector, as
libcgroup's cgrulesengd uses it).  The daemon listens for one kind only: a change
of real uid, which is how every login, su, sshd session, cron job and
``Popen(user=...)`` becomes a user's.  A classic BPF filter on the socket drops
every other event inside the kernel, so a fork-heavy build costs the daemon
nothing here.  Each reported (pid, uid) is handed to a callback on a thread of
its own (the daemon places the process in its lnode's cgroup at once, so it does
not run unplaced until the next cycle).  Processes started by a process already
placed need nothing: they inherit its cgroup.

Without root or without the connector (CONFIG_PROC_EVENTS), `start` returns
False and says why; placement then waits for the next cycle.
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import socket
import struct
import threading
from collections.abc import Callable

log = logging.getLogger("shrdaemon")

NETLINK_CONNECTOR = 11
CN_IDX_PROC = CN_VAL_PROC = 1
PROC_CN_MCAST_LISTEN, PROC_CN_MCAST_IGNORE = 1, 2
PROC_EVENT_UID = 0x00000004
NLMSG_DONE = 3
SO_ATTACH_FILTER = 26

NLMSG_HDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
CN_MSG = struct.Struct("=IIIIHH")  # idx, val, seq, ack, len, flags
EVENT_HDR = struct.Struct("=IIQ")  # what, cpu, timestamp_ns
UID_EVENT = struct.Struct("=IIII")  # pid, tgid, ruid, euid
#: Where proc_event.what and the event's data start in a received message.
WHAT_AT = NLMSG_HDR.size + CN_MSG.size
DATA_AT = WHAT_AT + EVENT_HDR.size


def uid_filter() -> bytes:
    """A classic BPF program (struct sock_fprog's instructions) keeping uid events only.

    BPF loads words big-endian; proc_event.what is in host order (little-endian here).
    """
    what = int.from_bytes(PROC_EVENT_UID.to_bytes(4, "little"), "big")
    ins = struct.Struct("=HBBI")  # code, jt, jf, k
    return b"".join(
        (
            ins.pack(0x20, 0, 0, WHAT_AT),  # ld [WHAT_AT]
            ins.pack(0x15, 0, 1, what),  # jeq #what, keep, drop
            ins.pack(0x06, 0, 0, 0xFFFF),  # keep: ret #0xffff
            ins.pack(0x06, 0, 0, 0),  # drop: ret #0
        )
    )


def control_message(op: int) -> bytes:
    """The netlink message that subscribes to (or leaves) the process events."""
    payload = struct.pack("=I", op)
    cn = CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, len(payload), 0) + payload
    return NLMSG_HDR.pack(NLMSG_HDR.size + len(cn), NLMSG_DONE, 0, 0, os.getpid()) + cn


def parse_uid_events(data: bytes) -> list[tuple[int, int]]:
    """(process id, new real uid) of every uid event in one received datagram."""
    out = []
    at = 0
    while at + DATA_AT + UID_EVENT.size <= len(data):
        length = NLMSG_HDR.unpack_from(data, at)[0]
        (what,) = struct.unpack_from("=I", data, at + WHAT_AT)
        if what == PROC_EVENT_UID:
            _pid, tgid, ruid, _euid = UID_EVENT.unpack_from(data, at + DATA_AT)
            out.append((tgid, ruid))
        if length <= 0:
            break
        at += (length + 3) & ~3
    return out


#: The inode number of the initial PID namespace (the kernel's PROC_PID_INIT_INO).
INIT_PID_NAMESPACE = 0xEFFFFFFC


def nested_pid_namespace(proc: str = "/proc/self") -> bool:
    """True when this process runs in a PID namespace below the initial one (a container).
    The process events connector speaks in the initial namespace's pids, which name other
    processes (or none) here.  Its namespace's inode tells, and so does an NSpid line with
    a pid per level when /proc was mounted from above."""
    try:
        if os.stat(f"{proc}/ns/pid").st_ino != INIT_PID_NAMESPACE:
            return True
        with open(f"{proc}/status") as f:
            return any(line.startswith("NSpid:") and len(line.split()) > 2 for line in f)
    except OSError:
        return False


class ProcessEvents:
    """Listens for uid changes and calls `on_uid(pid, uid)` for each, on its own thread."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self, on_uid: Callable[[int, int], None]) -> bool:
        """Subscribe and start the thread; False (logged) when the kernel will not tell us
        (or would tell us pids of another PID namespace)."""
        if nested_pid_namespace():
            log.info(
                "process events unused: this daemon runs in a nested PID namespace and the "
                "kernel reports the initial namespace's pids; new sessions are placed at "
                "the next cycle"
            )
            return False
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
            prog = uid_filter()
            buf = (os.getpid(), CN_IDX_PROC)
            sock.bind(buf)

            code = ctypes.create_string_buffer(prog)
            fprog = struct.pack("=HxxxxxxQ", len(prog) // 8, ctypes.addressof(code))
            sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
            sock.send(control_message(PROC_CN_MCAST_LISTEN))
        except OSError as err:
            log.info(
                "process events unavailable (%s): new sessions are placed at the next cycle",
                err,
            )
            return False
        self._sock = sock
        self._stop.clear()
        self._wake_r, self._wake_w = socket.socketpair()  # `stop` ends the wait at once
        self._thread = threading.Thread(
            target=self._listen, args=(on_uid,), name="process-events", daemon=True
        )
        self._thread.start()
        log.info("process events: new sessions are placed as soon as they change uid")
        return True

    @property
    def listening(self) -> bool:
        """Whether new sessions are being reported (started, and not failed since)."""
        return self._thread is not None and self._thread.is_alive()

    def _listen(self, on_uid: Callable[[int, int], None]) -> None:
        sock = self._sock
        waiting = select.poll()
        waiting.register(sock, select.POLLIN)
        waiting.register(self._wake_r, select.POLLIN)
        while not self._stop.is_set():
            # Sleep until an event or `stop`: no timeout to wake up for in between.
            if sock.fileno() not in {fd for fd, _ in waiting.poll()}:
                continue
            try:
                data = sock.recv(65536)
            except OSError as err:
                if not self._stop.is_set():
                    log.warning("process events: %s; placement waits for the next cycle", err)
                return
            for pid, uid in parse_uid_events(data):
                try:
                    on_uid(pid, uid)
                except Exception:  # noqa: BLE001 - one bad event must not end the listening
                    log.exception("process events: placing pid %d (uid %d) failed", pid, uid)

    def stop(self) -> None:
        """Unsubscribe and end the thread."""
        self._stop.set()
        if self._thread is not None:
            self._wake_w.send(b"x")
            self._thread.join(timeout=3)
            if not self._thread.is_alive():  # else it is stuck placing: leave it its pair
                self._wake_r.close()
                self._wake_w.close()
            self._thread = None
        if self._sock is not None:
            try:
                self._sock.send(control_message(PROC_CN_MCAST_IGNORE))
            except OSError:
                pass
            self._sock.close()
            self._sock = None
