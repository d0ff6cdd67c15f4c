"""shrdaemon's socket, beside the command line as a front end: the one way users other
than root read and change the UDB.

- `server`: the listening socket, its selector thread and workers, the limits, the
  caller from the kernel (SO_PEERCRED).
- `clients`: the connections it holds, counted at once and per uid against the limits.
- `answers`: what it answers, request by request, through the admin libraries.
"""
