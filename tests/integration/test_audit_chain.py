"""The audit log's chain: append, verify, tampering found, the database refusing edits."""
from __future__ import annotations

import threading

import pytest
from django.db import DatabaseError, connection, connections, transaction

from dashboard.audit.actor import Actor
from dashboard.audit.services import GENESIS, audit_append, audit_verify
from dashboard.models import AuditEvent
from tests.factories import offline_pipeline


def _append(n: int, **kw) -> list[AuditEvent]:
    return [audit_append(actor=Actor("vera"), action="test.event", subject=f"event {i}", details={"i": i}, **kw)
            for i in range(n)]


@pytest.mark.django_db
def test_events_chain_and_verify(unique_name):
    p = offline_pipeline(unique_name, partitions={0: (0, 5)}, batches=[(1_700_000_000_000, {0: 5})])
    first, second = audit_append(actor=Actor("vera", None, "10.1.2.3"), action="rewind.requested", subject="rewind 1",
                                 pipeline=p, before={"0": 120}, after={"0": 40}), *_append(1)
    assert first.prev_hash == GENESIS and second.prev_hash == first.hash
    assert first.pipeline_id == p.pk and first.pipeline_label.startswith(f"{p.topic} / etl")
    result = audit_verify()
    assert result.ok and result.checked == 2


@pytest.mark.django_db
def test_the_database_refuses_to_update_or_delete_an_event():
    event, = _append(1)
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).update(subject="nothing happened")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).delete()
    assert AuditEvent.objects.get(pk=event.pk).subject == "event 0"


def _behind_the_apps_back(sql: str, params: list) -> None:
    """What a database owner can do: switch the triggers off for a session and edit rows."""
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
        cursor.execute(sql, params)
        cursor.execute("SET session_replication_role = DEFAULT")


@pytest.mark.django_db
def test_a_changed_event_is_found():
    events = _append(4)
    _behind_the_apps_back("UPDATE dashboard_auditevent SET after = %s WHERE id = %s", ['{"0": 999}', events[2].pk])
    result = audit_verify()
    assert not result.ok and result.broken_at == events[2].pk and result.checked == 2
    assert "was changed after it was written" in result.reason


@pytest.mark.django_db
def test_a_removed_event_is_found():
    events = _append(4)
    _behind_the_apps_back("DELETE FROM dashboard_auditevent WHERE id = %s", [events[1].pk])
    result = audit_verify()
    assert not result.ok and result.broken_at == events[2].pk
    assert f"does not chain to event {events[0].pk}" in result.reason


@pytest.mark.django_db
def test_an_event_rolls_back_with_the_change_it_records():
    with pytest.raises(RuntimeError), transaction.atomic():
        _append(1)
        raise RuntimeError("the change failed")
    assert not AuditEvent.objects.exists()
    assert audit_verify().ok


@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_make_one_chain():
    """Eight threads, each its own connection and transactions: the advisory lock keeps one head."""
    errors = []

    def worker(k: int) -> None:
        try:
            for i in range(10):
                with transaction.atomic():
                    audit_append(actor=Actor(f"worker-{k}"), action="test.concurrent", subject=f"{k}/{i}")
        except Exception as exc:  # reported below: a thread's exception would be lost otherwise
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    result = audit_verify()
    assert result.ok and result.checked == 80
