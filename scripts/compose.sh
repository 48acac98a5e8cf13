#!/usr/bin/env bash
# `make compose-up` / `make compose-down` (docs/deploy.md "The compose stack").
#   up:   docker-compose up -d with the networking this machine has — docker-compose.publish.yml where a bridge
#         network exists, docker-compose.host.yml (host networking, loopback only) where it does not (dockerd
#         --bridge=none) — then waits until every container is healthy and provisioning exited 0, and writes
#         $DIR/env (0600): ERU_BUS_URL (operator), ERU_CLIENT_URL (tenant `default`), ERU_DATABASE_URL.
#   down: removes the stack's containers, networks and volumes (its data too) and $DIR/env.
# ERU_COMPOSE_DIR (.compose), ERU_COMPOSE_PROJECT (eru), ERU_COMPOSE_NETWORK (bridge|host: skip the detection),
# ERU_COMPOSE_IMAGE (eru:latest), ERU_COMPOSE_WAIT_SECONDS (240).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${ERU_COMPOSE_DIR:-.compose}
PROJECT=${ERU_COMPOSE_PROJECT:-eru}
WAIT=${ERU_COMPOSE_WAIT_SECONDS:-240}
PY=${PY:-.venv/bin/python}

detect_network() {
  if [ -n "${ERU_COMPOSE_NETWORK:-}" ]; then
    echo "$ERU_COMPOSE_NETWORK"
  elif [ -f "$DIR/network" ]; then
    cat "$DIR/network"
  elif docker network inspect bridge >/dev/null 2>&1; then
    echo bridge
  else
    echo host
  fi
}

compose() {
  local extra=docker-compose.publish.yml
  [ "$NET" = host ] && extra=docker-compose.host.yml
  docker-compose -p "$PROJECT" --env-file "$DIR/secrets.env" -f docker-compose.yml -f "$extra" "$@"
}

wait_healthy() {
  local deadline=$((SECONDS + WAIT)) statuses waiting
  while :; do
    statuses=$(docker ps -a --filter "label=com.docker.compose.project=$PROJECT" \
      --format '{{.Label "com.docker.compose.service"}} {{.Status}}')
    waiting=$(grep -v -e '(healthy)' -e '^provision Exited (0)' <<<"$statuses" || true)
    if [ -n "$statuses" ] && [ -z "$waiting" ]; then
      return 0
    fi
    if grep -q '^provision Exited ([1-9]' <<<"$statuses"; then
      echo "compose-up: provisioning failed:" >&2
      compose logs --tail 20 provision >&2
      return 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "compose-up: not healthy within ${WAIT}s:" >&2
      echo "$waiting" >&2
      return 1
    fi
    sleep 1
  done
}

case "${1:-}" in
  up)
    [ -f "$DIR/secrets.env" ] || { echo "compose-up: no $DIR/secrets.env: run make compose-secrets" >&2; exit 2; }
    NET=$(detect_network)
    echo "$NET" >"$DIR/network"
    start=$SECONDS
    compose up -d --remove-orphans
    wait_healthy
    "$PY" -P -m eru.compose client-env --dir "$DIR" --network "$NET" >/dev/null
    echo "compose-up: stack $PROJECT healthy in $((SECONDS - start)) s ($NET networking); use it with:"
    echo "  set -a; . $DIR/env; set +a; eru status"
    ;;
  down)
    [ -f "$DIR/secrets.env" ] || { echo "compose-down: no $DIR/secrets.env: nothing was started from $DIR" >&2; exit 0; }
    NET=$(detect_network)
    compose down --volumes --remove-orphans --timeout 10
    rm -f "$DIR/env" "$DIR/network"
    ;;
  *)
    echo "usage: scripts/compose.sh up|down" >&2
    exit 2
    ;;
esac
