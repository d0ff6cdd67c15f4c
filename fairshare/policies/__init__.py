"""Policies beside UNICOS's, one module each (fairshare.cycle.POLICIES registers them).

A policy module takes the steps it shares with UNICOS from fairshare.cycle, and
fairshare.cycle imports the policy modules at its end to register them; importing
fairshare.cycle here first keeps that order whichever module is imported first.
"""

import fairshare.cycle  # noqa: F401
