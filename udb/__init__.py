"""The user database (UDB): entries, the account registry, udbgen and udbsee."""
