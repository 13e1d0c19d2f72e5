"""A pipeline of 1,000 partitions on its page (issue #16): the worst partitions first, 50 rows,
the rest on demand by the page's URL (and its live partial's), a bounded batch history, bad
parameters said next to the table's form, and the same queries whatever the partition count."""
from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from dashboard.monitoring import selectors
from dashboard.monitoring.partition_rows import BATCH_COLUMNS, PARTITIONS_SHOWN
from tests.factories import offline_pipeline
from tests.integration.test_pages import cells

pytestmark = pytest.mark.django_db

BATCH_1, BATCH_2 = 1_700_000_000_000, 1_700_000_060_000
LOST = 937  # out of range (committed below the low watermark): ERR, far beyond the first 50 rows


def big_pipeline(unique_name, partitions: int = 1000, lost: int = LOST):
    """`partitions` partitions lagging by various amounts (high = 1000 + 37p mod 500, committed
    10 + p mod 7: no two neighbours alike), partition `lost` below its low watermark (ERR) when
    there is one; two batches, the second moving every partition by 1."""
    marks = {p: (40 if p == lost else 0, 1000 + (p * 37) % 500) for p in range(partitions)}
    first = {p: 9 + p % 7 for p in range(partitions)}
    return offline_pipeline(unique_name, partitions=marks,
                            batches=[(BATCH_1, first), (BATCH_2, {p: o + 1 for p, o in first.items()})])


def partition_ids(html: str) -> list[int]:
    table = re.search(r'<table id="partitions">.*?</table>', html, re.S).group(0)
    return [int(p) for p in re.findall(r'<tr data-partition="(\d+)"', table)]


def expected_order(pipeline) -> list[int]:
    """Worst first, as the page should order them here: the ERR partition, then (no lag in time
    with one watermark sample) by lag in messages, the larger first, then by number."""
    rows = [r for r in pipeline.evaluation.partitions if r["partition"] != LOST]
    assert all(r["lag_seconds"] is None and r["status"] == "OK" for r in rows)  # what the order below assumes
    return [LOST] + [r["partition"] for r in sorted(rows, key=lambda r: (-r["lag"], r["partition"]))]


def link(html: str, link_id: str) -> str:
    return re.search(rf'<a href="([^"]*)" id="{link_id}"', html).group(1).replace("&amp;", "&")


def test_the_worst_partitions_come_first_and_only_the_first_50(vera_client, unique_name):
    pipeline = big_pipeline(unique_name)
    html = vera_client.get(reverse("pipeline", args=[pipeline.pk])).content.decode()

    shown = partition_ids(html)
    assert len(shown) == PARTITIONS_SHOWN == 50
    assert shown == expected_order(pipeline)[:50]
    # The ERR partition, 937th by number, is the first row, and says why.
    first = re.search(rf'<tr data-partition="{LOST}" data-status="ERR">(.*?)</tr>', html, re.S).group(1)
    assert "low out-of-range: 24 messages deleted before being processed" in first
    said = re.sub(r"\s+", " ", re.search(r'<p id="partitions-shown">(.*?)</p>', html, re.S).group(1))
    assert said.startswith("50 of 1,000 partitions shown;") and "1 not OK" in said
    assert 'id="partitions-more"' in html and 'id="partitions-all"' in html


def test_show_more_brings_the_next_rows_and_keeps_the_other_parameters(vera_client, unique_name):
    pipeline = big_pipeline(unique_name)
    page = reverse("pipeline", args=[pipeline.pk])
    html = vera_client.get(page, {"range": "6h", "kind": "partitions"}).content.decode()
    more = link(html, "partitions-more")
    assert "shown=100" in more and "range=6h" in more and "kind=partitions" in more

    html = vera_client.get(page + more).content.decode()
    assert partition_ids(html) == expected_order(pipeline)[:100]  # the first 50 again, then the next 50
    assert 'id="lag-chart"' in html and "last 6 h" in html  # the same page, the chart as it was
    everything = vera_client.get(page + link(html, "partitions-all")).content.decode()
    assert partition_ids(everything) == expected_order(pipeline)
    assert 'id="partitions-more"' not in everything


def test_the_live_partial_keeps_what_was_asked(vera_client, unique_name):
    pipeline = big_pipeline(unique_name)
    live = reverse("pipeline_live", args=[pipeline.pk])

    html = vera_client.get(live, {"shown": "100", "range": "24h"}).content.decode()
    assert partition_ids(html) == expected_order(pipeline)[:100]
    assert "shown=150" in link(html, "partitions-more") and "range=24h" in link(html, "partitions-more")

    only = vera_client.get(live, {"only": "problems"}).content.decode()
    assert partition_ids(only) == [LOST]
    assert "1 of 1,000 partitions shown (1 match)" in only
    assert "shown=" not in link(only, "partitions-reset") and "only=" not in link(only, "partitions-reset")


def test_a_partition_asked_by_number_shows_its_row_and_its_batch_column(vera_client, unique_name):
    pipeline = big_pipeline(unique_name)
    html = vera_client.get(reverse("pipeline_live", args=[pipeline.pk]), {"partition": "500"}).content.decode()
    assert partition_ids(html) == [500]
    header = re.search(r'<table id="batches">\s*<thead>(.*?)</thead>', html, re.S).group(1)
    assert re.findall(r">p(\d+)<", header) == ["500"]
    assert [row[2] for row in cells(html, "batches")] == [str(10 + 500 % 7), str(9 + 500 % 7)]  # newest first

    html = vera_client.get(reverse("pipeline_live", args=[pipeline.pk]), {"partition": "1000"}).content.decode()
    assert "Partition 1000 is not among this pipeline's 1,000 partitions" in html


def test_the_batch_history_shows_the_worst_partitions_columns_only(vera_client, unique_name):
    pipeline = big_pipeline(unique_name)
    html = vera_client.get(reverse("pipeline", args=[pipeline.pk])).content.decode()
    header = re.search(r'<table id="batches">\s*<thead>(.*?)</thead>', html, re.S).group(1)
    columns = [int(p) for p in re.findall(r">p(\d+)<", header)]
    assert len(columns) == BATCH_COLUMNS == 10
    assert columns == sorted(expected_order(pipeline)[:10])  # the ten worst, in partition order
    rows = cells(html, "batches")
    assert len(rows) == 2 and all(len(row) == 2 + 10 + 2 for row in rows)  # time, batch, 10 offsets, records, cadence
    assert rows[0][2:12] == [str(10 + p % 7) for p in columns]  # the newest batch's offsets, read from its JSON
    assert "Offsets of 10 of the 1,000 partitions" in html


def test_a_small_pipeline_keeps_every_partition_and_column(vera_client, unique_name):
    pipeline = big_pipeline(unique_name, partitions=3)
    html = vera_client.get(reverse("pipeline", args=[pipeline.pk])).content.decode()
    assert sorted(partition_ids(html)) == [0, 1, 2]
    assert 'id="partitions-more"' not in html and 'id="batch-columns"' not in html
    assert [row[2:5] for row in cells(html, "batches")] == [["10", "11", "12"], ["9", "10", "11"]]


def test_the_same_queries_whatever_the_partition_count(vera_client, unique_name):
    small, big = big_pipeline(unique_name, partitions=4, lost=3), big_pipeline(unique_name)
    for route, query in (("pipeline", {}), ("pipeline_live", {}), ("pipeline_live", {"shown": "all"}),
                         ("pipeline", {"only": "problems", "page": "1"})):
        counts = []
        for pipeline in (small, big):
            url = reverse(route, args=[pipeline.pk])
            vera_client.get(url, query)  # the session and the user's roles read once
            with CaptureQueriesContext(connection) as queries:
                assert vera_client.get(url, query).status_code == 200
            counts.append(len(queries.captured_queries))
        assert counts[0] == counts[1], (route, query, counts)


@pytest.mark.parametrize(("param", "value"), [
    ("shown", "0"), ("shown", "many"), ("only", "ok"), ("partition", "-1"), ("partition", "p7"),
    ("partition", "9" * 30),
])
def test_a_bad_table_parameter_is_said_next_to_the_form(vera_client, unique_name, param, value):
    pipeline = big_pipeline(unique_name, partitions=60)
    response = vera_client.get(reverse("pipeline", args=[pipeline.pk]), {param: value})
    assert response.status_code == 400
    html = response.content.decode()
    error = re.search(r'<p class="state-bad" id="partition-error" data-param="(\w+)">(.*?)</p>', html, re.S)
    assert error.group(1) == param and param in error.group(2)
    assert html.index('id="partition-filters"') < html.index('id="partition-error"') < html.index('id="partitions"')
    assert len(partition_ids(html)) == 50  # the default view, under the error
    # The live partial's polling keeps what it shows: a 400 naming the parameter.
    live = vera_client.get(reverse("pipeline_live", args=[pipeline.pk]), {param: value})
    assert live.status_code == 400 and f'data-param="{param}"' in live.content.decode()


def test_the_batch_pages_keep_the_table_s_view(vera_client, unique_name):
    pipeline = offline_pipeline(unique_name, partitions={0: (0, 60), 1: (0, 60)},
                                batches=[(BATCH_1 + i * 1000, {0: i, 1: i}) for i in range(53)])
    html = vera_client.get(reverse("pipeline", args=[pipeline.pk]), {"partition": "1", "range": "6h"}).content.decode()
    older = re.search(r'<a href="([^"]*)">older</a>', html).group(1).replace("&amp;", "&")
    assert sorted(older.lstrip("?").split("&")) == ["page=2", "partition=1", "range=6h"]
    html = vera_client.get(reverse("pipeline", args=[pipeline.pk]) + older).content.decode()
    assert partition_ids(html) == [1] and [row[2] for row in cells(html, "batches")] == ["2", "1", "0"]


def test_the_table_needs_the_viewer_role(client, unique_name):
    pipeline = big_pipeline(unique_name, partitions=3)
    response = client.get(reverse("pipeline_live", args=[pipeline.pk]), {"shown": "all"})
    assert response.status_code == 302 and "/login" in response["Location"]


def test_the_demo_database_s_path_reads_the_same_offsets(unique_name):
    """SQLite has no jsonb_to_record: there the offsets are decoded in Python. Both paths, on the
    batches of one pipeline, give the same columns (the fallback runs its ORM query here)."""
    pipeline = big_pipeline(unique_name, partitions=20)
    times, partitions = [BATCH_2, BATCH_1], [19, 3, 0, 25]
    in_database = selectors._offsets_of(pipeline=pipeline, batch_times=times, partitions=partitions)
    in_python = selectors._offsets_decoded_here(pipeline=pipeline, batch_times=times, partitions=partitions)
    assert in_database == in_python == {BATCH_2: [10 + 19 % 7, 13, 10, None], BATCH_1: [9 + 19 % 7, 12, 9, None]}
