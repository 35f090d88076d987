# The babelstream image: router, workers, the Spark SLA job and the dashboard
# (docker-compose.yml runs each as a service with a different command).
# The GPU image: `docker build --build-arg EXTRAS=gpu -t babelstream:gpu .` adds CUDA 12's
# cuBLAS from the nvidia-cublas-cu12 wheel (CTranslate2's wheels need it; the host's NVIDIA
# driver, any CUDA 12 or later, comes in through the NVIDIA container toolkit).
FROM python:3.11-slim-bookworm
ARG EXTRAS=

# Java for Spark (pyspark 4.x needs 17+); Maven fetches the Spark jobs' Kafka
# connector jars at build time into kafka.spark_jars_dir (nothing is fetched at run time).
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless maven \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY pipeline pipeline
COPY workers workers
COPY jobs jobs
COPY schemas schemas
COPY stack stack
COPY models models
# Editable, so the registry (models/registry.toml) and poms resolve under /app.
RUN pip install --no-cache-dir -e ".${EXTRAS:+[$EXTRAS]}"

ENV BABELSTREAM_KAFKA__SPARK_JARS_DIR=/opt/babelstream/spark-jars \
    BABELSTREAM_WORKER__DATA_DIR=/var/babelstream/faust \
    PYTHONUNBUFFERED=1
RUN python -m pipeline.spark_connector /opt/babelstream/spark-jars

EXPOSE 9464 8050
ENTRYPOINT ["babelstream"]
CMD ["--help"]
