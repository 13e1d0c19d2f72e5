"""One place that builds the local SparkSession the job and the tests use."""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path


def build_spark_session(app_name: str, work_dir: Path, master: str | None = None):
    # Spark's Python workers must run this interpreter (the venv's), and bind to loopback.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    # py4j logs its connection shutdown at INFO from __del__, after logging is torn down.
    logging.getLogger("py4j").setLevel(logging.WARNING)

    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    return (
        SparkSession.builder.appName(app_name)
        .master(master or os.environ.get("SPARK_MASTER", "local[2]"))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.local.dir", str(work_dir / "local"))
        .config("spark.sql.warehouse.dir", str(work_dir / "warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={work_dir}")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        .getOrCreate()
    )
