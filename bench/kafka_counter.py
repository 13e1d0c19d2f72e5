"""A TCP relay in front of one Kafka-protocol broker that counts the requests clients send, by API.

The broker advertises the relay's port, so every connection a client opens (bootstrap and
after metadata) goes through it. Each Kafka request is a 4-byte big-endian size and a body
starting with the int16 API key; the relay reads frames client-to-broker and copies the answers
back unread. Every 0.2 s it writes {api key: count} to the stats file (JSON), which the
benchmark reads before and after a cycle.

Run: python bench/kafka_counter.py LISTEN_PORT BROKER_PORT STATS_FILE
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import Counter

# The API keys the collectors send (Kafka protocol numbering).
API_NAMES = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
             10: "FindCoordinator", 11: "JoinGroup", 15: "DescribeGroups", 16: "ListGroups", 18: "ApiVersions",
             32: "DescribeConfigs", 53: "AlterPartitionReassignments"}

counts: Counter = Counter()


async def _client_to_broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readexactly(4)
            size = int.from_bytes(head, "big")
            body = await reader.readexactly(size)
            counts[int.from_bytes(body[:2], "big", signed=True)] += 1
            writer.write(head + body)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _broker_to_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def main(listen: int, upstream: int, stats: str) -> None:
    async def handle(client_r, client_w):
        try:
            broker_r, broker_w = await asyncio.open_connection("127.0.0.1", upstream)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_client_to_broker(client_r, broker_w), _broker_to_client(broker_r, client_w))

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    async with server:
        while True:
            tmp = stats + ".tmp"
            with open(tmp, "w") as f:
                json.dump(dict(counts), f)
            os.replace(tmp, stats)
            await asyncio.sleep(0.2)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]))
