"""The report layer: what the displays show, built from what the cycle published.

The cycle (fairshare.core.cycle) computes every scheduling figure once and the daemon
publishes its lnode table (fairshare.store.published: shares, usage, e_share, the due share, the
near-future proportion Pri, ...).  This package turns those rows, and the UDB facts
around them, into the rows, profiles and statistics the commands print; it derives
only presentation figures (sums over a group's leaves, fractions of a total, tree
order), never a second copy of the algorithm.  fairshare.display formats what it
returns; fairshare.cli parses options, calls it and renders.

- `published`: the edge: reading a host's published table (`Snapshot`, `Source` for
  repeat and continuous modes), the site, and the UDB queries the displays need.
- `lnodes`: the published columns as the displays' columns (`view_columns`, numpy
  arrays from the read to the print; `view_lnodes` for the displays that want rows),
  their order and selection (`select_rows`), shrview -ds's statistics.
- `profile`: shrinfo's profile of one user or account and its fair level.
- `info`: what shrinfo reads and builds around a profile.
- `sharetree`: shrtree's static analysis of the share tree in the UDB.
- `nice`: shrview -dn's table.
"""
