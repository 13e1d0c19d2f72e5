"""A demo producer: a steady stream of small JSON records to every partition of a topic."""
from __future__ import annotations

import argparse
import json
import signal
import threading
import time

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def producer_config(bootstrap: str) -> dict:
    # One record per produce request: Tansu miscounts the high watermark for multi-record batches.
    return {"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1, "acks": "all"}


def ensure_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 10.0) -> bool:
    """Create the topic if it does not exist. True if created."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=timeout_s).topics
    if topic in existing:
        return False
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    try:
        futures[topic].result(timeout=timeout_s)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise
        return False
    return True


def produce(bootstrap: str, topic: str, partitions: int, count: int, start: int = 0) -> None:
    """Produce `count` records round-robin over the partitions and wait for delivery."""
    producer = Producer(producer_config(bootstrap))
    for i in range(start, start + count):
        producer.produce(topic, key=str(i).encode(), value=json.dumps({"n": i}).encode(), partition=i % partitions)
        producer.poll(0)
    remaining = producer.flush(30)
    if remaining:
        raise RuntimeError(f"{remaining} records to {topic} were not delivered within 30 s")


def produce_forever(bootstrap: str, topic: str, partitions: int, rate_per_s: float, stop: threading.Event) -> int:
    producer = Producer(producer_config(bootstrap))
    sent = 0
    interval = 1.0 / rate_per_s
    next_at = time.monotonic()
    while not stop.is_set():
        producer.produce(topic, key=str(sent).encode(), value=json.dumps({"n": sent, "at": time.time()}).encode(),
                         partition=sent % partitions)
        producer.poll(0)
        sent += 1
        next_at += interval
        stop.wait(max(0.0, next_at - time.monotonic()))
    producer.flush(10)
    return sent


def main() -> None:
    parser = argparse.ArgumentParser(description="Produce demo records to a topic until stopped.")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rate", type=float, default=20.0, help="records per second")
    args = parser.parse_args()
    ensure_topic(args.bootstrap, args.topic, args.partitions)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    sent = produce_forever(args.bootstrap, args.topic, args.partitions, args.rate, stop)
    print(f"producer stopped after {sent} records", flush=True)


if __name__ == "__main__":
    main()
