"""The Spark session both jobs start: the Kafka connector jars, no UI, quiet logs."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from pipeline.settings import Settings
from pipeline.spark_connector import connector_jars

log = logging.getLogger(__name__)


def spark_session(
    settings: Settings,
    app_name: str,
    *,
    master: str,
    driver_memory: str,
    shuffle_partitions: int,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A session on ``master`` with the Kafka connector's jars; ``conf`` adds
    (or overrides) Spark settings of one job."""
    # Python workers must import pyarrow and this package: use the driver's interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    jars = connector_jars(settings.kafka, log.info)
    options = {
        "spark.jars": ",".join(str(jar) for jar in jars),
        "spark.driver.memory": driver_memory,
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        **(conf or {}),
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in options.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
