# BigFleet workers: `bigfleet worker` against any Temporal server (see docker-compose.yml and
# docs/operations.md). Build: docker build -t bigfleet .
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# Only what the package needs (the build context may hold a .venv: it is not copied).
COPY pyproject.toml ./
COPY bigfleet ./bigfleet
COPY workflows ./workflows
COPY activities ./activities
COPY workers ./workers
RUN pip install .
COPY examples ./examples

RUN useradd --system --uid 10001 --home-dir /app bigfleet
USER bigfleet

# BigFleet's own metrics (prometheus_client) and the Temporal SDK's (workflow-side metrics).
EXPOSE 9464 9465
# SIGTERM (docker stop) shuts the workers down cleanly.
ENTRYPOINT ["bigfleet"]
CMD ["worker", "--fleet", "examples/dev-fleet.yaml"]
