"""Interactive full-screen applications (Textual) the commands start: shrdist's editor.

They hold the screen's state and its key bindings only; what they show and write comes
from the library (fairshare.admin.shrdist), as for the commands' batch modes.
"""
