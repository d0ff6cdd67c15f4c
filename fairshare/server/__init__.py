"""shrdaemon's socket, beside the command line as a front end: the one way users other
than root read and change the UDB.

- `server`: the listening socket, its connections and limits, the caller from the kernel
  (SO_PEERCRED).
- `answers`: what it answers, request by request, through the admin libraries.
"""
