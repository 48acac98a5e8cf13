#!/usr/bin/env bash
# Interleaved before/after runs of bench_deploy.py: the working tree against an older commit, same script, same
# machine, so that a shared machine's drift hits both sides alike.
#
# Usage: bench/ab_deploy.sh OLD_COMMIT [ROUNDS] [bench_deploy.py options...]
# Writes bench/out/ab-<old>-{before,after}-<round>.json (git-ignored). The old commit runs from a git worktree with
# PYTHONPATH pointing at its packages, in this checkout's virtualenv.
set -euo pipefail
old=${1:?usage: bench/ab_deploy.sh OLD_COMMIT [ROUNDS] [options...]}
rounds=${2:-3}
shift $(( $# >= 2 ? 2 : 1 ))
root=$(cd "$(dirname "$0")/.." && pwd)
python="$root/.venv/bin/python"
tree=$(mktemp -d /tmp/eru-ab-XXXXXX)
trap 'git -C "$root" worktree remove --force "$tree" >/dev/null 2>&1 || true' EXIT
git -C "$root" worktree add --detach "$tree" "$old" >/dev/null
old_path="$tree/libs:$tree/services/allocator:$tree/services/distributor:$tree/services/node-agent:$tree/services/eviction"
mkdir -p "$root/bench/out"
short=$(git -C "$root" rev-parse --short "$old")
for round in $(seq 1 "$rounds"); do
  echo "round $round/$rounds: before ($short)" >&2
  PYTHONPATH="$old_path" "$python" "$root/bench/bench_deploy.py" "$@" > "$root/bench/out/ab-$short-before-$round.json"
  echo "round $round/$rounds: after (working tree)" >&2
  "$python" "$root/bench/bench_deploy.py" "$@" > "$root/bench/out/ab-$short-after-$round.json"
done
echo "written: bench/out/ab-$short-{before,after}-{1..$rounds}.json" >&2
