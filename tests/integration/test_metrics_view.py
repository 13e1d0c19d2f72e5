"""/metrics through the view: who may scrape (a token or a viewer's session), and the cardinality
settings shaping a real scrape. The exposition text alone: tests/unit/test_metrics.py."""
from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from dashboard.accounts.tokens import api_token_issue
from dashboard.monitoring.services import source_health_record
from offsetwatch.lib.prometheus import CONTENT_TYPE
from tests.factories import offline_pipeline
from tests.unit.test_metrics import parse


@pytest.mark.django_db
def test_8_scrapes_need_a_token_or_a_viewer_session(client, unique_name, vera, dave, prometheus):
    pipeline = offline_pipeline(unique_name, partitions={0: (0, 10), 1: (0, 5)}, batches=[(1_700_000_000_000, {0: 4, 1: 5})])
    response = client.get(reverse("metrics"))
    assert response.status_code == 401 and response["Content-Type"].startswith("text/plain")
    assert "Authorization: Bearer" in response.content.decode()
    client.force_login(dave)
    assert client.get(reverse("metrics")).status_code == 403
    client.logout()

    _, token = api_token_issue(user=prometheus, name="scraper")
    response = client.get(reverse("metrics"), HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200 and response["Content-Type"] == CONTENT_TYPE
    _, samples = parse(response.content.decode())
    mine = [(n, lab, v) for n, lab, v in samples if lab.get("topic") == pipeline.topic]
    assert ("offsetwatch_pipeline_lag_messages", 6.0) in [(n, v) for n, _, v in mine]
    assert ("offsetwatch_pipeline_retention_margin_messages", 4.0) in [(n, v) for n, _, v in mine]

    client.force_login(vera)
    assert client.get(reverse("metrics")).status_code == 200


@pytest.mark.django_db
def test_9_the_settings_shape_the_scrape(client, settings, unique_name, vera):
    kept = offline_pipeline(unique_name, group="billing", partitions={0: (0, 10), 1: (0, 5)},
                            batches=[(1_700_000_000_000, {0: 4, 1: 5})])
    dropped = offline_pipeline(unique_name, group="scratch", partitions={0: (0, 3)}, batches=[(1_700_000_000_000, {0: 1})])
    source_health_record(source=f"store:{kept.store_id}", label="store x", started_at=timezone.now(),
                                  duration_ms=5)
    settings.METRICS_INCLUDE = [f"{kept.store.name}/*", f"{dropped.store.name}/*"]
    settings.METRICS_EXCLUDE = ["*/scratch"]
    settings.METRICS_PER_PARTITION = True
    client.force_login(vera)
    _, samples = parse(client.get(reverse("metrics")).content.decode())
    groups = {lab["group"] for n, lab, _ in samples if n == "offsetwatch_pipeline_lag_messages"}
    assert groups == {"billing"}
    partitions = {lab["partition"]: v for n, lab, v in samples if n == "offsetwatch_partition_lag_messages"}
    assert partitions == {"0": 6.0, "1": 0.0}
    assert (f"store:{kept.store_id}", 1.0) in [(lab["source"], v) for n, lab, v in samples if n == "offsetwatch_source_up"]
