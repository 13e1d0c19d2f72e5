"""Where the reference job reads Kafka from: the project's Python data source or Spark's official one.

- `python` (default): `reference_job.kafka_source` (PySpark's Python data source API over
  confluent-kafka), which needs no jar: what the demo and the tests run, since Maven cannot be
  reached from the development machines.
- `official`: Spark's own Kafka source, `spark.readStream.format("kafka")`, what production
  runs. Its jar comes from Maven: start Spark with
  `--packages org.apache.spark:spark-sql-kafka-0-10_2.13:<the pyspark version>` (the compose
  file sets it through PYSPARK_SUBMIT_ARGS). Both get the same `startingOffsets` JSON from the
  start plan (StartPlan.spark_starting_offsets()) and give the same columns (topic, partition,
  offset, timestamp, key, value).
"""
from __future__ import annotations

SOURCES = ("python", "official")


def kafka_read_options(
    *, source: str, bootstrap: str, topic: str, starting_offsets: str, partitions: int,
    max_offsets_per_partition: int | None = None, kafka_options: dict[str, str] | None = None,
) -> tuple[str, dict[str, str]]:
    """The format name and the options of `spark.readStream` for one source (pure: tested alone)."""
    if source not in SOURCES:
        raise ValueError(f"unknown Kafka source {source!r} (use {' or '.join(SOURCES)})")
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": starting_offsets}
    # Client security settings go through as kafka.<librdkafka/Java property>, as the official source expects.
    options.update({k if k.startswith("kafka.") else f"kafka.{k}": str(v) for k, v in (kafka_options or {}).items()})
    if source == "python":
        if max_offsets_per_partition:
            options["maxOffsetsPerPartition"] = str(max_offsets_per_partition)
        return "offsetwatch_kafka", options
    # The official source limits a batch in total, not per partition: the same bound over all of them.
    if max_offsets_per_partition:
        options["maxOffsetsPerTrigger"] = str(max_offsets_per_partition * max(partitions, 1))
    # The start plan already clamped (or refused) offsets outside the watermarks; data deleted by
    # retention while the job runs must stop it rather than be skipped silently.
    options["failOnDataLoss"] = "true"
    return "kafka", options


def kafka_stream_reader(spark, **kwargs):
    """A DataStreamReader for `kafka_read_options(**kwargs)`, registering the Python source if used."""
    fmt, options = kafka_read_options(**kwargs)
    if fmt == "offsetwatch_kafka":
        from reference_job.kafka_source import KafkaDataSource

        spark.dataSource.register(KafkaDataSource)
    reader = spark.readStream.format(fmt)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader
