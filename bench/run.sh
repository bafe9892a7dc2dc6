#!/usr/bin/env bash
# Benchmark for `capstan render` and `capstan argocd generate` against the targets in PRODUCT.md ("Performance targets").
#
#   bash bench/run.sh [N]        # N generated clusters, default 1000
#
# Env: RUNS_SINGLE (default 30), RUNS_KUSTOMIZE (10), RUNS_BULK (5), KEEP=1 keeps the work dir,
#      BENCH_DIR (parent of the work dir, default bench/out),
#      NO_INSTALL=1 never tries apt-get (hyperfine / GNU time are optional).
# Figures are printed, never asserted: exit status is 0 unless a command (capstan, kubectl, cp) fails.
set -euo pipefail

N=${1:-1000}
[[ $N =~ ^[0-9]+$ && $N -ge 10 ]] || { echo "usage: bash bench/run.sh [N>=10]" >&2; exit 2; }
RUNS_SINGLE=${RUNS_SINGLE:-30}
RUNS_KUSTOMIZE=${RUNS_KUSTOMIZE:-10}
RUNS_BULK=${RUNS_BULK:-5}
N10=$(( N / 10 ))

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# BENCH_DIR: where the work directory goes (default bench/out). On a busy ext4 the block
# groups near a cargo target directory, or near trees deleted minutes ago, make file
# creation slow and erratic for both commands of row d (bench/README.md, session 5).
BENCH_DIR=${BENCH_DIR:-$ROOT/bench/out}
mkdir -p "$BENCH_DIR"
W=$(mktemp -d "$BENCH_DIR/run.XXXXXX")
cleanup() { if [[ ${KEEP:-0} == 1 ]]; then echo "kept $W" >&2; else rm -rf "$W"; fi; }
trap cleanup EXIT

log() { echo "# $*" >&2; }
die() { echo "bench: $*" >&2; exit 1; }

# ---------------------------------------------------------------- tools
maybe_install() { # maybe_install CMD PKG
  command -v "$1" >/dev/null 2>&1 && return 0
  [[ ${NO_INSTALL:-0} == 1 ]] && return 0
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    log "installing $2 (optional)"
    apt-get install -y -qq "$2" >/dev/null 2>&1 || true
  fi
}
maybe_install hyperfine hyperfine
[[ -x /usr/bin/time ]] || maybe_install /usr/bin/time time
command -v kubectl >/dev/null || die "kubectl not found"
command -v python3 >/dev/null || die "python3 not found (used to generate inputs)"
HAVE_HF=0; command -v hyperfine >/dev/null 2>&1 && HAVE_HF=1

# ---------------------------------------------------------------- build
log "cargo build --release"
cargo build --release -q || die "cargo build failed"
BIN="$ROOT/target/release/capstan"
[[ -x $BIN ]] || die "no binary at $BIN"

# ---------------------------------------------------------------- inputs
gen_repo() { # gen_repo DIR COUNT   (clusters c0001..cCOUNT, variants of examples/.../lab-f)
  python3 "$ROOT/bench/gen-fleet.py" "$1" "$2" "$ROOT"
}
log "generating $N clusters (and $N10 for the linearity check) under $W"
gen_repo "$W/repo" "$N"
gen_repo "$W/repo10" "$N10"
first=("$W/repo/clusters"/*)   # a glob, not `ls | head` (SIGPIPE under pipefail)
ONE=$(basename "${first[0]}")
ONE_DIR="$W/repo/clusters/$ONE"

# ---------------------------------------------------------------- sanity (fail loudly before timing)
"$BIN" --help >/dev/null || die "capstan --help failed"
"$BIN" render "$ONE_DIR" >"$W/one.yaml" || die "capstan render (1 cluster) failed"
"$BIN" render "$W/repo" >"$W/all.yaml" || die "capstan render (N clusters) failed"
"$BIN" render "$W/repo10" >/dev/null || die "capstan render (N/10 clusters) failed"
"$BIN" render "$W/repo" -o "$W/tree" 2>/dev/null >/dev/null || die "capstan render -o failed"
n_docs=$(grep -c '^kind:' "$W/all.yaml" || true)
n_dirs=$(find "$W/tree" -mindepth 1 -maxdepth 1 -type d | wc -l)
n_files=$(find "$W/tree" -type f | wc -l)
tree_kib=$(du -sk "$W/tree" | cut -f1)
[[ $n_dirs -eq $N ]] || die "expected $N cluster dirs in tree, got $n_dirs"
kubectl kustomize "$W/tree/$ONE" >/dev/null || die "kubectl kustomize failed on $W/tree/$ONE"

# ---------------------------------------------------------------- timing helpers
# now_ns: bash 5's $EPOCHREALTIME (no fork, us resolution), else `date +%s%N` (adds a fork, ~1 ms).
if [[ -n ${EPOCHREALTIME:-} ]]; then
  now_ns() { local t=${EPOCHREALTIME//[.,]/}; NOW=$(( 10#$t * 1000 )); }
  CLOCK='$EPOCHREALTIME'
else
  now_ns() { NOW=$(date +%s%N); }
  CLOCK='date +%s%N'
fi
# measure RUNS WARMUP PREPARE CMD...  -> sets MED (median seconds) and METHOD.
# PREPARE is a shell snippet run before every timed run ("" for none); CMD's stdout goes to /dev/null.
MED=; METHOD=
measure() {
  local runs=$1 warm=$2 prep=$3; shift 3
  if [[ $HAVE_HF == 1 ]]; then
    local json="$W/hf.json"
    local args=(--runs "$runs" --warmup "$warm" --export-json "$json" --style none)
    [[ -n $prep ]] && args+=(--prepare "$prep")
    # -N: no intermediate shell, so process start-up of CMD itself is what is timed.
    hyperfine -N "${args[@]}" -- "$(printf '%q ' "$@")" >/dev/null || die "failed: $*"
    MED=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0]["median"])' "$json")
    METHOD="hyperfine -N, median of $runs"
  else
    local i t0 t1 ts=()
    for ((i = 0; i < warm; i++)); do [[ -n $prep ]] && eval "$prep"; "$@" >/dev/null || die "failed: $*"; done
    for ((i = 0; i < runs; i++)); do
      [[ -n $prep ]] && eval "$prep"
      now_ns; t0=$NOW; "$@" >/dev/null || die "failed: $*"; now_ns; t1=$NOW
      ts+=($(( t1 - t0 )))
    done
    MED=$(printf '%s\n' "${ts[@]}" | sort -n | awk '{a[NR]=$1} END {m = (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2; printf "%.6f", m/1e9}')
    METHOD="$CLOCK loop, median of $runs"
  fi
}
# peak_rss CMD... -> sets RSS ("12.3 MiB" or "n/a") and RSS_METHOD
RSS=; RSS_METHOD=
peak_rss() {
  local kb=
  if [[ -x /usr/bin/time ]] && /usr/bin/time -v true >/dev/null 2>&1; then
    /usr/bin/time -v -o "$W/time.txt" "$@" >/dev/null 2>"$W/rss.err" || die "failed: $*"
    kb=$(awk -F: '/Maximum resident set size/ {gsub(/ /, "", $2); print $2}' "$W/time.txt")
    RSS_METHOD="/usr/bin/time -v max RSS"
  else
    kb=$(python3 -c '
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if r.returncode: sys.exit(r.returncode)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$@") || die "failed: $*"
    RSS_METHOD="getrusage(RUSAGE_CHILDREN) ru_maxrss via python3"
  fi
  if [[ -n $kb ]]; then RSS=$(awk -v k="$kb" 'BEGIN {printf "%.1f MiB", k/1024}'); else RSS="n/a"; RSS_METHOD="n/a"; fi
}
ms() { awk -v s="$1" 'BEGIN {printf "%.2f ms", s*1000}'; }
sec() { awk -v s="$1" 'BEGIN {printf "%.3f s", s}'; }
us() { awk -v s="$1" -v n="$2" 'BEGIN {printf "%.1f us", s*1e6/n}'; }

ROWS=()
row() { ROWS+=("$(printf '%-4s|%-44s|%-22s|%-22s|%s' "$1" "$2" "$3" "$4" "$5")"); }

# ---------------------------------------------------------------- (0) process start-up baseline
log "baseline: capstan --help"
measure "$RUNS_SINGLE" 3 "" "$BIN" --help
row "0" "capstan --help (process start-up baseline)" "$(ms "$MED")" "-" "$METHOD"

# ---------------------------------------------------------------- (a) one cluster, stdout
log "a: one cluster to stdout"
measure "$RUNS_SINGLE" 3 "" "$BIN" render "$ONE_DIR"
A=$MED
row "a" "1 cluster -> stdout, whole process" "$(ms "$A")" "<= 5 ms" "$METHOD"

# ---------------------------------------------------------------- (b) kubectl kustomize, same cluster
log "b: kubectl kustomize on the equivalent overlay"
measure "$RUNS_KUSTOMIZE" 1 "" kubectl kustomize "$W/tree/$ONE"
B=$MED
row "b" "kubectl kustomize, same cluster's overlay" "$(ms "$B")" "(PRODUCT: ~170 ms)" "$METHOD"

# ---------------------------------------------------------------- (c) N clusters, stdout
log "c: $N clusters to stdout"
measure "$RUNS_BULK" 1 "" "$BIN" render "$W/repo"
C=$MED
row "c" "$N clusters -> stdout (> /dev/null)" "$(sec "$C")" "<= 0.2 s (N=1000)" "$METHOD"
row "c" "  per cluster" "$(us "$C" "$N")" "<= 200 us" "c / $N"

# ---------------------------------------------------------------- (d) N clusters, fresh tree vs cp -r
# One loop, render and cp interleaved so both see the same machine load. Every run writes to a
# new directory and nothing is deleted until the loop is over: this disk is ext4 without a
# journal, where creating files right after deleting many is slow (the inode allocator skips
# each inode freed in the last 60 s, 300 s while its table block is dirty: fs/ext4/ialloc.c
# recently_deleted), which charged seconds to whichever command ran first after an `rm -rf`.
# cp -r copies the tree rendered during the sanity checks (the same files), so the two can
# swap order: even runs render first, odd runs copy first. Each command starts after a `sync`
# (not timed), so neither runs beside the kernel writing back the trees made before it.
log "d: $N clusters into a fresh tree vs cp -r"
d_r=(); d_c=()
sync
for ((i = 0; i <= RUNS_BULK; i++)); do            # i=0 is a warm-up
  for step in $( ((i % 2 == 0)) && echo "r c" || echo "c r"); do
    sync    # no writeback of earlier runs left to compete for the two cores
    now_ns; t0=$NOW
    if [[ $step == r ]]; then
      "$BIN" render "$W/repo" -o "$W/d_out.$i" >/dev/null 2>&1 || die "capstan render -o failed"
    else
      cp -r "$W/tree" "$W/d_cp.$i" || die "cp -r failed"
    fi
    now_ns
    if [[ $step == r ]]; then tr=$(( NOW - t0 )); else tc=$(( NOW - t0 )); fi
  done
  if ((i > 0)); then d_r+=("$tr"); d_c+=("$tc"); fi
done
log "d pairs (render ms / cp -r ms): $(for ((i = 0; i < ${#d_r[@]}; i++)); do printf '%d/%d ' $(( d_r[i] / 1000000 )) $(( d_c[i] / 1000000 )); done)"
diff -r "$W/tree" "$W/d_out.1" >/dev/null || die "render -o into a fresh tree differs from the first render"
rm -rf "$W"/d_out.* "$W"/d_cp.*
median_ns() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {m = (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2; printf "%.6f", m/1e9}'; }
DR=$(median_ns "${d_r[@]}"); DC=$(median_ns "${d_c[@]}")
RATIO=$(awk -v a="$DR" -v b="$DC" 'BEGIN {printf "%.2fx", a/b}')
row "d" "$N clusters -> fresh tree (-o)" "$(sec "$DR")" "-" "$CLOCK, median of $RUNS_BULK, new OUT each"
row "d" "cp -r of the same tree, fresh target" "$(sec "$DC")" "-" "same loop, order alternating"
PAIR=$(for ((i = 0; i < ${#d_r[@]}; i++)); do echo "${d_r[i]} ${d_c[i]}"; done |
  awk '{print $1/$2}' | sort -g | awk '{a[NR]=$1} END {m = (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2; printf "%.2fx", m}')
row "d" "  ratio tree / cp -r (of the medians)" "$RATIO" "<= 1.5x" "$n_files files, $(( tree_kib / 1024 )) MiB du"
row "d" "  ratio, median of per-pair ratios" "$PAIR" "<= 1.5x" "each render vs the cp of its pair"

# ---------------------------------------------------------------- (e) peak memory
log "e: peak memory"
peak_rss "$BIN" render "$W/repo"
row "e" "max RSS, $N clusters -> stdout" "$RSS" "<= 50 MiB" "$RSS_METHOD"
rm -rf "$W/e_out"
peak_rss "$BIN" render "$W/repo" -o "$W/e_out"
row "e" "max RSS, $N clusters -> fresh tree" "$RSS" "<= 50 MiB" "$RSS_METHOD"

# ---------------------------------------------------------------- (f) kubectl kustomize over 100 dirs
K=$(( N < 100 ? N : 100 ))
log "f: kubectl kustomize over $K rendered cluster dirs"
mapfile -t KDIRS < <(cd "$W/tree" && ls | head -n "$K")
kloop() { local d; for d in "${KDIRS[@]}"; do kubectl kustomize "$W/tree/$d" >/dev/null || return 1; done; }
f_t=()
for ((i = 0; i < 3; i++)); do
  now_ns; t0=$NOW; kloop || die "kubectl kustomize failed"; now_ns; f_t+=($(( NOW - t0 )))
done
F=$(median_ns "${f_t[@]}")
row "f" "kubectl kustomize x $K dirs (loop)" "$(sec "$F")" "(PRODUCT: ~3 s)" "one process per dir, median of 3"
# Same 100 dirs as resources of one kustomization (single process), for comparison.
mkdir -p "$W/tree/_all"
{ echo "apiVersion: kustomize.config.k8s.io/v1beta1"; echo "kind: Kustomization"; echo "resources:"
  for d in "${KDIRS[@]}"; do echo "- ../$d"; done; } >"$W/tree/_all/kustomization.yaml"
measure 3 0 "" kubectl kustomize "$W/tree/_all"
row "f" "kubectl kustomize, 1 kustomization/$K dirs" "$(sec "$MED")" "-" "$METHOD"

# ---------------------------------------------------------------- (g) linearity
log "g: linearity $N10 vs $N clusters"
measure "$RUNS_BULK" 1 "" "$BIN" render "$W/repo10"
G=$MED
row "g" "$N10 clusters -> stdout" "$(sec "$G")" "-" "$METHOD"
row "g" "  per cluster at $N10 / at $N" "$(us "$G" "$N10") / $(us "$C" "$N")" "~equal" "g / $N10, c / $N"

# ---------------------------------------------------------------- (i) work, counted in instructions
# Wall times on a shared VM swing by 2x within minutes for the same binary (bench/README.md,
# session 7); the instructions a render executes do not. callgrind counts them (valgrind's
# sha256 is the portable software one, not SHA-NI, so hashing weighs more than natively).
if command -v valgrind >/dev/null 2>&1; then
  log "i: instructions (callgrind), 1 and $N10 clusters to stdout"
  irs() { valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 >/dev/null |
    awk '/Collected :/ {print $NF}'; }
  I1=$(irs "$BIN" render "$ONE_DIR"); IN=$(irs "$BIN" render "$W/repo10")
  if [[ -n $I1 && -n $IN ]]; then
    row "i" "instructions, 1 cluster -> stdout" "$(awk -v i="$I1" 'BEGIN {printf "%.2f M", i/1e6}')" "-" "callgrind, whole process"
    row "i" "  per further cluster ($N10 clusters)" "$(awk -v a="$IN" -v b="$I1" -v n="$N10" 'BEGIN {printf "%.2f M", (a-b)/(n-1)/1e6}')" "-" "(i($N10) - i(1)) / $(( N10 - 1 ))"
  fi
else
  log "i: skipped (no valgrind)"
fi

# ---------------------------------------------------------------- (h) Argo CD plugin, one cluster
# As the repo-server sidecar runs it: cwd = the Application's path, only the ARGOCD_* variables
# and the identity in the environment (env -i), secrets mode decrypt (two SOPS files opened).
log "h: argocd generate, one cluster, secrets mode decrypt"
GEN_ENV=(env -i "ARGOCD_APP_NAME=cluster-$ONE" "ARGOCD_APP_NAMESPACE=$ONE" "ARGOCD_APP_SOURCE_PATH=clusters/$ONE"
  "ARGOCD_APP_REVISION=0000000000000000000000000000000000000000" ARGOCD_ENV_CAPSTAN_SECRETS=decrypt
  "SOPS_AGE_KEY_FILE=$ROOT/examples/gitops/testdata/age-identity.txt")
pushd "$ONE_DIR" >/dev/null
"${GEN_ENV[@]}" "$BIN" argocd generate </dev/null >"$W/generate.yaml" || die "capstan argocd generate failed"
grep -q '^kind: Secret' "$W/generate.yaml" && ! grep -q 'ENC\[' "$W/generate.yaml" || die "argocd generate: expected decrypted Secrets"
measure "$RUNS_SINGLE" 3 "" "${GEN_ENV[@]}" "$BIN" argocd generate
H=$MED
popd >/dev/null
row "h" "argocd generate, 1 cluster, decrypt" "$(ms "$H")" "<= 20 ms" "$METHOD (via env -i)"

# ---------------------------------------------------------------- (j) pull-request review at fleet scale
# The fleet as a git repository (packed, as a clone is), one commit changing one cluster and
# one changing an overlay every cluster uses; `diff --git` as the CI templates run it.
log "j: diff --git over the $N-cluster repository as git history"
GR="$W/gitrepo"
cp -r "$W/repo" "$GR"
gj() { git -C "$GR" -c user.name=bench -c user.email=bench@capstan.invalid -c commit.gpgsign=false "$@"; }
gj init -q -b main && gj add -A && gj commit -qm fleet || die "git init of the fleet failed"
sed -i 's/diskGiB: 40/diskGiB: 50/' "$GR/clusters/$ONE/cluster.yaml"
gj commit -qam "one cluster" || die "git commit failed"
python3 - "$GR/overlays/talos-vmware/overlay.yaml" <<'PY'
import sys
p = sys.argv[1]; s = open(p).read()
assert "disk: /dev/sda" in s
open(p, "w").write(s.replace("disk: /dev/sda", "disk: /dev/sdb", 1))
PY
gj commit -qam "shared overlay" || die "git commit failed"
gj repack -adq
"$BIN" diff --git HEAD~2..HEAD~1 "$GR" --format json >"$W/j1.json" || true
python3 - "$W/j1.json" "$N" <<'PY' || die "diff --git (one cluster): unexpected scope"
import json, sys
s = json.load(open(sys.argv[1]))["scope"]
assert s["rendered"] == 1 and s["skipped"] == int(sys.argv[2]) - 1, s
PY
measure "$RUNS_BULK" 1 "" "$BIN" diff --git HEAD~2..HEAD~1 "$GR" --fail-on high
J1=$MED
row "j" "PR review, 1 of $N clusters changed" "$(sec "$J1")" "<= 2x c" "$METHOD"
peak_rss "$BIN" diff --git HEAD~2..HEAD~1 "$GR" --fail-on high
row "j" "  max RSS" "$RSS" "< 100 MiB" "$RSS_METHOD"
measure "$RUNS_BULK" 1 "" "$BIN" diff --git HEAD~1..HEAD "$GR" --fail-on high
J2=$MED
row "j" "PR review, shared overlay ($N render)" "$(sec "$J2")" "<= 3x c" "$METHOD"
peak_rss "$BIN" diff --git HEAD~1..HEAD "$GR" --fail-on high
row "j" "  max RSS" "$RSS" "-" "$RSS_METHOD"
row "j" "  ratios to one full render (c)" "$(awk -v a="$J1" -v b="$J2" -v c="$C" 'BEGIN {printf "%.2fx / %.2fx", a/c, b/c}')" "<= 2x / <= 3x" "j / c, same run"

# ---------------------------------------------------------------- (k) backup push and pull
# A `clusterctl move`-shaped dump of 51,000 files (bench/backup-row.sh, also runnable alone).
maybe_install age age
if command -v age >/dev/null 2>&1; then
  . "$ROOT/bench/backup-row.sh"
else
  log "k: skipped (no age)"
fi

# ---------------------------------------------------------------- report
echo
echo "capstan render benchmark -- $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(uname -sr)"
echo "capstan $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo '+dirty'), N=$N ($n_docs objects, $n_files files), $("$BIN" --version 2>/dev/null || true)"
printf '%-4s|%-44s|%-22s|%-22s|%s\n' "" "measure" "figure" "target" "method"
printf '%s\n' "----+--------------------------------------------+----------------------+----------------------+---------------------------------"
printf '%s\n' "${ROWS[@]}"
