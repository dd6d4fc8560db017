"""The Spark app whose driver writes the class-data archive (:mod:`airflow_provider_tsb.spark.class_data`).

It does, on a few rows, what a tsb job's driver does, so the classes of those steps are loaded
and archived: a DataFrame from Python rows, Parquet written and read back with a schema, joins,
aggregates and a window, a Python UDF, and a Structured Streaming query with ``foreachBatch``.

    spark-submit --driver-java-options -XX:ArchiveClassesAtExit=FILE class_data_app.py SCRATCH_DIR
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F


def main(scratch: str) -> None:
    spark = SparkSession.builder.appName("tsb-class-data").config("spark.sql.shuffle.partitions", "2").getOrCreate()
    rows = spark.createDataFrame([(i, f"w{i % 7}", float(i) / 3) for i in range(100)], "id long, word string, x double")
    rows.write.mode("error").option("compression", "snappy").partitionBy("word").parquet(f"{scratch}/parts")
    back = spark.read.schema(rows.schema).parquet(f"{scratch}/parts").withColumn("file", F.col("_metadata.file_path"))
    counts = back.groupBy("word").agg(F.count("*").alias("n"), F.sum("x").alias("x"))
    ranked = counts.withColumn("rank", F.row_number().over(Window.orderBy(F.desc("n"))))
    joined = back.join(ranked.select("word", "n", "rank"), "word", "left")
    gone = back.join(counts.select("word"), "word", "left_anti")
    plus_one = F.udf(lambda v: v + 1, "long")
    joined.unionByName(gone, allowMissingColumns=True).select(plus_one("id")).collect()
    ranked.coalesce(1).write.mode("error").parquet(f"{scratch}/ranked")
    query = (
        spark.readStream.format("rate").option("rowsPerSecond", 10).load()
        .writeStream.foreachBatch(lambda df, _epoch: df.count())
        .option("checkpointLocation", f"{scratch}/checkpoint").trigger(once=True).start()
    )
    query.awaitTermination(120)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
