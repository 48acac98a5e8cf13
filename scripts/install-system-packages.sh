#!/usr/bin/env bash
# Installs the Debian packages eru's tests use (Docker engine, static busybox, docker-compose, debootstrap for the
# image's base, chromium and its driver), when running as root and they are missing.
set -euo pipefail
needed=()
command -v dockerd >/dev/null 2>&1 || needed+=(docker.io)
[ -x /bin/busybox ] && /bin/busybox --list 2>/dev/null | grep -qx yes && file -L /bin/busybox 2>/dev/null | grep -q static \
  || needed+=(busybox-static)
command -v docker-compose >/dev/null 2>&1 || needed+=(docker-compose)
# `make image` builds its base root filesystem with debootstrap: no image is pulled (docs/deploy.md)
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || needed+=(debootstrap)
# the web console's browser tests: Debian's headless chromium driven through its chromedriver (docs/console.md)
[ -x /usr/bin/chromium ] || needed+=(chromium)
[ -x /usr/bin/chromedriver ] || needed+=(chromium-driver)
# tmux: the terminal tests drive `eru` as a person would (Ctrl-C on a running verb, tests/e2e/test_cli_terminal.py)
command -v tmux >/dev/null 2>&1 || needed+=(tmux)
# systemd-analyze: the node agent's unit file is verified (tests/integration/deploy/test_systemd_unit.py)
command -v systemd-analyze >/dev/null 2>&1 || needed+=(systemd)
if [ ${#needed[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-system-packages: not root; missing Debian packages: ${needed[*]} (docker/browser tests will be skipped)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${needed[@]}" >/dev/null
echo "install-system-packages: installed ${needed[*]}"
