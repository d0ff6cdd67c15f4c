"""newacct: change the account this login session is charged to (Share by Account)."""

from __future__ import annotations

import json
import os

import click

from fairshare.consts import load_consts
from fairshare.newacct import (
    account_names,
    check_account,
    clear_session_account,
    current_account,
    spool_path,
    user_acids,
    write_session_account,
)
from udb.cli.common import handle_errors, udb_option
from udb.errors import OptionError
from udb.session import open_udb, read_session


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@udb_option
@click.argument("account", required=False)
@click.option(
    "-d", "--default", "to_default", is_flag=True, help="Go back to your default account."
)
@click.option(
    "--spool",
    metavar="DIR",
    envvar="FAIRSHARE_ACCOUNTS",
    show_envvar=True,
    help="The session-accounts directory (default /run/fairshare/accounts).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the session's account as JSON.")
@handle_errors
def main(udb, account, to_default, spool, as_json):
    """Charge this login session, and every process it starts, to ACCOUNT.

    ACCOUNT (a name or a number) must be one of your acids in the UDB.  The
    running shrdaemon charges the session's processes to it from its next
    cycle (in Share by Account mode; in Share by User mode accounts do not
    steer scheduling).  With no ACCOUNT, print the account the session is
    charged to; -d goes back to your default account (the first of your acids).
    """
    if account and to_default:
        raise OptionError("give ACCOUNT or -d, not both")
    engine = open_udb(udb)
    spool_dir = spool_path(spool)
    uid, sid = os.getuid(), os.getsid(0)
    with read_session(engine) as s:
        name, acids = user_acids(s, uid)
        acid = check_account(s, uid, account) if account else None
        names = account_names(s)
        by_account = load_consts(s).share_by_account
    if acid is not None:
        write_session_account(spool_dir, sid, acid)
    elif to_default:
        clear_session_account(spool_dir, sid)
    current, chosen = current_account(spool_dir, sid, uid, acids)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "user": name,
                    "uid": uid,
                    "session": sid,
                    "acid": current,
                    "account": names.get(current) if current is not None else None,
                    "default": not chosen,
                    "acids": acids,
                    "share_by_account": by_account,
                },
                indent=2,
            )
        )
        return
    label = "none" if current is None else f"{names.get(current, current)} (acid {current})"
    how = "set by newacct" if chosen else "your default"
    click.echo(f"session {sid} of {name}: account {label}, {how}")
    if (account or to_default) and not by_account:
        click.echo(
            "newacct: note: the fair-share scheduler is in Share by User mode: "
            "accounts do not change your share",
            err=True,
        )


if __name__ == "__main__":
    main()
