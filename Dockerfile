# The one image of every Offset Watch service (web, worker, beat, migrate, producer, spark-job).
# python:3.11-slim + a Java runtime for PySpark + Chromium for chart images + the package.
FROM python:3.11-slim-bookworm

ARG SPARK_VERSION=4.3.0
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    DJANGO_SETTINGS_MODULE=offsetwatch.settings

# openjdk-17: PySpark 4 needs Java 17; chromium: PNG/SVG chart exports (kaleido drives it).
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       openjdk-17-jre-headless chromium procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY streamoffsets ./streamoffsets
COPY collectors ./collectors
COPY dashboard ./dashboard
COPY devstack ./devstack
COPY reference_job ./reference_job
COPY templates ./templates
COPY manage.py ./
# Editable, so the code runs from /app, where the settings find templates/ beside the packages.
# PySpark pinned to SPARK_VERSION: the official Kafka connector fetched with --packages must match it.
RUN pip install -e . "pyspark==${SPARK_VERSION}"
ENV PYTHONPATH=/app

# An unprivileged user owning the data directories the volumes mount on.
RUN useradd --create-home --uid 10001 offsetwatch \
    && mkdir -p /data/run /data/static /data/exports /data/job \
    && chown -R offsetwatch:offsetwatch /data
USER offsetwatch
ENV HOME=/home/offsetwatch

EXPOSE 8000
CMD ["gunicorn", "offsetwatch.wsgi", "--bind=0.0.0.0:8000"]
