#!/usr/bin/env bash
# Usage: N=1000 BIN=target/release/capstan bash bench/review-fleet.sh (work directory: $W).
# Fleet-wide review cost against one render of the fleet (issue 41 item 7): three changes.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/target/release/capstan}
W=${W:-$(mktemp -d)}; mkdir -p $W
python3 "$ROOT/bench/gen-fleet.py" "$W/repo" "${N:-1000}" "$ROOT" > /dev/null
cd $W/repo
g() { git -c user.name=b -c user.email=b@capstan.invalid -c commit.gpgsign=false "$@"; }
g init -q -b main && g add -A && g commit -qm fleet && g repack -adq
base=$(git rev-parse HEAD)
# A: the overlay every cluster uses
g checkout -qb overlay; sed -i 's#disk: /dev/sda#disk: /dev/sdb#' overlays/talos-vmware/overlay.yaml; g commit -qam overlay
# B: a template override every cluster reads (a label on every MachineDeployment)
g checkout -q $base; g checkout -qb template; mkdir -p templates/v1beta1
sed "s/^  clusterName: {{ cluster.name }}\$/&\n  minReadySeconds: 0/" $ROOT/templates/v1beta1/machinedeployment.yaml > templates/v1beta1/machinedeployment.yaml
cmp -s templates/v1beta1/machinedeployment.yaml $ROOT/templates/v1beta1/machinedeployment.yaml && { echo "template edit changed nothing"; exit 1; }
g add -A; g commit -qm template
# C: every cluster's sealed files rekeyed for one more recipient
g checkout -q $base; g checkout -qb rekey
NEW=$(age-keygen 2>/dev/null | sed -n 's/^# public key: //p')
for d in clusters/*/; do
  python3 - "$d/cluster.yaml" "$NEW" <<'PY'
import sys,re
p,new=sys.argv[1],sys.argv[2]; s=open(p).read()
s=re.sub(r'(\n  recipients:\n)', r'\1  - '+new+'\n', s, count=1)
open(p,'w').write(s)
PY
  "$BIN" secrets rekey "$d" -i $ROOT/examples/gitops/testdata/age-identity.txt 2>/dev/null
done
g add -A; g commit -qm rekey
g checkout -q $base
echo "changed files: overlay $(git diff --name-only $base overlay | wc -l), template $(git diff --name-only $base template | wc -l), rekey $(git diff --name-only $base rekey | wc -l)"
t() { /usr/bin/time -f "%U %S %e" "$@" > /dev/null 2>> $W/t.err || true; tail -1 $W/t.err; }
for i in 1 2 3; do
  echo "render $(t "$BIN" render .)"
  for b in overlay template rekey; do
    echo "$b $(t "$BIN" diff --git $base..$b . --format json)"
  done
done
