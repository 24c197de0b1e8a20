# The coordinator image: `queue-coordinator serve` on 0.0.0.0:8080, state under /data.
# Used by docker-compose.yml; configure it with the environment variables of docs/operations.md.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    COORDINATOR_HOST=0.0.0.0 \
    COORDINATOR_PORT=8080 \
    COORDINATOR_DATA_DIR=/data

WORKDIR /app
COPY pyproject.toml README.md LICENSE ./
COPY coordinator/ coordinator/
COPY worker_sdk/ worker_sdk/
COPY hawk_signing/ hawk_signing/
COPY glibc_malloc/ glibc_malloc/
COPY otlp_tracing/ otlp_tracing/
COPY run_progress/ run_progress/
COPY key_value_logs/ key_value_logs/
COPY schemas/ schemas/
# A regular install: the wheel carries the SQL files and the JSON schemas.
RUN pip install . \
    && useradd --system --uid 10001 --home-dir /data coordinator \
    && mkdir -p /data \
    && chown coordinator /data

USER coordinator
VOLUME ["/data"]
EXPOSE 8080
CMD ["queue-coordinator", "serve"]
