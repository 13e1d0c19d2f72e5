"""Offsets in Spark Structured Streaming checkpoint directories (read-only).
Over 400 lines because Spark's on-disk formats (offsets, commits, metadata, sources, the
temporary files Spark renames into place) are parsed here, each next to its documented layout.

A checkpoint directory holds `metadata` (the query id), `offsets/<batchId>` and
`commits/<batchId>` (plus `sources/`, `state/`, Hadoop's `.<name>.crc` files and, while Spark
writes, hidden `.<name>.<uuid>.tmp` files that it renames into place). Formats, as written by
Spark 4.3 (checked by tests/integration/test_store_checkpoint_spark.py against a real query):

    offsets/N  line 1   `v1` (or `v2`, below)
               line 2   {"batchWatermarkMs":0,"batchTimestampMs":<epoch ms>,"conf":{...}}
               line 3+  one line per source of the query, in plan order: the source's offset
                        JSON, or `-` when the source has no offset yet. No final newline.
    commits/N  `v1` (v2/v3 add state store ids), then {"nextBatchWatermarkMs":0}

In the `v2` offsets log (Spark 4.2+, with spark.sql.streaming.queryEvolution.
enableSourceEvolution and named sources, `readStream.name("...")`) each source line is
`<source name>:<offset JSON or ->` and the metadata also has `sourceMetadataInfo`.

A Kafka source's offset is `{"<topic>":{"<partition>":<next offset to read>,...}}`, for Spark's
own Kafka source and for reference_job/kafka_source.py alike (which writes it with a space after
each ':' and ','). A source offset may name several topics (subscribePattern, assign): each is
its own pipeline. The pipeline key is (topic, checkpoint directory name): the directory name
stands in for the consumer group, which Spark's Kafka source does not use for its position.

Committed vs planned. Spark writes offsets/N when it plans batch N and commits/N after the
batch's output is done. A batch with offsets/N and no commits/N is planned, not committed
(`BatchOffsets.committed=False`): on restart Spark re-runs it with exactly the offsets in
offsets/N (starting from offsets/N-1), so the position a restart resumes from is the newest
COMMITTED batch, which is what `load_latest` returns. Spark deletes old batch files (it keeps
spark.sql.streaming.minBatchesToRetain, default 100), so the history is the last ~100 batches.

The store URL's path is either one checkpoint directory (it has an `offsets/` subdirectory) or
a root whose immediate subdirectories are checkpoint directories. Malformed files (unknown
version line, truncated, not JSON, negative or non-numeric offsets, a source offset that is not
a Kafka one, a batch file name that is not a batch id) are reported as RowProblems naming the
file by `history()` and `list_pipelines()`; `load_latest` raises MalformedRecord only when the
newest committed batch cannot be read (Spark itself could not restart from it either).

Rewound checkpoint jobs (reference_job/job.py --checkpoint). A checkpoint's offsets win over
`startingOffsets`, so a job applying a rewind moves the old checkpoint aside
(`<dir>.before-rewind-<id>-<UTC time>`, kept for forensics, never read as a pipeline) and starts
a fresh one from the target. Before its query starts it writes `<dir>/offsetwatch-start.json`:

    {"batch_time_ms": <epoch ms>, "topic": "<topic>", "offsets": {"0": 30, ...}, "rewind": <id>}

That marker is the checkpoint's first batch in `history()` (dated by its `batch_time_ms`, no
batch id), so the collectors verify the rewind from it like any store's marker batch; and while
the fresh checkpoint has no committed batch, `load_latest` returns it (a job that crashed right
after the rewind restarts from the target, as Spark would from `startingOffsets`). A directory
holding only the marker is a checkpoint too.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import quote

from streamoffsets.errors import MalformedRecord, OffsetStoreError, ReadOnlyStore
from streamoffsets.stores.base import StoreBase, local_path_from_url, require_listable
from streamoffsets.stores.offsetfile import check_component
from streamoffsets.types import BatchOffsets, HistoryPage, PipelineKey, RowProblem

OFFSETS_VERSIONS = (1, 2)  # Spark 4.3 reads offsets logs up to v2
COMMITS_VERSIONS = (1, 2, 3)  # and commit logs up to v3
MAX_PARTITION = 2**31 - 1
MAX_LONG = 2**63 - 1
# An offsets file is ~1 KB plus ~20 bytes per partition; anything far larger is not one.
MAX_FILE_BYTES = 16 * 1024 * 1024
BATCH_ID_RE = re.compile(r"0|[1-9][0-9]{0,18}")
PARTITION_RE = re.compile(r"0|[1-9][0-9]{0,9}")
VERSION_RE = re.compile(r"v([0-9]{1,9})")
# What DataStreamReader.name() accepts; a JSON offset can never look like one.
SOURCE_NAME_RE = re.compile(r"[A-Za-z0-9_]+")
START_FILE = "offsetwatch-start.json"
# Checkpoints a rewind moved aside: kept for forensics, not pipelines.
ASIDE_MARK = ".before-rewind-"


def is_checkpoint_dir(path: Path) -> bool:
    """Spark's offsets log, or (a fresh checkpoint of a rewound job) only the start marker."""
    return (path / "offsets").is_dir() or (path / START_FILE).is_file()


def parse_start_file(data: bytes) -> tuple[int, str, dict[int, int], int | None]:
    """(batch time ms, topic, offsets, rewind id) of an offsetwatch-start.json; _Bad otherwise."""
    try:
        meta = _loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _Bad(f"not JSON (truncated?): {exc}") from None
    if not isinstance(meta, dict):
        raise _Bad("not a JSON object")
    batch_time, topic, offsets, rewind = (meta.get(k) for k in ("batch_time_ms", "topic", "offsets", "rewind"))
    if type(batch_time) is not int or not 0 <= batch_time <= MAX_LONG:
        raise _Bad(f"batch_time_ms {batch_time!r} is not epoch milliseconds")
    if not isinstance(topic, str) or not topic:
        raise _Bad(f"topic {topic!r} is not a topic name")
    if not isinstance(offsets, dict) or not offsets:
        raise _Bad("offsets is not a non-empty {\"<partition>\": <offset>} object")
    if rewind is not None and type(rewind) is not int:
        raise _Bad(f"rewind {rewind!r} is not a rewind id")
    return batch_time, topic, _partition_offsets("offsets", offsets), rewind


def format_start_file(batch: BatchOffsets, rewind_id: int | None) -> bytes:
    return json.dumps({"batch_time_ms": batch.batch_time_ms, "topic": batch.topic,
                       "offsets": {str(p): o for p, o in sorted(batch.offsets.items())}, "rewind": rewind_id}).encode()


def start_fresh_checkpoint(directory: Path, batch: BatchOffsets, *, rewind_id: int, aside_suffix: str) -> Path | None:
    """For a checkpoint job applying a rewind: move `directory` aside to
    `<directory>.before-rewind-<id>-<aside_suffix>` (never deleted), make it anew, and write the
    start marker (temp file, fsync, rename, fsync dir), before the query starts. Returns where
    the old checkpoint went (None if there was none)."""
    directory = Path(directory)
    moved = None
    if directory.exists():
        moved = directory.with_name(f"{directory.name}{ASIDE_MARK}{rewind_id}-{aside_suffix}")
        if moved.exists():
            raise FileExistsError(f"{moved} exists already: not overwriting a kept checkpoint")
        os.rename(directory, moved)
    directory.mkdir(parents=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{START_FILE}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(format_start_file(batch, rewind_id))
            out.flush()
            os.fchmod(out.fileno(), 0o644)  # readable by the dashboard's user
            os.fsync(out.fileno())
        os.replace(tmp, directory / START_FILE)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    for d in (directory, directory.parent):  # the rename and the new directory, durable
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return moved


class _Bad(Exception):
    """One file is malformed; carries the problem text (the caller knows the path)."""


@dataclass
class OffsetsFile:
    """What one offsets/N file says: batch time and, per Kafka topic, the batch's end offsets."""

    batch_id: int
    batch_time_ms: int
    topics: dict[str, dict[int, int]] = field(default_factory=dict)
    # Topics named by two sources with different offsets: no single position (e.g. a self-join).
    conflicting: set[str] = field(default_factory=set)
    # Source offsets of unknown (non-Kafka) format: "source #i: ..." descriptions.
    unknown: list[str] = field(default_factory=list)


def _loads(text: str):
    """json.loads that refuses NaN/Infinity and turns every failure into one ValueError."""
    def no_constants(name):
        raise ValueError(f"{name} is not a number JSON allows")
    try:
        return json.loads(text, parse_constant=no_constants)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    # json.JSONDecodeError and the int-digits limit are both ValueErrors.


def _lines(data: bytes) -> list[str]:
    if not data:
        raise _Bad("file is empty (truncated?)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Bad(f"not UTF-8 text (byte {exc.start})") from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # a final newline (Spark writes none, but hand-made files may)
    return lines


def _version(line: str, supported: tuple[int, ...], log: str) -> int:
    m = VERSION_RE.fullmatch(line)
    if not m or int(m.group(1)) == 0:
        raise _Bad(f"first line {line[:40]!r} is not a version (v1..v{supported[-1]}) of Spark's {log} log")
    version = int(m.group(1))
    if version not in supported:
        raise _Bad(f"{log} log version v{version} is not supported (v1..v{supported[-1]}): written by a newer Spark?")
    return version


def parse_offsets_file(batch_id: int, data: bytes) -> OffsetsFile:
    """Decode an offsets/N file; _Bad says what is wrong with it."""
    lines = _lines(data)
    version = _version(lines[0], OFFSETS_VERSIONS, "offsets")
    if len(lines) < 2:
        raise _Bad("no metadata line (truncated?)")
    try:
        meta = _loads(lines[1])
    except ValueError as exc:
        raise _Bad(f"metadata line is not JSON (truncated?): {exc}") from None
    batch_time = meta.get("batchTimestampMs") if isinstance(meta, dict) else None
    if type(batch_time) is not int or not 0 <= batch_time <= MAX_LONG:
        raise _Bad(f"metadata has no batchTimestampMs epoch milliseconds: {lines[1][:80]!r}")
    sources = lines[2:]
    if not sources:
        raise _Bad("no source offset lines (truncated?)")
    result = OffsetsFile(batch_id, batch_time)
    for number, line in enumerate(sources, start=1):
        where = f"source #{number}"
        if version >= 2:
            name, sep, rest = line.partition(":")
            if not sep or not SOURCE_NAME_RE.fullmatch(name):
                raise _Bad(f"{where}: line {line[:60]!r} is not '<source name>:<offset>'")
            where, line = f"source {name!r}", rest
        if line.strip() == "-":
            continue  # this source has no offset yet
        if not line.strip():
            raise _Bad(f"{where}: empty offset line")
        try:
            offset = _loads(line)
        except ValueError as exc:
            raise _Bad(f"{where}: offset is not JSON (truncated?): {exc}") from None
        if not isinstance(offset, dict) or not all(isinstance(v, dict) for v in offset.values()):
            result.unknown.append(
                f"{where}: offset {line.strip()[:80]} is not a Kafka source offset "
                '{"<topic>":{"<partition>":<offset>}}; skipped'
            )
            continue
        for topic, parts in offset.items():
            if not topic:
                raise _Bad(f"{where}: offset names an empty topic")
            offsets = _partition_offsets(f"{where}: topic {topic!r}", parts)
            if topic in result.topics and result.topics[topic] != offsets:
                result.conflicting.add(topic)
            result.topics[topic] = offsets
    return result


def _partition_offsets(where: str, parts: dict) -> dict[int, int]:
    offsets: dict[int, int] = {}
    for part, off in parts.items():
        if not PARTITION_RE.fullmatch(part) or int(part) > MAX_PARTITION:
            raise _Bad(f"{where}: partition {part[:40]!r} is not a partition id")
        if type(off) is not int:
            raise _Bad(f"{where}: partition {part}: offset {json.dumps(off)[:40]} is not an integer")
        if off < 0:
            raise _Bad(f"{where}: partition {part}: offset {off} is negative")
        if off > MAX_LONG:
            raise _Bad(f"{where}: partition {part}: offset {off} is beyond 64 bits")
        offsets[int(part)] = off
    return offsets


def check_commit_file(data: bytes) -> None:
    """A commits/N file must be a version line and a JSON object; _Bad otherwise."""
    lines = _lines(data)
    _version(lines[0], COMMITS_VERSIONS, "commits")
    if len(lines) < 2:
        raise _Bad("no metadata line (truncated?)")
    try:
        meta = _loads(lines[1])
    except ValueError as exc:
        raise _Bad(f"metadata line is not JSON (truncated?): {exc}") from None
    if not isinstance(meta, dict):
        raise _Bad(f"metadata line is not a JSON object: {lines[1][:80]!r}")


class CheckpointStore(StoreBase):
    """Read per-batch offsets from Structured Streaming checkpoint directories; never writes."""

    kind = "checkpoint"
    writable = False
    keeps_history = True

    def __init__(self, path: str | os.PathLike):
        text = os.fspath(path)
        if not os.path.isabs(text):
            raise ValueError(f"checkpoint path {text!r} must be absolute")
        self.path = Path(os.path.normpath(text))
        self.name = f"checkpoint://{quote(str(self.path))}"

    @classmethod
    def from_url(cls, url: str) -> "CheckpointStore":
        """`checkpoint:///path/to/checkpoint-or-root` (percent-escapes in the path are decoded)."""
        return cls(local_path_from_url(url, "checkpoint", "a checkpoint store"))

    def save_batch(self, batch: BatchOffsets) -> None:
        raise ReadOnlyStore(
            self.name, f"{batch.topic}:{batch.group}",
            "a Spark checkpoint is written only by its query; Offset Watch reads it",
        )

    # --- layout ---------------------------------------------------------------------------------
    def _is_single(self) -> bool:
        return is_checkpoint_dir(self.path)

    def checkpoints(self, problems: list[RowProblem] | None = None) -> list[tuple[str, Path]]:
        """(group, directory) of every checkpoint the URL covers, by name."""
        if self._is_single():
            return [(self.path.name, self.path)]
        try:
            with os.scandir(self.path) as it:
                entries = sorted(it, key=lambda e: e.name)
        except FileNotFoundError:
            if problems is not None:
                problems.append(RowProblem(self.name, str(self.path), "directory does not exist"))
            return []
        except OSError as exc:
            if problems is not None:
                problems.append(RowProblem(self.name, str(self.path), f"cannot list the directory: {exc}"))
            return []
        return [
            (e.name, Path(e.path)) for e in entries
            if not e.name.startswith(".") and ASIDE_MARK not in e.name and e.is_dir() and is_checkpoint_dir(Path(e.path))
        ]

    def checkpoint_of(self, group: str) -> Path | None:
        """The checkpoint directory for a group (its name), None if there is none."""
        check_component("group", group)
        if self._is_single():
            return self.path if self.path.name == group else None
        candidate = self.path / group
        return candidate if is_checkpoint_dir(candidate) else None

    def batch_files(self, directory: Path, problems: list[RowProblem]) -> dict[int, Path]:
        """{batch id: file} in offsets/ or commits/; names that are not batch ids are reported."""
        found: dict[int, Path] = {}
        try:
            with os.scandir(directory) as it:
                names = sorted(e.name for e in it)
        except FileNotFoundError:
            return found
        except OSError as exc:
            problems.append(RowProblem(self.name, str(directory), f"cannot list the directory: {exc}"))
            return found
        for name in names:
            if name.startswith(".") or name.endswith((".tmp", ".crc")):
                continue  # Hadoop checksums and Spark's in-flight temp files
            if BATCH_ID_RE.fullmatch(name):
                found[int(name)] = directory / name
            else:
                problems.append(RowProblem(self.name, str(directory / name), f"file name {name[:60]!r} is not a batch id"))
        return found

    def _read(self, path: Path) -> bytes:
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except OSError as exc:  # deleted by Spark's purge since the listing, or unreadable
            raise OffsetStoreError(self.name, str(path), f"cannot read the file: {exc}") from exc
        if len(data) > MAX_FILE_BYTES:
            raise MalformedRecord(self.name, str(path), f"file is larger than {MAX_FILE_BYTES} bytes")
        return data

    def read_offsets(self, batch_id: int, path: Path) -> OffsetsFile:
        """Decode offsets/N; MalformedRecord names the file and what is wrong."""
        data = self._read(path)
        try:
            return parse_offsets_file(batch_id, data)
        except _Bad as exc:
            raise MalformedRecord(self.name, str(path), str(exc)) from None

    def read_commit(self, path: Path) -> None:
        """Check commits/N; MalformedRecord names the file and what is wrong."""
        data = self._read(path)
        try:
            check_commit_file(data)
        except _Bad as exc:
            raise MalformedRecord(self.name, str(path), str(exc)) from None

    def read_start(self, directory: Path, topic: str, group: str) -> BatchOffsets | None:
        """The start marker of a rewound checkpoint as a batch of `topic` (None: no marker, or it
        is another topic's); MalformedRecord names the file and what is wrong."""
        path = directory / START_FILE
        if not path.is_file():
            return None
        try:
            batch_time, marked_topic, offsets, _ = parse_start_file(self._read(path))
        except _Bad as exc:
            raise MalformedRecord(self.name, str(path), str(exc)) from None
        if marked_topic != topic:
            return None
        return BatchOffsets(topic, group, batch_time, offsets)

    def _start_topic(self, directory: Path, problems: list[RowProblem]) -> str | None:
        path = directory / START_FILE
        if not path.is_file():
            return None
        try:
            return parse_start_file(self._read(path))[1]
        except _Bad as exc:
            problems.append(RowProblem(self.name, str(path), str(exc)))
        except OffsetStoreError as exc:
            problems.append(RowProblem(self.name, exc.key, exc.problem))
        return None

    def _batch(self, topic: str, group: str, parsed: OffsetsFile, path: Path, committed: bool) -> BatchOffsets | None:
        """The topic's batch from a decoded file; None if the file does not name the topic.

        MalformedRecord when it cannot tell: the topic is named twice with different offsets,
        or is absent while some source offset has an unknown format (it may be that one).
        """
        if topic in parsed.conflicting:
            raise MalformedRecord(self.name, str(path), f"topic {topic!r} has different offsets in two sources")
        if topic not in parsed.topics:
            if parsed.unknown:
                raise MalformedRecord(self.name, str(path), f"no Kafka offset for topic {topic!r}; " + "; ".join(parsed.unknown))
            return None
        return BatchOffsets(
            topic, group, parsed.batch_time_ms, dict(parsed.topics[topic]), batch_id=parsed.batch_id, committed=committed
        )

    # --- reads ----------------------------------------------------------------------------------
    def load_latest(self, topic: str, group: str) -> BatchOffsets | None:
        """The newest committed batch for (topic, group): where a restart of the query resumes.

        None if the checkpoint does not exist, has no committed batch, or its newest committed
        batch does not name the topic (Spark would then start the topic from startingOffsets).
        """
        directory = self.checkpoint_of(group)
        if directory is None:
            return None
        ignored: list[RowProblem] = []
        offsets = self.batch_files(directory / "offsets", ignored)
        commits = self.batch_files(directory / "commits", ignored)
        committed = sorted(set(offsets) & set(commits))
        if not committed:
            # A rewound job's fresh checkpoint before its first batch: the target it starts from.
            return self.read_start(directory, topic, group)
        newest = committed[-1]
        self.read_commit(commits[newest])
        parsed = self.read_offsets(newest, offsets[newest])
        return self._batch(topic, group, parsed, offsets[newest], committed=True)

    def history(
        self, topic: str, group: str, start_ms: int = 0, end_ms: int | None = None, limit: int | None = None
    ) -> HistoryPage:
        """Batches with start_ms <= batchTimestampMs <= end_ms, oldest (lowest batch id) first.

        Each file must be read to learn its time, so the whole retained log is scanned, but at
        most `limit` batches and problems are collected. A malformed file's time is unknown: it
        is reported whatever the window.
        """
        page = HistoryPage()
        directory = self.checkpoint_of(group)
        if directory is None:
            return page
        try:
            start = self.read_start(directory, topic, group)
        except OffsetStoreError as exc:
            start = None
            page.problems.append(RowProblem(self.name, exc.key, exc.problem))
        if start is not None and start_ms <= start.batch_time_ms and (end_ms is None or start.batch_time_ms <= end_ms):
            page.batches.append(start)  # the first batch: written before the query's first one
        offsets = self.batch_files(directory / "offsets", page.problems)
        commits = self.batch_files(directory / "commits", page.problems)
        for batch_id in sorted(offsets):
            if limit is not None and len(page.batches) + len(page.problems) >= limit:
                page.truncated = True
                break
            try:
                parsed = self.read_offsets(batch_id, offsets[batch_id])
                if parsed.batch_time_ms < start_ms or (end_ms is not None and parsed.batch_time_ms > end_ms):
                    continue
                batch = self._batch(topic, group, parsed, offsets[batch_id], committed=False)
            except OffsetStoreError as exc:
                page.problems.append(RowProblem(self.name, exc.key, exc.problem))
                continue
            if batch is None:
                continue
            if batch_id in commits:
                try:
                    self.read_commit(commits[batch_id])
                    batch = replace(batch, committed=True)
                except OffsetStoreError as exc:  # reported; the batch is not claimed as committed
                    page.problems.append(RowProblem(self.name, exc.key, exc.problem))
            page.batches.append(batch)
        return page

    def list_pipelines(self) -> tuple[list[PipelineKey], list[RowProblem]]:
        """One (topic, directory name) pair per Kafka topic in each checkpoint's newest readable batch.

        Only the newest offsets file is decoded, so a topic dropped from the query's
        subscription disappears. Older files are read only while the newer ones cannot be read
        (each reported) or name no Kafka topic beside a source of unknown format (which may be
        a damaged Kafka offset; reported for the newest file only, not once per batch).
        """
        found: set[PipelineKey] = set()
        problems: list[RowProblem] = []
        require_listable(self.name, self.path, "directory")
        for group, directory in self.checkpoints(problems):
            start_topic = self._start_topic(directory, problems)
            if start_topic is not None:
                found.add(PipelineKey(start_topic, group))
            offsets = self.batch_files(directory / "offsets", problems)
            unknown_reported = False
            for batch_id in sorted(offsets, reverse=True):
                try:
                    parsed = self.read_offsets(batch_id, offsets[batch_id])
                except OffsetStoreError as exc:
                    problems.append(RowProblem(self.name, exc.key, exc.problem))
                    continue
                found.update(PipelineKey(topic, group) for topic in parsed.topics)
                if parsed.unknown and not unknown_reported:
                    problems.extend(RowProblem(self.name, str(offsets[batch_id]), text) for text in parsed.unknown)
                    unknown_reported = True
                if parsed.topics or not parsed.unknown:
                    break
        return sorted(found), problems
