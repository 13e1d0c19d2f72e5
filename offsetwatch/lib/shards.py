"""Which shard of a cluster's poll a topic belongs to, and how many shards a cluster has (issue
#16: one cluster of 50,000 partitions was one task of 15-21 s, longer than the interval).

Pure functions: the fan-out, the poll and the pipeline page each call them with the same inputs
and so agree on the same shard without asking one another.

- A topic's shard is a stable hash of its name (CRC-32 of its UTF-8 bytes, not Python's
  `hash`, which is salted per process) modulo the shard count. Every pipeline of a topic lands in
  the same shard (its watermark series and its "twins", the same topic and group in two stores,
  are evaluated together), and a topic's shard depends on its own name only: adding or removing
  another topic moves no topic (contiguous ranges of the sorted topic list would move every
  topic after it). Balance is by topic count, statistically: at 1,000 topics in 5 shards the
  largest shard holds about 5-10 % more than the mean.
- The shard count is the partitions a poll evaluates (each tracked topic's partitions once per
  pipeline reading it: the evaluation, most of a poll's time, is per pipeline and partition) over
  the partitions one shard may hold, rounded up: a cluster at or under the limit is one shard,
  polled as before shards existed.
"""
from __future__ import annotations

import math
import zlib


def shard_of(topic: str, shards: int) -> int:
    """The shard (1 to `shards`) whose poll reads `topic`; always 1 when there is one shard."""
    if shards <= 1:
        return 1
    return zlib.crc32(topic.encode("utf-8", "surrogatepass")) % shards + 1


def shard_count(partitions: int, per_shard: int, most: int = 64) -> int:
    """Shards for a cluster whose poll evaluates `partitions`: one per `per_shard` partitions
    or part of them, at least 1, at most `most` (each shard is a health row and a task per cycle).
    `per_shard` <= 0 turns sharding off."""
    if per_shard <= 0 or partitions <= per_shard:
        return 1
    return max(1, min(most, math.ceil(partitions / per_shard)))
