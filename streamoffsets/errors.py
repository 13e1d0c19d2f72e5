"""Typed errors: each names the store, the key or path, and the problem."""
from __future__ import annotations


class OffsetStoreError(Exception):
    def __init__(self, store: str, key: str, problem: str):
        self.store = store
        self.key = key
        self.problem = problem
        super().__init__(f"{store}: {key}: {problem}")


class MalformedRecord(OffsetStoreError):
    """A stored row, znode or file that does not follow the store's layout."""


class StoreUnreachable(OffsetStoreError):
    """The server behind a store (or a broker) could not be reached in time."""


class ReadOnlyStore(OffsetStoreError):
    """A write to a store that Offset Watch only reads (a Spark checkpoint directory)."""
