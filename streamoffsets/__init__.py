"""Offset Watch's job library: load/save Kafka offsets in external stores.

Imported by streaming jobs, the collectors and the dashboard. It imports neither Django nor
Celery.
"""
from streamoffsets.errors import MalformedRecord, OffsetStoreError, StoreUnreachable
from streamoffsets.types import BatchOffsets, PipelineKey, Watermarks

__all__ = [
    "BatchOffsets",
    "MalformedRecord",
    "OffsetStoreError",
    "PipelineKey",
    "StoreUnreachable",
    "Watermarks",
]
