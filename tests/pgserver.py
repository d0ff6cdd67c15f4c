"""A throwaway PostgreSQL server for tests: initdb in a temporary directory, started
as the postgres user on a Unix socket there, stopped (and restarted) at will.

The system tier starts one per session (tests/conftest.py, fixture `pg_server`) and
gives each test a database of its own on it (`new_database`, fixture `pg_db`)."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    """One PostgreSQL cluster; `url` is its SQLAlchemy URL (psycopg, Unix socket, or TCP on
    127.0.0.1 with `tcp`).  `settings`: more server settings (name: value), such as
    max_connections for a benchmark's hundred hosts."""

    def __init__(self, tcp: bool = False, settings: dict[str, str] | None = None) -> None:
        initdb = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        self.bindir = os.path.dirname(initdb[-1])
        self.work = tempfile.mkdtemp(prefix="udb-pg-")
        shutil.chown(self.work, "postgres")
        self.data, self.port = os.path.join(self.work, "data"), _free_port()
        self.tcp, self.settings = tcp, dict(settings or {})
        where = "127.0.0.1" if tcp else self.work
        self.url = f"postgresql+psycopg://postgres@/postgres?host={where}&port={self.port}"
        self._as_postgres(
            f"{self.bindir}/initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "--no-sync"
        )

    def _as_postgres(self, *cmd: str) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", *cmd], check=True, capture_output=True, timeout=60
        )

    def start(self) -> None:
        listen = "127.0.0.1" if self.tcp else ""
        more = "".join(f" -c {k}={v}" for k, v in self.settings.items())
        options = f"-p {self.port} -k {self.work} -c listen_addresses='{listen}' -c fsync=off"
        self._as_postgres(
            f"{self.bindir}/pg_ctl", "-D", self.data, "-w", "-l", os.path.join(self.work, "log"),
            "-o", options + more, "start",
        )  # fmt: skip

    def stop(self) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", f"{self.bindir}/pg_ctl", "-D", self.data,
             "-m", "immediate", "-w", "stop"], capture_output=True, timeout=60,
        )  # fmt: skip

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.work, ignore_errors=True)


def unavailable() -> str | None:
    """Why this process cannot start a throwaway PostgreSQL, or None if it can."""
    if os.geteuid() != 0:
        return "starting a throwaway PostgreSQL needs root"
    if not glob.glob("/usr/lib/postgresql/*/bin/initdb") or shutil.which("runuser") is None:
        return "no PostgreSQL server installed to start a throwaway one"
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        return "no postgres system user to run a server as"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[test]')"
    return None


def skip_unless_pg_possible() -> None:
    """Skip (saying why) unless this process can start a throwaway PostgreSQL."""
    why = unavailable()
    if why:
        pytest.skip(why)


def throwaway_server() -> PgServer:
    """A started PgServer, or skip saying why none can be started."""
    skip_unless_pg_possible()
    try:
        server = PgServer()
        server.start()
    except (subprocess.SubprocessError, OSError) as err:
        pytest.skip(f"could not start a throwaway PostgreSQL: {err}")
    return server


def new_database(server: PgServer) -> str:
    """Create a new, empty database on `server`; returns its URL."""
    from sqlalchemy import create_engine, text

    name = f"udb_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server.url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {name}"))
    finally:
        admin.dispose()
    return server.url.replace("/postgres?", f"/{name}?")


def drop_database(server: PgServer, url: str) -> None:
    """Drop the database of `url` (made by `new_database`), whoever is still connected."""
    from sqlalchemy import create_engine, make_url, text

    name = make_url(url).database
    admin = create_engine(server.url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    finally:
        admin.dispose()
