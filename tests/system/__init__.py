"""The system tier (tests/conftest.py)."""
