"""The integration tier (tests/conftest.py)."""
