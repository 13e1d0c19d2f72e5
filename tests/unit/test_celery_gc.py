"""A Celery pool process freezes what start-up built (offsetwatch.celery._gc_freeze)."""
from __future__ import annotations

import gc

import pytest

pytestmark = pytest.mark.unit


def test_a_pool_process_moves_start_up_objects_out_of_the_collectors_reach():
    from celery.signals import worker_process_init

    import offsetwatch.celery  # noqa: F401  (connects the handler)

    gc.unfreeze()
    try:
        assert gc.get_freeze_count() == 0
        worker_process_init.send(sender=None)
        assert gc.get_freeze_count() > 10_000  # Django, Celery and the apps' modules
    finally:
        gc.unfreeze()
