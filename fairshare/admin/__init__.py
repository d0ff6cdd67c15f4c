"""The write commands' libraries, one module per command, each a set of functions that
take a session (or an engine) and arguments and return results:

- `shradmin`: the constants with their history, and time-of-day schedules.
- `shrdist`: redistributing shares inside a group, delegated by shrdist.auth.
- `shrsync`: asking a running daemon to bring the UDB and its lnodes into step.
"""
