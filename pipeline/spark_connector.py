"""The Kafka connector of the Spark jobs (SLA, bulk): ``spark-sql-kafka-0-10_2.13`` at
exactly the installed pyspark's version, with its dependencies minus every artifact
pyspark already ships.

A deployment gives the folder that holds them, ``kafka.spark_jars_dir``, filled
when its image is built (``python -m pipeline.spark_connector DIR``, as the
Dockerfile does). Without one, the jars are fetched by Maven at first use into
``var/jars/`` of the project's tree, as a development checkout wants.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.errors import ConfigError
from pipeline.maven import POM_DIR, artifact_id, fetch
from pipeline.observability.progress import Reporter, quiet
from pipeline.settings import PROJECT_ROOT, KafkaSettings

# where the jars are fetched to when kafka.spark_jars_dir is not set
DEVELOPMENT_JARS = PROJECT_ROOT / "var" / "jars"


def _pyspark() -> tuple[str, Path]:
    import pyspark

    return pyspark.__version__, Path(pyspark.__file__).parent / "jars"


def fetch_connector_jars(dest: Path, report: Reporter = quiet) -> list[Path]:
    """Fetch the connector's jars into ``dest`` with Maven (once; a fetched folder is
    kept), Maven's log beside it."""
    version, bundled = _pyspark()
    shipped = sorted({artifact_id(jar.name) for jar in bundled.glob("*.jar")})
    return fetch(
        f"spark-kafka-{version}",
        POM_DIR / "spark" / "pom.xml",
        dest,
        {"spark.version": version, "excludeArtifactIds": ",".join(shipped)},
        dest.parent,
        report,
    )


def connector_jars(kafka: KafkaSettings, report: Reporter = quiet) -> list[Path]:
    """The jars to pass as ``spark.jars``: those in ``kafka.spark_jars_dir``, or where it
    is not set, fetched for the installed pyspark into :data:`DEVELOPMENT_JARS`."""
    if kafka.spark_jars_dir is None:
        version, _ = _pyspark()
        return fetch_connector_jars(DEVELOPMENT_JARS / f"spark-kafka-{version}", report)
    jars = sorted(kafka.spark_jars_dir.glob("*.jar"))
    if not jars:
        raise ConfigError(
            f"kafka.spark_jars_dir {kafka.spark_jars_dir} holds no jars: fill it when the "
            "image is built (python -m pipeline.spark_connector DIR)"
        )
    return jars


def main(argv: list[str]) -> int:
    """``python -m pipeline.spark_connector DIR``: fetch the connector's jars into DIR."""
    if len(argv) != 1:
        print("usage: python -m pipeline.spark_connector DIR", file=sys.stderr)
        return 2
    fetch_connector_jars(Path(argv[0]), print)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
