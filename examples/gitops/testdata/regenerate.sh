#!/usr/bin/env bash
# How the example's secrets were made (run from the repository root):
# kubeadm-style files from the vendored openssl script (tests/fixtures/kubeadm), imported with capstan to the
# published example key; the provenance printed in each new cluster.yaml stub was then
# copied into examples/gitops/clusters/<name>/cluster.yaml by hand. Rerunning makes a
# new PKI: every fingerprint and golden file changes.
set -euo pipefail
pub=$(grep -o 'age1[0-9a-z]*' examples/gitops/testdata/age-identity.txt)
for c in lab-f lab-g; do
  work=$(mktemp -d)
  bash tests/fixtures/kubeadm/make-kubeadm-pki.sh "$work/kubeadm" ecdsa https://kubernetes.default.svc.cluster.local secretbox key2 v1beta4
  sed -i "s/lab-f/$c/g" "$work/kubeadm/kubeadm-config.yaml"
  cargo run -q -- import kubeadm --pki "$work/kubeadm/pki" --apiserver-manifest "$work/kubeadm/manifests/kube-apiserver.yaml" \
    --kubeadm-config "$work/kubeadm/kubeadm-config.yaml" --encryption-config "$work/kubeadm/encryption-config.yaml" \
    --recipient "$pub" --talos-version v1.10.6 --out "$work/$c"
  rm -rf "examples/gitops/clusters/$c/secrets" "examples/gitops/clusters/$c/secrets.age"
  cp -r "$work/$c/secrets" "$work/$c/secrets.age" "examples/gitops/clusters/$c/"
  sed -n '/^  recipients:/,$p' "$work/$c/cluster.yaml"
  rm -rf "$work"
done
# lab-f's vSphere credentials (identityRef kind Secret), sealed like the rest; example only.
echo 'example-only-not-a-password' | cargo run -q -- secrets vsphere-identity examples/gitops/clusters/lab-f --username capv@vsphere.local
# lab-f's second recipient (age1em9td4pvjvhwv4w9js5l2crup8v9xafxme77tsnmfmnwn6u9vqvqjpvs4l): generated with age-keygen, identity discarded; added with `capstan secrets rekey -i examples/gitops/testdata/age-identity.txt examples/gitops/clusters/lab-f`.
