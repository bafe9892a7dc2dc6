#!/usr/bin/env bash
# Row k of bench/run.sh: `capstan backup push|pull` of a `clusterctl move`-shaped dump
# (51,000 files, 144 MB: issue 39's Performance section), against a file:// store.
#   push: peak RSS (target <= 2x the largest file + a fixed buffer)
#   pull: wall time against `age -d -i ID <id>.age | tar x` of the same object on the same
#         machine (target <= 1.5x), fresh output directory each run, alternating, medians.
# Sourced by bench/run.sh (uses its W, BIN, row, peak_rss, log, die), or run alone:
#   bash bench/backup-row.sh      # builds the release binary, prints the rows
# Figures are printed, never asserted. Needs age (the `age` Debian package) for the pull row.
set -euo pipefail

if [[ -z ${BIN:-} ]]; then
  ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  cd "$ROOT"
  BENCH_DIR=${BENCH_DIR:-$ROOT/bench/out}
  mkdir -p "$BENCH_DIR"
  W=$(mktemp -d "$BENCH_DIR/run.XXXXXX")
  trap '[[ ${KEEP:-0} == 1 ]] || rm -rf "$W"' EXIT
  log() { echo "# $*" >&2; }
  die() { echo "bench: $*" >&2; exit 1; }
  cargo build --release -q || die "cargo build failed"
  BIN="$ROOT/target/release/capstan"
  ROWS=()
  row() { ROWS+=("$(printf '%-4s|%-44s|%-22s|%-22s|%s' "$1" "$2" "$3" "$4" "$5")"); }
  peak_rss() {
    local kb
    kb=$(python3 -c '
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if r.returncode: sys.exit(r.returncode)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$@") || die "failed: $*"
    RSS_METHOD="getrusage(RUSAGE_CHILDREN) ru_maxrss"
    RSS=$(awk -v k="$kb" 'BEGIN {printf "%.1f MiB", k/1024}')
  }
  STANDALONE=1
fi
RUNS_BACKUP=${RUNS_BACKUP:-3}
command -v age >/dev/null 2>&1 || die "age not found (apt-get install age)"

log "k: a clusterctl move dump of 51,000 files, 144 MB"
K="$W/backup"
mkdir -p "$K/move"
# Shaped as `clusterctl move --to-directory` writes it (`<Kind>_<namespace>_<name>.yaml`, one
# object per file): 50 clusters of 1,000 objects each (Machines, VSphereMachines,
# VSphereVMs, TalosConfigs, IPAddressClaims, IPAddresses, Secrets, ~2.6 KB each), and 1,000
# larger objects (ConfigMaps and Secrets of 4-24 KB); the largest file is 1 MiB.
python3 - "$K/move" <<'PY'
import os, random, sys
out = sys.argv[1]
rnd = random.Random(39)
# Base64-like text from a seeded pool, in random slices: deterministic, and as hard to
# compress as a real dump's keys and certificates.
POOL = "".join(rnd.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") for _ in range(1 << 20))
kinds = ["Machine", "VSphereMachine", "VSphereVM", "TalosConfig", "IPAddressClaim", "IPAddress", "Secret"]
def body(kind, ns, name, size):
    head = f'{{"apiVersion":"v1","kind":"{kind}","metadata":{{"name":"{name}","namespace":"{ns}","uid":"{rnd.getrandbits(128):032x}"}},"spec":{{"data":"'
    pad = size - len(head) - 4
    pad = max(pad, 0)
    text = []
    while pad > 0:
        at = rnd.randrange(len(POOL) - 4096)
        take = min(pad, 4096)
        text.append(POOL[at:at + take])
        pad -= take
    return head + "".join(text) + '"}}\n'
total = 0
n = 0
for c in range(50):
    ns = f"c{c:03d}"
    with open(os.path.join(out, f"Cluster_{ns}_{ns}.yaml"), "w") as f:
        f.write(body("Cluster", ns, ns, 2000))
    n += 1
    for i in range(999):
        kind = kinds[i % len(kinds)]
        name = f"{ns}-{kind.lower()}-{i:04d}"
        s = body(kind, ns, name, rnd.randint(2150, 3050))
        total += len(s)
        n += 1
        open(os.path.join(out, f"{kind}_{ns}_{name}.yaml"), "w").write(s)
for i in range(1000):
    ns = f"c{i % 50:03d}"
    kind = "ConfigMap" if i % 2 else "Secret"
    name = f"{ns}-large-{i:04d}"
    s = body(kind, ns, name, (1 << 20) if i == 0 else rnd.randint(4000, 24000))
    total += len(s)
    n += 1
    open(os.path.join(out, f"{kind}_{ns}_{name}.yaml"), "w").write(s)
print(n, "files", file=sys.stderr)
PY
k_files=$(find "$K/move" -type f | wc -l)
k_bytes=$(du -sb "$K/move" | awk '{print $1}')
k_largest=$(find "$K/move" -type f -printf '%s\n' | sort -n | tail -1)
age-keygen -o "$K/id.txt" 2>/dev/null
k_rcpt=$(grep -o 'age1[0-9a-z]*' "$K/id.txt" | head -1)
STORE="file://$K/store"

peak_rss "$BIN" backup push "$K/move" "$STORE" -r "$k_rcpt"
row "k" "backup push, $k_files files, $((k_bytes / 1000000)) MB: max RSS" "$RSS" "<= 2x $((k_largest >> 10)) KiB + buffer" "$RSS_METHOD"
k_obj=$(ls "$K/store"/*.age | head -1)

# Pull and `age -d | tar x`, alternating, each into a fresh directory, `sync` untimed before.
now() { date +%s.%N; }
pulls=() untars=()
for ((i = 0; i <= RUNS_BACKUP; i++)); do
  sync
  t0=$(now); "$BIN" backup pull "$STORE" "$K/pull-$i" -i "$K/id.txt" 2>/dev/null || die "backup pull failed"; t1=$(now)
  sync
  mkdir "$K/untar-$i"
  t2=$(now); (cd "$K/untar-$i" && age -d -i "$K/id.txt" "$k_obj" | tar x) || die "age -d | tar x failed"; t3=$(now)
  # The first pair warms the caches, and is not counted.
  if ((i > 0)); then
    pulls+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')")
    untars+=("$(awk -v a="$t2" -v b="$t3" 'BEGIN {print b - a}')")
  fi
  log "  pull $i: $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}') s, age -d | tar x: $(awk -v a="$t2" -v b="$t3" 'BEGIN {printf "%.3f", b - a}') s"
done
diff -r "$K/move" "$K/pull-1" >/dev/null || die "pull is not byte-identical"
diff -r "$K/move" "$K/untar-1/move" >/dev/null || die "age -d | tar x is not byte-identical"
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
kp=$(median "${pulls[@]}")
ku=$(median "${untars[@]}")
row "k" "backup pull (file:// store), fresh OUT" "$(awk -v s="$kp" 'BEGIN {printf "%.3f s", s}')" "-" "date +%s.%N, median of $RUNS_BACKUP, sync before"
row "k" "age -d | tar x of the same object" "$(awk -v s="$ku" 'BEGIN {printf "%.3f s", s}')" "-" "same loop, alternating"
row "k" "  ratio pull / (age -d | tar x)" "$(awk -v a="$kp" -v b="$ku" 'BEGIN {printf "%.2fx", a / b}')" "<= 1.5x" "of the medians"
peak_rss "$BIN" backup pull "$STORE" "$K/pull-rss" -i "$K/id.txt"
row "k" "  backup pull: max RSS" "$RSS" "-" "$RSS_METHOD"
rm -rf "$K"

if [[ ${STANDALONE:-0} == 1 ]]; then
  printf '%-4s|%-44s|%-22s|%-22s|%s\n' "" "measure" "figure" "target" "method"
  printf '%s\n' "${ROWS[@]}"
fi
