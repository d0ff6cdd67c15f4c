"""Fair-share scheduling: the share tree, the lnode cycle, the daemon and its commands."""
