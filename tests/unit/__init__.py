"""The unit tier (tests/conftest.py)."""
