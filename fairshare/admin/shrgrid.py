"""shrgrid's library: a site's part in a grid (seed 001), each change one transaction.

- `configure`: name this site, mount or unmount a VO's policy at a local resource
  group (udb.mounts), add or remove a peer whose usage records this site pulls
  (fairshare.store.grid);
- `fetch_now`: fetch every mounted policy and pull every peer at once, what shrdaemon
  does every --grid-interval seconds;
- `status`: the site, its mounts (where each comes from, when it was last fetched, why
  the last attempt failed) and its peers, as plain records for the display.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sqlalchemy import Engine

from fairshare.store import grid
from fairshare.store.config import load_consts
from udb import mounts
from udb.session import mark_entries_changed, read_connection, read_session, write_session


@dataclass(frozen=True)
class Change:
    """One setting shrgrid makes: this site's name, a mount (entry, source, policy), an
    unmount, a peer (site, source) or a peer removed; None fields are not asked for."""

    site: str | None = None
    mount: tuple[str, str, str] | None = None
    unmount: str | None = None
    peer: tuple[str, str] | None = None
    unpeer: str | None = None


def configure(engine: Engine, change: Change) -> list[str]:
    """Make `change` in one transaction; returns a line per thing done."""
    done = []
    with write_session(engine) as s:
        conn = s.connection()
        if change.site is not None:
            grid.set_site(conn, change.site)
            done.append(f"this site is {change.site}")
        if change.mount is not None:
            m = mounts.declare(s, *change.mount)
            mark_entries_changed(s)
            done.append(f"{m.name}: mounts {m.policy} from {change.mount[1]}; fetch it now")
        if change.unmount is not None:
            n = mounts.undeclare(s, change.unmount)
            done.append(f"{change.unmount}: unmounted, {n} mounted entries removed")
        if change.peer is not None:
            grid.add_peer(conn, *change.peer)
            done.append(f"peer {change.peer[0]}: its records are pulled from {change.peer[1]}")
        if change.unpeer is not None:
            grid.remove_peer(conn, change.unpeer)
            done.append(f"peer {change.unpeer}: removed with what was applied of it")
    return done


def fetch_now(engine: Engine, now: float, names: tuple[str, ...] = ()) -> tuple[list[str], bool]:
    """Fetch the mounted policies (those at `names`, else all) and, unless `names` are
    given, pull every peer; returns a line for each and whether all worked."""
    with read_session(engine) as s:
        halflife = load_consts(s).halflife
    lines, ok = [], True
    for m, said in mounts.fetch_all(engine, now, names):
        ok &= not said.startswith("not fetched")
        lines.append(f"{m.name}: {said}")
    if not names:
        for p, said in grid.pull_all(engine, now, halflife):
            ok &= not said.startswith("not pulled")
            lines.append(f"peer {p.site}: {said}")
    return lines, ok


def status(engine: Engine) -> dict:
    """This site's name, its mounts and its peers, as a JSON-ready document
    (man/shrgrid.8 documents its keys)."""
    with read_connection(engine) as conn:
        return {
            "site": grid.site_name(conn),
            "mounts": [asdict(m) for m in mounts.mounts(conn)],
            "peers": [asdict(p) for p in grid.peers(conn)],
        }
