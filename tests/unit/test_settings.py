"""The settings' env helpers: typed values, clear errors naming the variable."""
from __future__ import annotations

import pytest

from offsetwatch.settings import database_from_url, env_bool, env_float, env_list


def test_database_urls():
    assert database_from_url("sqlite:////var/lib/ow/db.sqlite3")["NAME"] == "/var/lib/ow/db.sqlite3"
    pg = database_from_url("postgres://ow:s%40cret@db.internal:6432/offsets")
    assert (pg["ENGINE"], pg["USER"], pg["PASSWORD"], pg["HOST"], pg["PORT"], pg["NAME"]) == (
        "django.db.backends.postgresql", "ow", "s@cret", "db.internal", "6432", "offsets")
    with pytest.raises(ValueError, match="'mysql' is not supported"):
        database_from_url("mysql://x/y")


def test_bad_env_values_name_the_variable(monkeypatch):
    monkeypatch.setenv("OFFSETWATCH_DEBUG", "maybe")
    with pytest.raises(ValueError, match="OFFSETWATCH_DEBUG='maybe' is not a boolean"):
        env_bool("OFFSETWATCH_DEBUG", False)
    monkeypatch.setenv("OFFSETWATCH_POLL_INTERVAL", "ten")
    with pytest.raises(ValueError, match="OFFSETWATCH_POLL_INTERVAL='ten' is not a number"):
        env_float("OFFSETWATCH_POLL_INTERVAL", 10.0)
    monkeypatch.setenv("OFFSETWATCH_DEBUG", "")
    assert env_bool("OFFSETWATCH_DEBUG", True) is True


def test_lists_are_comma_separated_without_blanks(monkeypatch):
    monkeypatch.setenv("OFFSETWATCH_METRICS_EXCLUDE", " dev/*, ,*/tmp-* ,")
    assert env_list("OFFSETWATCH_METRICS_EXCLUDE") == ["dev/*", "*/tmp-*"]
    monkeypatch.delenv("OFFSETWATCH_METRICS_EXCLUDE")
    assert env_list("OFFSETWATCH_METRICS_EXCLUDE") == []
