"""JVM jars: fetches of one folder take turns (the nodes of a cluster are prepared in
parallel), and a deployment's Spark connector jars are the folder it names."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pipeline.errors import ConfigError
from pipeline.maven import fetch
from pipeline.settings import KafkaSettings
from pipeline.spark_connector import connector_jars

# A stand-in for Maven: counts its runs, and needs a second to fill the folder, so a
# second run started meanwhile would wipe the folder under the first.
FAKE_MVN = """#!/bin/sh
echo run >> "{runs}"
for arg in "$@"; do
  case "$arg" in -DoutputDirectory=*) dest="${{arg#-DoutputDirectory=}}";; esac
done
mkdir -p "$dest"
sleep 1
touch "$dest/kafka_2.13-3.9.1.jar"
"""


def test_parallel_fetches_of_one_folder_run_maven_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tmp_path / "runs"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mvn = bin_dir / "mvn"
    mvn.write_text(FAKE_MVN.format(runs=runs))
    mvn.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    dest = tmp_path / "jars" / "kafka-3.9.1"

    def one(_: int) -> list[Path]:
        return fetch("kafka-3.9.1", tmp_path / "pom.xml", dest, {}, tmp_path / "log")

    with ThreadPoolExecutor(3) as pool:
        fetched = list(pool.map(one, range(3)))

    assert fetched == [[dest / "kafka_2.13-3.9.1.jar"]] * 3
    assert runs.read_text().splitlines() == ["run"]


def test_a_deployments_connector_jars_are_the_folder_it_gives(tmp_path: Path) -> None:
    # an image fills kafka.spark_jars_dir when it is built: nothing is fetched at run time
    folder = tmp_path / "spark-jars"
    folder.mkdir()
    with pytest.raises(ConfigError, match="holds no jars: fill it when the image is built"):
        connector_jars(KafkaSettings(spark_jars_dir=folder))
    for name in ("spark-sql-kafka-0-10_2.13-4.1.1.jar", "kafka-clients-3.9.1.jar", "notes.txt"):
        (folder / name).touch()
    assert connector_jars(KafkaSettings(spark_jars_dir=folder)) == [
        folder / "kafka-clients-3.9.1.jar",
        folder / "spark-sql-kafka-0-10_2.13-4.1.1.jar",
    ]
