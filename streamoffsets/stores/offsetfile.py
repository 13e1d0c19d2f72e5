"""Offsets in a local file per group and topic (the paper's "SEO" scheme).

Layout: `<root>/<group>/<topic>/gtoffset`, one file holding every partition's offset, rewritten
after each successful batch. Group and topic are each one path component, percent-encoded
(`urllib.parse.quote(name, safe="")`: everything but `A-Za-z0-9_.-~` becomes `%XX` of its
UTF-8 bytes, `%` included, so the encoding is reversible and no name can form another path;
a leading '.' becomes `%2E`, so no stored name is hidden). Kafka topics (`[A-Za-z0-9._-]`) and
ordinary group ids are therefore stored as they are. Names
that are '', '.', '..' or contain '/', '\\' or NUL are refused with a ValueError rather than
encoded: they are far more likely a bug (or an attack) than a real group id.

File format, version 1 (UTF-8 text, '\\n' line ends, every line terminated):

    offsetwatch-gtoffset v1
    batch_time_ms=1700000000000
    0 42
    1 17
    end partitions=2

Line 1 is the version header; line 2 the batch time (epoch ms); then one `<partition>
<offset>` line per partition (written sorted by partition; read in any order, but a partition
may appear only once), offset = the next offset to read; the last line repeats the number of
partition lines. The trailer is what makes truncation detectable: a file cut after any byte
lacks it (or its final newline), and a file missing whole partition lines fails its count.
Numbers are canonical decimals (no sign, no leading zeros): partitions up to 2^31-1, offsets
and batch times up to 2^63-1.

Writes are atomic: the new content goes to a hidden temp file (`.gtoffset.<random>.tmp`) in
the same directory, which is flushed and fsynced, then `os.replace`d onto `gtoffset` (an
atomic rename on POSIX), and the directory is fsynced so the rename itself survives a power
loss. A reader therefore sees the old file or the new one, never half of one. A crash before
the rename leaves the old file intact plus a stray temp file, which readers ignore and which
is left in place (deleting it could break a concurrent writer's rename). Concurrent writers of
one file: the last rename wins, each file is whole.

Malformed files (missing or unknown version line, bad batch time line, non-numeric, negative
or out-of-range numbers, duplicate partitions, missing or wrong trailer, non-UTF-8 bytes, an
empty file) raise MalformedRecord naming the file path in `load_latest` (a job must not guess
where to start) and are reported as RowProblems by `history()`.

No history: the file keeps only the current offsets, so `history()` returns at most the current
state as one batch; the collectors' samples are the history.
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from urllib.parse import quote, unquote

from streamoffsets.errors import MalformedRecord, OffsetStoreError
from streamoffsets.stores.base import StoreBase, local_path_from_url, require_listable
from streamoffsets.types import BatchOffsets, HistoryPage, PipelineKey, RowProblem

FILE_NAME = "gtoffset"
VERSION = "v1"
HEADER_PREFIX = "offsetwatch-gtoffset "
HEADER = HEADER_PREFIX + VERSION
MAX_PARTITION = 2**31 - 1  # Kafka partition ids are signed 32-bit
MAX_LONG = 2**63 - 1  # offsets and epoch milliseconds are signed 64-bit on the JVM
# Even 100,000 partitions take ~3 MB; anything larger is not an offset file.
MAX_FILE_BYTES = 16 * 1024 * 1024
# Most file systems refuse path components longer than 255 bytes.
MAX_COMPONENT_BYTES = 255
# Canonical decimals only: "07" next to "7" would name one partition twice.
NUMBER_RE = re.compile(r"0|[1-9][0-9]{0,18}")
BATCH_TIME_RE = re.compile(r"batch_time_ms=(.*)")
PARTITION_LINE_RE = re.compile(r"(\S+) (\S+)")
TRAILER_RE = re.compile(r"end partitions=(.*)")


def check_component(what: str, name: str) -> str:
    """A group id or topic must stay one path component: refuse anything that could be another path."""
    if not isinstance(name, str) or name in ("", ".", "..") or any(c in name for c in "/\\\x00"):
        raise ValueError(
            f"{what} {name!r} cannot be a path component (empty, '.', '..', or contains '/', '\\\\' or NUL)"
        )
    return name


def encode_component(what: str, name: str) -> str:
    """The directory name a group id or topic is stored under (see the module docstring)."""
    encoded = quote(check_component(what, name), safe="")
    if encoded.startswith("."):
        # Never a hidden name: listings skip those (temp files, .snapshot directories).
        encoded = "%2E" + encoded[1:]
    if len(encoded.encode()) > MAX_COMPONENT_BYTES:
        raise ValueError(f"{what} {name!r} is too long for a file name ({len(encoded.encode())} bytes encoded)")
    return encoded


def decode_component(encoded: str) -> str | None:
    """The name a directory stands for, or None if it is not one `encode_component` could have made."""
    try:
        name = unquote(encoded, errors="strict")
        return name if encode_component("name", name) == encoded else None
    except (ValueError, UnicodeError):  # not a valid encoding, or a name we would refuse
        return None


def format_file(batch: BatchOffsets) -> bytes:
    """The file content for a batch; ValueError for values the format cannot hold."""
    if type(batch.batch_time_ms) is not int or not 0 <= batch.batch_time_ms <= MAX_LONG:
        raise ValueError(f"batch time {batch.batch_time_ms!r} is not epoch milliseconds")
    if not batch.offsets:
        raise ValueError(f"batch for topic {batch.topic!r} group {batch.group!r} has no partition offsets to save")
    lines = [HEADER, f"batch_time_ms={batch.batch_time_ms}"]
    for partition, offset in sorted((int(p), int(o)) for p, o in batch.offsets.items()):
        if not 0 <= partition <= MAX_PARTITION:
            raise ValueError(f"partition id {partition} is out of range")
        if not 0 <= offset <= MAX_LONG:
            raise ValueError(f"offset for partition {partition} is out of range: {offset}")
        lines.append(f"{partition} {offset}")
    lines.append(f"end partitions={len(batch.offsets)}")
    return ("\n".join(lines) + "\n").encode()


def parse_file(data: bytes) -> tuple[int, dict[int, int]]:
    """(batch time ms, {partition: offset}) from file content; ValueError says what is wrong."""
    if not data:
        raise ValueError("file is empty (truncated?)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte {exc.start})") from None
    if "\r" in text:
        raise ValueError("has '\\r' line ends (edited on Windows?); lines must end with '\\n' only")
    if not text.endswith("\n"):
        raise ValueError("file does not end with a newline (truncated?)")
    lines = text[:-1].split("\n")
    header = lines[0]
    if header != HEADER:
        if header.startswith(HEADER_PREFIX):
            raise ValueError(f"format version {header[len(HEADER_PREFIX):]!r} is not supported (this reader knows {VERSION})")
        raise ValueError(f"first line {header[:60]!r} is not the version header {HEADER!r}")
    if len(lines) < 2:
        raise ValueError("no batch_time_ms line (truncated?)")
    m = BATCH_TIME_RE.fullmatch(lines[1])
    if not m:
        raise ValueError(f"second line {lines[1][:60]!r} is not batch_time_ms=<epoch ms>")
    batch_time = _number(m.group(1), "batch time", MAX_LONG)
    trailer = TRAILER_RE.fullmatch(lines[-1]) if len(lines) > 2 else None
    if trailer is None:
        raise ValueError("no 'end partitions=<n>' line at the end (truncated?)")
    body = lines[2:-1]
    count = _number(trailer.group(1), "partition count", MAX_LONG)
    if count != len(body):
        raise ValueError(f"end line counts {count} partitions but the file has {len(body)} partition lines (truncated?)")
    if not body:
        raise ValueError("no partition offsets")
    offsets: dict[int, int] = {}
    for number, line in enumerate(body, start=3):
        m = PARTITION_LINE_RE.fullmatch(line)
        if not m:
            raise ValueError(f"line {number} {line[:60]!r} is not '<partition> <offset>'")
        partition = _number(m.group(1), f"line {number}: partition", MAX_PARTITION)
        if partition in offsets:
            raise ValueError(f"line {number}: partition {partition} appears twice")
        offsets[partition] = _number(m.group(2), f"line {number}: partition {partition} offset", MAX_LONG)
    return batch_time, offsets


def _number(raw: str, what: str, maximum: int) -> int:
    if raw.startswith("-") and NUMBER_RE.fullmatch(raw[1:]):
        raise ValueError(f"{what} {raw} is negative")
    if not NUMBER_RE.fullmatch(raw) or int(raw) > maximum:
        raise ValueError(f"{what} {raw[:40]!r} is not a decimal number in [0, {maximum}]")
    return int(raw)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class OffsetFileStore(StoreBase):
    """Save and read offsets as `<root>/<group>/<topic>/gtoffset` files."""

    kind = "file"
    writable = True
    keeps_history = False

    def __init__(self, root: str | os.PathLike):
        root_text = os.fspath(root)
        if not os.path.isabs(root_text):
            raise ValueError(f"offset file root {root_text!r} must be an absolute path")
        self.root = Path(os.path.normpath(root_text))
        self.name = f"file://{quote(str(self.root))}"

    @classmethod
    def from_url(cls, url: str) -> "OffsetFileStore":
        """`file:///absolute/root` (percent-escapes in the path are decoded)."""
        return cls(local_path_from_url(url, "file", "an offset file store"))

    def path_of(self, topic: str, group: str) -> Path:
        """Where (topic, group)'s file lives; ValueError for names that cannot be a path component."""
        return self.root / encode_component("group", group) / encode_component("topic", topic) / FILE_NAME

    # --- writes --------------------------------------------------------------------------------
    def save_batch(self, batch: BatchOffsets) -> None:
        """Replace the pipeline's file with this batch's offsets, atomically (call after its output)."""
        path = self.path_of(batch.topic, batch.group)
        content = format_file(batch)
        try:
            self._make_dirs(path.parent)
            fd, tmp = tempfile.mkstemp(prefix=f".{FILE_NAME}.", suffix=".tmp", dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(content)
                    out.flush()
                    os.fchmod(out.fileno(), 0o644)  # mkstemp's 0600 would hide it from a dashboard user
                    os.fsync(out.fileno())
                os.replace(tmp, path)
            except BaseException:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
                raise
            _fsync_dir(path.parent)  # make the rename itself durable
        except OSError as exc:
            raise OffsetStoreError(self.name, str(path), f"cannot write the offset file: {exc}") from exc

    def _make_dirs(self, directory: Path) -> None:
        """Create missing directories, fsyncing each new one's parent so the new entry is durable."""
        missing = []
        for d in [directory, *directory.parents]:
            if d.is_dir():
                break
            missing.append(d)
        for d in reversed(missing):
            try:
                d.mkdir()
            except FileExistsError:
                continue  # made by a concurrent writer
            _fsync_dir(d.parent)

    # --- reads ----------------------------------------------------------------------------------
    def read_file(self, path: Path, topic: str, group: str) -> BatchOffsets | None:
        """Decode one file; None if it does not exist; MalformedRecord names the path and problem."""
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise OffsetStoreError(self.name, str(path), f"cannot read the offset file: {exc}") from exc
        if len(data) > MAX_FILE_BYTES:
            raise MalformedRecord(self.name, str(path), f"file is larger than {MAX_FILE_BYTES} bytes")
        try:
            batch_time, offsets = parse_file(data)
        except ValueError as exc:
            raise MalformedRecord(self.name, str(path), str(exc)) from None
        return BatchOffsets(topic, group, batch_time, offsets)

    def load_latest(self, topic: str, group: str) -> BatchOffsets | None:
        """The saved offsets, None if the file is absent; MalformedRecord if it cannot be read."""
        return self.read_file(self.path_of(topic, group), topic, group)

    def history(
        self, topic: str, group: str, start_ms: int = 0, end_ms: int | None = None, limit: int | None = None
    ) -> HistoryPage:
        """At most the current state as one batch (if dated within [start_ms, end_ms]); a bad file is reported."""
        page = HistoryPage()
        try:
            batch = self.load_latest(topic, group)
        except OffsetStoreError as exc:  # MalformedRecord, or a file we may not read
            page.problems.append(RowProblem(self.name, exc.key, exc.problem))
            return page
        if batch is None or batch.batch_time_ms < start_ms or (end_ms is not None and batch.batch_time_ms > end_ms):
            return page
        if limit is not None and limit < 1:
            page.truncated = True
            return page
        page.batches.append(batch)
        return page

    def list_pipelines(self) -> tuple[list[PipelineKey], list[RowProblem]]:
        """The (topic, group) pairs with a `<root>/<group>/<topic>/gtoffset` file.

        Hidden entries (temp files, `.snapshot` and the like) are skipped; directories whose
        name is not one this store would write (e.g. made by hand with a raw group id holding a
        space) are reported, since `load_latest` could not find them by name.
        """
        found: list[PipelineKey] = []
        problems: list[RowProblem] = []
        require_listable(self.name, self.root, "root directory")
        for group_dir in self._subdirs(self.root, problems):
            group = decode_component(group_dir.name)
            for topic_dir in self._subdirs(group_dir, problems):
                if not (topic_dir / FILE_NAME).is_file():
                    continue
                topic = decode_component(topic_dir.name)
                if group is None or topic is None:
                    bad = group_dir if group is None else topic_dir
                    problems.append(RowProblem(
                        self.name, str(topic_dir / FILE_NAME),
                        f"directory name {bad.name!r} is not a percent-encoded name (quote(name, safe='')); "
                        "this store cannot address it",
                    ))
                    continue
                found.append(PipelineKey(topic, group))
        return sorted(found), problems

    def _subdirs(self, directory: Path, problems: list[RowProblem]) -> list[Path]:
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            problems.append(RowProblem(self.name, str(directory), f"cannot list the directory: {exc}"))
            return []
        return [Path(e.path) for e in entries if not e.name.startswith(".") and e.is_dir()]
