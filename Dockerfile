# BigFleet: every `bigfleet` process (workers, the roll-up gateway, the reference provider and
# operator servers) from one image; docker-compose.yml and deploy/kubernetes/ run it.
# Build: docker build -t bigfleet .
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
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

# One numeric user and group (10001), so that Kubernetes' runAsNonRoot can check it and
# runAsUser/fsGroup can name it. The directories a volume is mounted on exist and are its own:
# Docker copies a mount point's owner into a new named volume, so the compose volumes are
# writable by it too (Kubernetes does the same with fsGroup).
#   /var/lib/bigfleet/snapshots  the shard snapshot store (worker --snapshot-dir)
#   /var/lib/bigfleet/provider   a reference provider's SQLite state (provider serve --state-dir)
#   /etc/bigfleet/tls            TLS material (compose: the `certs` service writes it there)
RUN groupadd --system --gid 10001 bigfleet \
    && useradd --system --uid 10001 --gid 10001 --home-dir /app --shell /usr/sbin/nologin bigfleet \
    && mkdir -p /var/lib/bigfleet/snapshots /var/lib/bigfleet/provider /etc/bigfleet/tls \
    && chown -R 10001:10001 /var/lib/bigfleet /etc/bigfleet/tls
USER 10001:10001

# BigFleet's own metrics (prometheus_client) and the Temporal SDK's (workflow-side metrics);
# /healthz and /readyz (--health-port); the gateway's, a provider's and an operator's gRPC.
EXPOSE 9464 9465 8080 50070 50051 50061
# SIGTERM (docker stop, a pod's termination) shuts every process down cleanly.
ENTRYPOINT ["bigfleet"]
CMD ["worker", "--fleet", "examples/dev-fleet.yaml"]
