"""Tests against real servers: PostgreSQL, Redis, the local stack (Tansu, ZooKeeper, the HBase stand-in), Spark, the deployed processes."""
