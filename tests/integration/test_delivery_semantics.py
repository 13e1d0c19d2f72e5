"""The delivery-semantics experiment, small: every writable store x (graceful stop, kill).

Expected (the paper's table): a graceful stop loses nothing and duplicates nothing; a kill after
a batch's output and before its offset save loses nothing and duplicates at most that one batch;
keyed (idempotent) output collapses the duplicates. The full-size run is bench/delivery_semantics.py.
"""
from __future__ import annotations

import pytest

from reference_job.experiment import run_in_process
from tests.factories import writable_store_url

pytestmark = pytest.mark.spark

STORES = ["hbase", "zookeeper", "kafka", "file"]


def run(spark, stack, tmp_path, unique_name, kind, stop_mode, idempotent_output=False):
    return run_in_process(
        spark, bootstrap=stack.kafka_bootstrap, store_url=writable_store_url(kind, stack, tmp_path, unique_name),
        store_label=kind, topic=unique_name("exp"), group=unique_name("job"), work_dir=tmp_path,
        records=160, partitions=4, max_per_partition=10, stop_mode=stop_mode, stop_after_batches=2,
        idempotent_output=idempotent_output,
    )


@pytest.mark.parametrize("stop_mode", ["graceful", "kill"])
@pytest.mark.parametrize("kind", STORES)
def test_no_loss_and_at_most_one_batch_duplicated(spark, stack, tmp_path, unique_name, kind, stop_mode):
    result = run(spark, stack, tmp_path, unique_name, kind, stop_mode)
    assert result.lost == 0
    assert result.runs >= 2  # it really was stopped mid-way and restarted
    if stop_mode == "graceful":
        assert result.duplicated == 0
    else:
        # Exactly the batch whose offsets were never saved is processed twice: 4 partitions x 10.
        assert result.duplicated == 40


@pytest.mark.parametrize("kind", ["hbase", "file"])
def test_keyed_output_collapses_the_duplicates_of_a_kill(spark, stack, tmp_path, unique_name, kind):
    result = run(spark, stack, tmp_path, unique_name, kind, "kill", idempotent_output=True)
    assert (result.lost, result.duplicated) == (0, 0)
    assert result.runs >= 2
