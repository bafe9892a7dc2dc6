#!/usr/bin/env bash
# A coarse performance gate (issue 41 item 8), run by .ci/run: instructions, not time, so a
# shared or slow machine does not move it. callgrind counts the instructions of
#   render: `capstan render` of a 100-cluster fleet (bench/gen-fleet.py) to /dev/null;
#   review: `capstan diff --git` of a commit changing the overlay every cluster uses.
# Each must stay within 15% of bench/gate.txt, and review/render within the recorded ratio
# + 0.3. After a change that moves them on purpose: bash bench/gate.sh --record, and say
# why in the commit.
# Usage: bash bench/gate.sh [--record] [BIN]   (BIN: default target/release/capstan)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
record=0
if [[ ${1:-} == --record ]]; then record=1; shift; fi
BIN=${1:-$ROOT/target/release/capstan}
command -v valgrind >/dev/null || { echo "gate: needs valgrind"; exit 1; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 "$ROOT/bench/gen-fleet.py" "$W/repo" 100 "$ROOT"
g() { git -C "$W/repo" -c user.name=gate -c user.email=gate@capstan.invalid -c commit.gpgsign=false "$@"; }
g init -q -b main && g add -A && g commit -qm fleet
sed -i 's#disk: /dev/sda#disk: /dev/sdb#' "$W/repo/overlays/talos-vmware/overlay.yaml"
g diff --quiet && { echo "gate: the overlay edit changed nothing"; exit 1; }
g commit -qam "shared overlay"
count() { # count NAME CMD...: instructions callgrind collected
  local name=$1; shift
  valgrind --tool=callgrind --callgrind-out-file="$W/$name.cg" "$@" >/dev/null 2>"$W/$name.err" || true
  sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$W/$name.err"
}
render=$(count render "$BIN" render "$W/repo")
review=$(count review "$BIN" diff --git HEAD~1..HEAD "$W/repo" --format json)
[[ -n $render && -n $review ]] || { echo "gate: callgrind gave no count"; cat "$W"/*.err | tail -20; exit 1; }
# The review really rendered the fleet twice (else its count means nothing).
"$BIN" diff --git HEAD~1..HEAD "$W/repo" --format json > "$W/review.json" || true
python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["scope"]; assert s["rendered"] == 100, s' "$W/review.json"
ratio=$(awk -v a="$review" -v b="$render" 'BEGIN { printf "%.2f", a / b }')
echo "render: $render instructions (100 clusters); review: $review; review/render: $ratio"
if [[ $record == 1 ]]; then
  printf 'render %s\nreview %s\nratio %s\n' "$render" "$review" "$ratio" > "$ROOT/bench/gate.txt"
  echo "recorded in bench/gate.txt"; exit 0
fi
want() { sed -n "s/^$1 //p" "$ROOT/bench/gate.txt"; }
fail=0
for row in render review; do
  got=${!row}; base=$(want "$row")
  if awk -v g="$got" -v b="$base" 'BEGIN { exit !(g > b * 1.15) }'; then
    echo "gate: $row takes $got instructions, over 15% above the recorded $base"; fail=1
  fi
done
if awk -v g="$ratio" -v b="$(want ratio)" 'BEGIN { exit !(g > b + 0.3) }'; then
  echo "gate: review/render is $ratio, above the recorded $(want ratio) + 0.3"; fail=1
fi
exit $fail
