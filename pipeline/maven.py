"""JVM artifacts fetched by Maven from the small poms in ``stack/`` (the project's tree).

Maven's own output goes to a log file; the caller gets one status line. A
folder counts as fetched once it holds a ``.complete`` marker, so an
interrupted fetch is retried, and a fetched folder costs nothing. Fetches of
one folder take turns (a lock file beside it): the nodes of a cluster are
prepared in parallel, and each would otherwise wipe the folder another Maven
run is filling. The local stack fetches its brokers' jars so, and the Spark
jobs their Kafka connector where no folder of jars is given
(:mod:`pipeline.spark_connector`).
"""

from __future__ import annotations

import fcntl
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.errors import ConfigError, ServiceUnavailable
from pipeline.observability.progress import Reporter, quiet
from pipeline.settings import PROJECT_ROOT

POM_DIR = PROJECT_ROOT / "stack"
_COMPLETE = ".complete"
# "<artifactId>-<version>[-<classifier>].jar", version like 3.9.1 or 4.1.118.Final; the
# artifactId may itself hold digits ("log4j-1.2-api", "spark-sql-kafka-0-10_2.13")
_JAR_NAME = re.compile(r"^(?P<artifact>.+)-\d+(?:\.\w+)+(?:-[\w.-]*)?\.jar$")


def artifact_id(jar_name: str) -> str:
    """The Maven artifactId a jar file name was made from (``kafka-clients-3.9.1.jar``)."""
    match = _JAR_NAME.match(jar_name)
    return match.group("artifact") if match else jar_name.removesuffix(".jar")


@contextmanager
def _exclusive(dest: Path) -> Iterator[None]:
    """Hold the lock of ``dest`` (threads and processes alike wait for it)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with (dest.parent / f".{dest.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def fetch(
    name: str,
    pom: Path,
    dest: Path,
    properties: dict[str, str],
    log_dir: Path,
    report: Reporter = quiet,
) -> list[Path]:
    """Run ``mvn dependency:copy-dependencies`` for ``pom`` into ``dest`` (once)."""
    if (dest / _COMPLETE).exists():
        return sorted(dest.glob("*.jar"))
    with _exclusive(dest):
        if (dest / _COMPLETE).exists():  # another fetch finished while we waited
            return sorted(dest.glob("*.jar"))
        return _maven(name, pom, dest, properties, log_dir, report)


def _maven(
    name: str, pom: Path, dest: Path, properties: dict[str, str], log_dir: Path, report: Reporter
) -> list[Path]:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ConfigError("Maven (`mvn`) is needed to fetch JVM jars: apt-get install -y maven")
    log = log_dir / f"maven-{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        shutil.rmtree(dest)
    cmd = [
        mvn,
        "-B",
        "-f",
        str(pom),
        f"-DoutputDirectory={dest}",
        *(f"-D{key}={value}" for key, value in properties.items()),
        "dependency:copy-dependencies",
    ]
    report(f"{name}: fetching jars with Maven into {dest} (log: {log}) ...")
    started = time.monotonic()
    with log.open("wb") as out:
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    jars = sorted(dest.glob("*.jar"))
    if rc != 0 or not jars:
        raise ServiceUnavailable(f"Maven failed to fetch {name} jars (exit {rc}); see {log}")
    (dest / _COMPLETE).write_text(" ".join(cmd) + "\n")
    report(f"{name}: {len(jars)} jars fetched in {time.monotonic() - started:.1f}s")
    return jars
