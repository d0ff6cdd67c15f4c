"""Where the installed shrview, shrtree and shrinfo start: with the cyclic garbage
collector off, as every one-shot display (udb.cli.start says why)."""

from __future__ import annotations

from udb.cli.start import script

shrview = script("fairshare.cli.shrview")
shrtree = script("fairshare.cli.shrtree")
shrinfo = script("fairshare.cli.shrinfo")
