"""newacct: change the account this login session is charged to (Share by Account).

The running shrdaemon keeps the sessions' accounts; newacct asks it over its
socket (fairshare.daemon.sessions, fairshare.server.server)."""

from __future__ import annotations

import click

from udb.cli.common import HELP, Command, handle_errors, version_option
from udb.errors import OptionError
from udb.jsonout import echo_json
from udb.remote import call, socket_option, socket_path


@click.command(cls=Command, context_settings=HELP)
@version_option
@socket_option
@click.argument("account", required=False)
@click.option(
    "-d", "--default", "to_default", is_flag=True, help="Go back to your default account."
)
@click.option("--json", "as_json", is_flag=True, help="Print the session's account as JSON.")
@handle_errors
def main(socket_, account, to_default, as_json):
    """Charge this login session, and every process it starts, to ACCOUNT.

    ACCOUNT (a name or a number) must be one of your acids in the UDB.  The
    running shrdaemon, asked over its socket, checks that and charges the
    session's processes to it from its next cycle (in Share by Account mode; in
    Share by User mode accounts do not steer scheduling).  With no ACCOUNT,
    print the account the session is charged to; -d goes back to your default
    account (the first of your acids).
    """
    if account and to_default:
        raise OptionError("give ACCOUNT or -d, not both")
    fields = {"account": account} if account else {}
    if to_default:
        fields["default"] = True
    reply = call(socket_path(socket_), "newacct", **fields)
    if as_json:
        keys = ("user", "uid", "session", "acid", "account", "default", "acids")
        doc = {k: reply[k] for k in keys} | {"share_by_account": reply["share_by_account"]}
        echo_json(doc, indent=True)
        return
    current = reply["acid"]
    label = "none" if current is None else f"{reply['account'] or current} (acid {current})"
    how = "your default" if reply["default"] else "set by newacct"
    click.echo(f"session {reply['session']} of {reply['user']}: account {label}, {how}")
    if not reply["share_by_account"]:  # newacct(1): "newacct says so", shown or changed
        click.echo(
            "newacct: note: the fair-share scheduler is in Share by User mode: the account "
            "is recorded, but accounts change nobody's share there",
            err=True,
        )


if __name__ == "__main__":
    main()
