#!/usr/bin/env bash
# Starts a Docker engine for the node agent's tests when none answers: as root, in the background, with no bridge,
# no iptables and no IP forwarding (containers run with network `none`; nothing is routed anywhere).
# Exit 0 when `docker info` works (already running or started now), nonzero when no engine can be started.
set -uo pipefail

LOG=${ERU_DOCKERD_LOG:-/tmp/eru-dockerd.log}
WAIT_SECONDS=${ERU_DOCKERD_WAIT_SECONDS:-30}

engine_answers() {
  docker info >/dev/null 2>&1
}

if ! command -v docker >/dev/null 2>&1; then
  echo "start-dockerd: no docker client on PATH (install Debian's docker.io)" >&2
  exit 1
fi
if engine_answers; then
  exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
  echo "start-dockerd: no dockerd on PATH (install Debian's docker.io)" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "start-dockerd: not root, cannot start dockerd" >&2
  exit 1
fi
if ! pgrep -x dockerd >/dev/null 2>&1; then
  nohup dockerd --bridge=none --iptables=false --ip-forward=false >"$LOG" 2>&1 &
  echo "start-dockerd: started dockerd (pid $!, log $LOG)"
fi
for _ in $(seq 1 $((WAIT_SECONDS * 2))); do
  if engine_answers; then
    exit 0
  fi
  sleep 0.5
done
echo "start-dockerd: dockerd did not answer within ${WAIT_SECONDS}s; last lines of $LOG:" >&2
tail -n 20 "$LOG" >&2 2>/dev/null || true
exit 1
