#!/usr/bin/env bash
# Interleaved before/after runs of bench_deploy.py: the working tree (or AB_NEW=<commit>) against an older commit,
# same script, same machine, so that a shared machine's drift hits both sides alike.
#
# Usage: [AB_NEW=COMMIT] [AB_BENCH=bench_scale.py] bench/ab_deploy.sh OLD_COMMIT [ROUNDS] [the bench's options...]
# (AB_BENCH: another script of bench/ that prints JSON, e.g. `AB_BENCH=bench_scale.py bench/ab_deploy.sh OLD 2
# --nodes 1000 --agents 2`)
# Writes bench/out/ab-<old>-{before,after}-<round>.json (git-ignored). Each pinned commit runs from a git worktree
# under bench/out/ (not /tmp, which other jobs clean) with PYTHONPATH pointing at its packages, in this checkout's
# virtualenv; with AB_NEW the working tree may change while the runs go on.
set -euo pipefail
old=${1:?usage: bench/ab_deploy.sh OLD_COMMIT [ROUNDS] [options...]}
rounds=${2:-3}
shift $(( $# >= 2 ? 2 : 1 ))
root=$(cd "$(dirname "$0")/.." && pwd)
python="$root/.venv/bin/python"
mkdir -p "$root/bench/out"
trees=()
cleanup() { for tree in "${trees[@]}"; do git -C "$root" worktree remove --force "$tree" >/dev/null 2>&1 || true; done; }
trap cleanup EXIT
pinned() {  # a worktree of commit $1 in $tree; its PYTHONPATH in $path
  tree=$(mktemp -d "$root/bench/out/tree-XXXXXX")
  trees+=("$tree")
  git -C "$root" worktree add --detach "$tree" "$1" >/dev/null 2>&1
  path="$tree/libs:$tree/services/allocator:$tree/services/distributor:$tree/services/node-agent:$tree/services/eviction"
}
check() {  # every entry of a PYTHONPATH still exists (a vanished tree would silently run the working tree)
  local entry
  IFS=: read -ra entries <<< "$1"
  for entry in "${entries[@]}"; do [ -d "$entry" ] || { echo "missing $entry" >&2; exit 1; }; done
}
pinned "$old"
old_path=$path
new_path=""
script=${AB_BENCH:-bench_deploy.py}
bench="$root/bench/$script"
if [ -n "${AB_NEW:-}" ]; then
  pinned "$AB_NEW"
  new_path=$path
  bench="$tree/bench/$script"  # the script of the new side, for both: the working tree may change meanwhile
fi
short=$(git -C "$root" rev-parse --short "$old")
for round in $(seq 1 "$rounds"); do
  echo "round $round/$rounds: before ($short) $(uptime)" >&2
  check "$old_path"
  PYTHONPATH="$old_path" "$python" "$bench" "$@" > "$root/bench/out/ab-$short-before-$round.json"
  echo "round $round/$rounds: after (${AB_NEW:-working tree}) $(uptime)" >&2
  if [ -n "$new_path" ]; then
    check "$new_path"
    PYTHONPATH="$new_path" "$python" "$bench" "$@" > "$root/bench/out/ab-$short-after-$round.json"
  else
    "$python" "$bench" "$@" > "$root/bench/out/ab-$short-after-$round.json"
  fi
done
echo "written: bench/out/ab-$short-{before,after}-{1..$rounds}.json $(uptime)" >&2
