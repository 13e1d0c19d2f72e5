"""`scripts/demo.sh` (manage.py demo): its web component is ready as soon as the dashboard
answers, before the collectors it starts next exist. (Its readiness once asked /healthz, which
also judges beat and the workers: the demo then waited 60 s for a web that was up and stopped.)"""
from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings

from dashboard.management.commands.demo import Command
from devstack.components import free_port


def test_the_demos_web_is_ready_before_its_collectors_run(transactional_db):
    port = free_port()
    web = next(c for c in Command()._app_components(port, rate=1.0, partitions=1) if c.name == "web")
    # The runserver process uses the test's database (migrated, empty: no collector ever ran).
    url = urlsplit(os.environ["DATABASE_URL"])
    database_url = urlunsplit(url._replace(path="/" + settings.DATABASES["default"]["NAME"]))
    process = subprocess.Popen(web.argv, env={**os.environ, **web.env, "DATABASE_URL": database_url},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + web.ready_timeout_s
        while not web.is_ready():
            assert process.poll() is None, "the demo's web exited"
            if time.monotonic() > deadline:
                pytest.fail(f"the demo's web was not ready within {web.ready_timeout_s} s")
            time.sleep(0.2)
        # Ready while the collectors are down, which /healthz says (it is what compose checks).
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
        assert refused.value.code == 503
    finally:
        process.terminate()
        process.wait(10)
