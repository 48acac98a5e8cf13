#!/usr/bin/env bash
# Interleaved before/after runs of bench_sim_density.py (the sim node agent's cost per command and memory against
# containers per node): an older commit from a git worktree via PYTHONPATH, then the working tree, ROUNDS times.
#
# Usage: bench/ab_sim_density.sh OLD_COMMIT [ROUNDS] [bench_sim_density options...]
# Writes bench/out/density-<old>-{before,after}-<round>.json (git-ignored) and prints the ratios after/before.
set -euo pipefail
old=${1:?usage: bench/ab_sim_density.sh OLD_COMMIT [ROUNDS] [options...]}
rounds=${2:-1}
shift $(( $# >= 2 ? 2 : 1 ))
root=$(cd "$(dirname "$0")/.." && pwd)
python="$root/.venv/bin/python"
tree=$(mktemp -d /tmp/eru-ab-XXXXXX)
trap 'git -C "$root" worktree remove --force "$tree" >/dev/null 2>&1 || true' EXIT
git -C "$root" worktree add --detach "$tree" "$old" >/dev/null
old_path="$tree/libs:$tree/services/allocator:$tree/services/distributor:$tree/services/node-agent:$tree/services/eviction"
mkdir -p "$root/bench/out"
short=$(git -C "$root" rev-parse --short "$old")
cd "$root"
for round in $(seq 1 "$rounds"); do
  echo "round $round/$rounds: before ($short), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  PYTHONPATH="$old_path" "$python" -m bench.bench_sim_density "$@" 2>/dev/null | tail -n +1 > "bench/out/density-$short-before-$round.json"
  echo "round $round/$rounds: after (working tree), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  "$python" -m bench.bench_sim_density "$@" 2>/dev/null > "bench/out/density-$short-after-$round.json"
done
"$python" - "$short" "$rounds" <<'PY'
import json, sys
short, rounds = sys.argv[1], int(sys.argv[2])
def last_doc(path):
    text = open(path).read()
    return json.loads(text[text.index("{\n"):])  # the final document (phase lines come first)
for r in range(1, rounds + 1):
    before = last_doc(f"bench/out/density-{short}-before-{r}.json")
    after = last_doc(f"bench/out/density-{short}-after-{r}.json")
    rows = []
    for b, a in zip(before["phases"], after["phases"]):
        rows.append({
            "containers_per_node": b["containers_per_node"],
            "cpu_ms_per_command": [b["cpu_ms_per_command"], a["cpu_ms_per_command"]],
            "commands_per_second": [b["commands_per_second"], a["commands_per_second"]],
            "idle_cpu_per_wall_second": [b["idle_cpu_per_wall_second"], a["idle_cpu_per_wall_second"]],
            "after_over_before_cpu_per_command": round(a["cpu_ms_per_command"] / b["cpu_ms_per_command"], 3),
        })
    print(json.dumps({"round": r, "before": short, "phases": rows, "memory": {"before": before["memory"], "after": after["memory"]},
                      "growth_last_over_first_cpu_per_command": {"before": before["ratios_last_over_first"]["cpu_ms_per_command"],
                                                                 "after": after["ratios_last_over_first"]["cpu_ms_per_command"]}}, indent=1))
PY
