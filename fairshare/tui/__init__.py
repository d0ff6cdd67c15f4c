"""Interactive full-screen applications (Textual) the commands start: shrdist's editor
(`shrdist`), and the displays' continuous mode (`monitor`, showing one of `views`:
shrview's displays, shrtree's share tree).

They hold the screen's state and its key bindings only; what they show and write comes
from the library (fairshare.admin.shrdist, fairshare.report, fairshare.display), as for
the commands' batch modes.
"""
