"""Offsets in ZooKeeper, in the old Kafka consumer layout. Over 400 lines because the layout's
writes, its reads (one pipeline, and a poll's many pipelined) and their failure handling share
the session and the path rules.

One znode per partition, `/consumers/<group>/offsets/<topic>/<partition>`, value = the next
offset to read as decimal text, under an optional chroot (`zk://host:2181,host2:2181/chroot`).
This is the layout of Kafka's old ZooKeeper-based consumer, so the existing ZooKeeper offset
tools (ConsumerOffsetChecker, Burrow, zkCli) keep reading what our jobs write.

Writes. `save_batch` writes every partition node of a batch in one ZooKeeper multi-op
transaction (nodes that exist are set, missing ones created, parents made beforehand), so a
save by our job is all-or-nothing: a reader never sees half of one of our batches. The layout
has no place for the batch time, so nothing extra is stored; readers take the batch time from
the nodes' `mtime` (the ZooKeeper server's clock when the save committed; all nodes of one
transaction share it). ZooKeeper is poor at many writes, so save once per batch, not per record.

Torn state. OTHER writers of this layout (old Kafka consumers, Storm's ZooKeeper spouts,
hand-written jobs, zkCli) write one partition at a time, and the old consumer even skips
partitions whose offset did not change. A reader can therefore see a torn state: some nodes
from a newer commit, some from an older one (or a writer that died between two node writes).
That is safe for at-least-once delivery: every node holds an offset whose records were
already output when it was written, so a job restarting from a torn state re-reads the
lagging partitions from their older offsets (duplicates), never skipping anything (loss).
Readers report it rather than hide it: when the partition nodes' mtimes are more than
`torn_after_ms` apart, `history()` adds a RowProblem keyed by the topic node naming the
lagging partitions (not the times: the same text at every poll keeps it one problem with a
count), and still returns the batch (whose time is the newest mtime). An idle partition of a
per-partition writer shows up the same way; the problem is a warning for the dashboard, not an
error.

No history: ZooKeeper keeps only the current offsets, so `history()` returns at most the
current state as one batch; the collectors' samples are the history.

Malformed nodes (a value that is not a non-negative 64-bit decimal, a child that is not a
partition id, non-UTF-8 bytes) raise MalformedRecord naming the znode path in `load_latest`
(a job must not guess where to start) and are reported as RowProblems by `history()`.
Paths in errors and problems are relative to the chroot; the store's name (its URL) carries
the chroot.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote, urlparse

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionDropped,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
    ZookeeperStoppedError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import CREATOR_ALL_ACL, READ_ACL_UNSAFE

from streamoffsets.errors import MalformedRecord, OffsetStoreError, StoreUnreachable
from streamoffsets.stores.base import StoreBase
from streamoffsets.types import BatchOffsets, HistoryPage, PipelineKey, RowProblem

DEFAULT_TORN_AFTER_MS = 1000
MAX_OFFSET = 2**63 - 1  # Kafka offsets are signed 64-bit
# Canonical decimal only: "07" next to "7" would name one partition twice.
PARTITION_RE = re.compile(r"0|[1-9][0-9]*")
OFFSET_RE = re.compile(r"[0-9]{1,19}")
# Characters the ZooKeeper server refuses in a path (see PathUtils.validatePath).
# Characters beyond U+FFFF are surrogate pairs in Java, refused as well.
ZK_BAD_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\U0010ffff]")
# Failures of the connection rather than of one request: the server is (momentarily) gone.
UNREACHABLE = (
    KazooTimeoutError, ConnectionLoss, ConnectionDropped, SessionExpiredError, ZookeeperStoppedError,
)


def check_name(what: str, name: str) -> str:
    """A group id or topic becomes one path component: refuse what would be another path."""
    if name in ("", ".", "..") or "/" in name or ZK_BAD_CHARS.search(name):
        raise ValueError(
            f"{what} {name!r} cannot be a ZooKeeper path component "
            "(empty, '.', '..', or contains '/', NUL or control characters)"
        )
    return name


def topic_path(topic: str, group: str) -> str:
    return f"/consumers/{check_name('group', group)}/offsets/{check_name('topic', topic)}"


def _partitions(parts: list[int]) -> str:
    return ", ".join(str(p) for p in sorted(parts))


class ZooKeeperOffsetStore(StoreBase):
    """Save and read offsets as `/consumers/<group>/offsets/<topic>/<partition>` znodes (kazoo)."""

    kind = "zookeeper"
    writable = True
    keeps_history = False

    def __init__(
        self, hosts: str, chroot: str = "", timeout_s: float = 5.0, torn_after_ms: int = DEFAULT_TORN_AFTER_MS,
        digest_auth: tuple[str, str] | None = None,
    ):
        chroot = chroot.rstrip("/")
        if chroot:
            if not chroot.startswith("/"):
                raise ValueError(f"ZooKeeper chroot {chroot!r} must start with '/'")
            for part in chroot[1:].split("/"):
                check_name("chroot component", part)
        if not hosts:
            raise ValueError("ZooKeeper hosts must not be empty (host:2181[,host2:2181])")
        self.hosts, self.chroot, self.timeout_s, self.torn_after_ms = hosts, chroot, timeout_s, torn_after_ms
        # Digest credentials (user, password) for ACL-protected paths. Nodes this store creates
        # then get "all for this identity, read for anyone": only the job's identity can move
        # its offsets, while the dashboard and tools can still read them.
        self.digest_auth = digest_auth
        self.name = f"zk://{hosts}{chroot}"  # never the credentials: the name is in every error
        self._client: KazooClient | None = None

    @classmethod
    def from_url(
        cls, url: str, timeout_s: float = 5.0, torn_after_ms: int = DEFAULT_TORN_AFTER_MS
    ) -> "ZooKeeperOffsetStore":
        """`zk://[user:password@]host:2181[,host2:2181]/chroot` (chroot optional; user:password,
        percent-encoded, authenticates with the digest scheme)."""
        parsed = urlparse(url)
        # netloc, not hostname/port: a connect string lists several host:port pairs.
        if parsed.scheme != "zk" or not parsed.netloc:
            raise ValueError(f"not a ZooKeeper store URL (zk://host:2181[,host2:2181]/chroot): {url!r}")
        userinfo, _, hosts = parsed.netloc.rpartition("@")
        auth = None
        if userinfo:
            user, sep, password = userinfo.partition(":")
            if not (user and sep):
                raise ValueError("ZooKeeper credentials must be user:password@ in the store URL")
            auth = (unquote(user), unquote(password))
        return cls(hosts, parsed.path, timeout_s=timeout_s, torn_after_ms=torn_after_ms, digest_auth=auth)

    # --- connection -----------------------------------------------------------------------
    def ping(self, timeout_s: float) -> None:
        """Open the session, waiting at most `timeout_s` for the server: a frozen or overloaded
        ZooKeeper fails here in that time. Later calls use the session and the full timeout."""
        with self._calling(f"ping (no session within {timeout_s:g} s)"):
            self._connection(start_timeout_s=timeout_s)

    def _connection(self, start_timeout_s: float | None = None) -> KazooClient:
        if self._client is None:
            auth = {}
            if self.digest_auth:
                auth = {"auth_data": [("digest", ":".join(self.digest_auth))],
                        "default_acl": CREATOR_ALL_ACL + READ_ACL_UNSAFE}
            client = KazooClient(hosts=self.hosts + self.chroot, timeout=self.timeout_s, **auth)
            # start() stops and closes the client itself when it times out.
            client.start(timeout=start_timeout_s or self.timeout_s)
            self._client = client
        return self._client

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            try:
                client.stop()
            finally:
                client.close()

    @contextmanager
    def _calling(self, what: str):
        """Turn connection failures into StoreUnreachable (dropping the client), refusals into OffsetStoreError."""
        try:
            yield
        except OffsetStoreError:
            raise
        except UNREACHABLE as exc:
            self.close()  # the next call reconnects with a fresh, bounded start()
            raise StoreUnreachable(
                self.name, what, f"cannot reach ZooKeeper within {self.timeout_s:g} s: {type(exc).__name__} {exc}"
            ) from exc
        except KazooException as exc:
            raise OffsetStoreError(self.name, what, f"ZooKeeper refused the call: {type(exc).__name__} {exc}") from exc

    def _wait(self, async_result) -> Any:
        """Every request goes through the async API so no wait is unbounded."""
        return async_result.get(timeout=self.timeout_s)

    # --- writes --------------------------------------------------------------------------------
    def save_batch(self, batch: BatchOffsets) -> None:
        """Write every partition node of a finished batch in one transaction (after its output)."""
        base = topic_path(batch.topic, batch.group)
        values: dict[str, bytes] = {}
        for partition, offset in batch.offsets.items():
            if int(partition) < 0:
                raise ValueError(f"{base}: partition id {partition} is negative")
            if not 0 <= int(offset) <= MAX_OFFSET:
                raise ValueError(f"{base}: offset for partition {partition} is out of range: {offset}")
            values[str(int(partition))] = str(int(offset)).encode()
        if not values:
            raise ValueError(f"batch for {base} has no partition offsets to save")
        with self._calling(base):
            client = self._connection()
            # Two tries: another writer may create or delete a node between our listing and
            # our commit, which rolls the transaction back (nothing written); re-list once.
            for attempt in range(2):
                try:
                    self._wait(client.ensure_path_async(base))
                except NoNodeError:
                    # ensure_path makes every parent below the chroot; only the chroot's own
                    # parent can be missing (kazoo never creates a chroot's ancestors).
                    raise OffsetStoreError(
                        self.name, self.chroot, "the chroot's parent znode does not exist; create the chroot first"
                    ) from None
                existing = set(self._wait(client.get_children_async(base)))
                tx = client.transaction()
                paths = []
                for child, value in sorted(values.items(), key=lambda kv: int(kv[0])):
                    path = f"{base}/{child}"
                    paths.append(path)
                    if child in existing:
                        tx.set_data(path, value)
                    else:
                        tx.create(path, value)
                results = self._wait(tx.commit_async())
                # A failed multi returns one exception per op: the culprit carries the real
                # error, the others RolledBackError (before it) or RuntimeInconsistency (after).
                failed = [
                    (path, r) for path, r in zip(paths, results)
                    if isinstance(r, Exception) and not isinstance(r, (RolledBackError, RuntimeInconsistency))
                ]
                if len(results) != len(paths) and not failed:
                    failed = [(base, RuntimeError(f"{len(results)} results for {len(paths)} operations"))]
                if not failed:
                    return
                if attempt == 0 and all(isinstance(r, (NodeExistsError, NoNodeError)) for _, r in failed):
                    continue
                path, error = failed[0]
                raise OffsetStoreError(
                    self.name, path, f"transaction rolled back, nothing saved: {type(error).__name__} {error}".strip()
                )

    # --- reads ----------------------------------------------------------------------------------
    def _read(self, topic: str, group: str) -> tuple[dict[int, int], dict[int, int], list[MalformedRecord]]:
        """Every partition node: (offsets, mtimes, malformed nodes), all keyed by partition."""
        read = self._read_many([PipelineKey(topic, group)])[PipelineKey(topic, group)]
        if isinstance(read, OffsetStoreError):
            raise read
        return read

    def _read_many(self, keys: list[PipelineKey]) -> dict[PipelineKey, tuple | OffsetStoreError]:
        """`_read` of many pipelines in two pipelined rounds (every children listing sent before
        any is awaited, then every node's get): a poll of N pipelines waits two network round
        trips, not 2 x N. A refused node (NoAuth) is its pipeline's OffsetStoreError in the
        result; a lost connection fails the whole read (StoreUnreachable)."""
        out: dict[PipelineKey, tuple | OffsetStoreError] = {}
        if not keys:
            return out
        bases = {key: topic_path(key.topic, key.group) for key in keys}
        # An unreachable server is named at the pipeline's path when one is read (a job's load).
        with self._calling(bases[keys[0]] if len(keys) == 1 else "/consumers"):
            client = self._connection()
            listings = [(key, client.get_children_async(bases[key])) for key in keys]
            pending = []
            for key, result in listings:
                offsets: dict[int, int] = {}
                mtimes: dict[int, int] = {}
                bad: list[MalformedRecord] = []
                out[key] = (offsets, mtimes, bad)
                children = self._wait_one(key, bases[key], result, out)
                for child in sorted(children or (), key=lambda c: (len(c), c)):
                    path = f"{bases[key]}/{child}"
                    if not PARTITION_RE.fullmatch(child):
                        bad.append(MalformedRecord(self.name, path, f"child {child!r} is not a partition id"))
                        continue
                    pending.append((key, int(child), path, client.get_async(path)))
            for key, partition, path, result in pending:
                got = self._wait_one(key, path, result, out)
                if got is None or isinstance(out[key], OffsetStoreError):
                    continue  # deleted since the listing (it no longer holds an offset), or refused
                data, stat = got
                offsets, mtimes, bad = out[key]
                try:
                    offsets[partition] = self._decode(path, data)
                    mtimes[partition] = stat.mtime
                except MalformedRecord as exc:
                    bad.append(exc)
        return out

    def _wait_one(self, key: PipelineKey, path: str, result, out: dict) -> Any:
        """One answer: None for a node gone; a refusal becomes the pipeline's error in `out`."""
        try:
            return self._wait(result)
        except NoNodeError:
            return None
        except UNREACHABLE:
            raise
        except KazooException as exc:
            out[key] = OffsetStoreError(self.name, path, f"ZooKeeper refused the call: {type(exc).__name__} {exc}")
            return None

    def _decode(self, path: str, data: bytes | None) -> int:
        try:
            text = (data or b"").decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedRecord(self.name, path, f"value {data[:40]!r} is not UTF-8 text") from None
        # Tolerate the newline `echo 42 | ...` style tools leave; nothing else.
        raw = text.strip(" \t\r\n")
        if raw.startswith("-") and OFFSET_RE.fullmatch(raw[1:]):
            raise MalformedRecord(self.name, path, f"offset {raw} is negative")
        if not OFFSET_RE.fullmatch(raw) or int(raw) > MAX_OFFSET:
            raise MalformedRecord(self.name, path, f"offset {raw[:40]!r} is not a 64-bit decimal number")
        return int(raw)

    def load_latest(self, topic: str, group: str) -> BatchOffsets | None:
        """The current offsets, dated by the newest node mtime; None if no partition node exists.

        Any malformed partition node raises MalformedRecord: a job must not guess where to start.
        """
        offsets, mtimes, bad = self._read(topic, group)
        if bad:
            raise bad[0]
        if not offsets:
            return None
        return BatchOffsets(topic, group, max(mtimes.values()), offsets, written_ms=mtimes)

    def torn_problem(self, topic: str, group: str, mtimes: dict[int, int]) -> RowProblem | None:
        """A warning when the partition nodes were written more than torn_after_ms apart. Its
        text names the partitions only, never the times: it recurs at every poll while the state
        lasts and must stay one problem with a count (the dashboard keeps when it was last seen;
        the nodes' times are in ZooKeeper)."""
        if not mtimes:
            return None
        newest = max(mtimes.values())
        lagging = [p for p, t in mtimes.items() if t < newest - self.torn_after_ms]
        if not lagging:
            return None
        current = [p for p in mtimes if p not in lagging]
        return RowProblem(
            self.name,
            topic_path(topic, group),
            f"torn write: partitions {_partitions(lagging)} behind the others ({_partitions(current)}), written "
            f"more than {self.torn_after_ms / 1000:g} s before them; a restart re-reads the lagging partitions "
            "(duplicates, not loss)",
        )

    def history(
        self, topic: str, group: str, start_ms: int = 0, end_ms: int | None = None, limit: int | None = None
    ) -> HistoryPage:
        """At most the current state as one batch (if dated within [start_ms, end_ms]), plus problems.

        Malformed nodes are reported whatever the window; the torn-write warning comes with the batch.
        """
        offsets, mtimes, bad = self._read(topic, group)
        return self._page(topic, group, offsets, mtimes, bad, start_ms, end_ms, limit)

    def histories(self, keys: list[PipelineKey], chunk: int = 1000) -> dict[PipelineKey, HistoryPage | OffsetStoreError]:
        """`history()` of many pipelines (a poll's read), `chunk` at a time in two pipelined
        rounds each; a pipeline whose nodes the server refused maps to its OffsetStoreError."""
        pages: dict[PipelineKey, HistoryPage | OffsetStoreError] = {}
        for i in range(0, len(keys), chunk):
            for key, read in self._read_many(keys[i:i + chunk]).items():
                pages[key] = read if isinstance(read, OffsetStoreError) else self._page(key.topic, key.group, *read)
        return pages

    def _page(self, topic: str, group: str, offsets: dict[int, int], mtimes: dict[int, int],
              bad: list[MalformedRecord], start_ms: int = 0, end_ms: int | None = None,
              limit: int | None = None) -> HistoryPage:
        page = HistoryPage(problems=[RowProblem(self.name, exc.key, exc.problem) for exc in bad])
        if not offsets:
            return page
        # Each node's mtime says when its partition was last written: the partition rules tell
        # a partition that stopped committing from one re-written unchanged (stalled) by it.
        batch = BatchOffsets(topic, group, max(mtimes.values()), offsets, written_ms=mtimes)
        if batch.batch_time_ms < start_ms or (end_ms is not None and batch.batch_time_ms > end_ms):
            return page
        if limit is not None and limit < 1:
            page.truncated = True
            return page
        page.batches.append(batch)
        torn = self.torn_problem(topic, group, mtimes)
        if torn is not None:
            page.problems.append(torn)
        return page

    def list_pipelines(self) -> tuple[list[PipelineKey], list[RowProblem]]:
        """The (topic, group) pairs with at least one partition node, by children listings only.

        Three pipelined rounds: /consumers, each group's offsets node, each topic's stat (its
        child count). Groups without an `offsets` node (e.g. only `ids`/`owners`) are skipped.
        """
        found: list[PipelineKey] = []
        problems: list[RowProblem] = []
        with self._calling("/consumers"):
            client = self._connection()
            try:
                groups = self._wait(client.get_children_async("/consumers"))
            except NoNodeError:
                return found, problems
            listings = [(g, client.get_children_async(f"/consumers/{g}/offsets")) for g in groups]
            stats = []
            for group, result in listings:
                try:
                    topics = self._wait(result)
                except NoNodeError:
                    continue
                except NoAuthError:
                    problems.append(RowProblem(self.name, f"/consumers/{group}/offsets", "not readable (NoAuth)"))
                    continue
                for topic in topics:
                    stats.append((topic, group, client.exists_async(f"/consumers/{group}/offsets/{topic}")))
            for topic, group, result in stats:
                stat = self._wait(result)
                if stat is not None and stat.numChildren > 0:
                    found.append(PipelineKey(topic, group))
        return sorted(found), problems
