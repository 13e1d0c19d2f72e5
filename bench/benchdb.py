"""A fresh PostgreSQL database for a benchmark, with Django set up on it and migrated."""
from __future__ import annotations

import os
import subprocess


def fresh_django_database(name: str) -> None:
    """Drop and create database `name` on 127.0.0.1:5432, point Django at it, migrate."""
    for sql in (f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name}"):
        subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-c", sql], check=True, capture_output=True)
    os.environ["DATABASE_URL"] = f"postgres://postgres:postgres@127.0.0.1:5432/{name}"
    os.environ["DJANGO_SETTINGS_MODULE"] = "dashboard.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
