"""Tests that need no server (every test here is marked `unit` by tests/conftest.py)."""
