"""Connected components of the edges given on stdin (a JSON list of pairs), by the Spark engine's
large-star / small-star, printed as a JSON list of ``[node, component]``. Run as a process of its own, so
that its JVM ends with it (a test's own process would keep it for the rest of the session)."""

from __future__ import annotations

import json
import os
import sys

if __name__ == "__main__":
    from pyspark.sql import SparkSession

    from scrapy_neardup.offline.spark.components import connected_components

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    try:
        frame = spark.createDataFrame(json.load(sys.stdin), "a long, b long")
        print(json.dumps([[row.node, row.component] for row in connected_components(frame).collect()]))
    finally:
        spark.stop()
