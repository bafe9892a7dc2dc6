{#- The shell library of the migration Jobs, included at the top of each Job's script.
    Every kubectl call is bounded (--request-timeout), its exit status checked and its output
    parsed; anything unexpected makes the function fail, and the Jobs fail closed: they keep
    (or re-assert) the pause and exit non-zero. POSIX sh only (dash, busybox ash): no
    pipefail, no arrays, so output is captured and checked instead of piped.

    Functions (documented here, so every rendered Job carries only the code):
    - kc ARGS: kubectl against the management cluster; stdout in $out, exit status kept.
    - kw ARGS: kubectl against the workload cluster (after workload_kubeconfig).
    - tcp_get JSONPATH: a field of the TalosControlPlane, in $out.
    - name_ok NAME: a Kubernetes object name, nothing else (rejects unexpected output).
    - pause_state: sets $is_paused to 1 when the TalosControlPlane carries the pause
      annotation, whatever its value (Cluster API's HasPaused tests for the key), else 0.
    - paused: the pause annotation is there.
    - retry TRIES SECONDS MESSAGE CMD...: CMD until it succeeds, at most TRIES times,
      SECONDS apart; MESSAGE on stderr when it never does.
    - pause: annotate, then read back; retried until it holds (about 5 minutes), loud if not.
    - machines: the cluster's control-plane Machines, deleting ones included (the provider
      counts them too); sets $count and $joined (those with a nodeRef).
    - machines_twice: machines, read twice a few seconds apart; the two reads must agree.
    - cluster_unpaused: the Cluster is not paused (spec.paused). No phase pauses it (the
      phases pause the TalosControlPlane, with its annotation); a `clusterctl move` killed
      between pausing and unpausing leaves every Cluster of its namespace paused (cluster-api
      v1.10.10 cmd/clusterctl/client/cluster/mover.go:393-436), and then nothing of the
      cluster reconciles: the Job refuses, naming the fix.
    - guard: cluster_unpaused; then the cluster exists, so status.bootstrapped must be true before any machine of it
      exists (else the provider sends the Talos Bootstrap RPC: a second, empty etcd). Waits
      for the TalosControlPlane and the imported PKI Secrets (the bootstrap provider generates
      a new PKI for a machine whose cluster lacks them). With no control-plane Machine, it
      reads the workload cluster first (through the kubeconfig the provider writes) and
      refuses when Talos control-plane Nodes run there: this management cluster lost its
      Machines, and new ones would become a second control plane. Then sets and verifies
      the status.
    - ca_check: when git records the Kubernetes CA (spec.provenance), the live <cluster>-ca
      must carry capstan's capstan.dev/kubernetes-ca annotation with that fingerprint (render
      refuses a sealed file whose annotation differs from spec.provenance). A <cluster>-ca
      without it was not applied from git: the bootstrap provider writes one from its own
      bundle when it reconciles first (CABPT v0.6.12 controllers/secrets.go:132-166), and the
      sops-secrets-operator then never adopts it; a different fingerprint is another import's.
      The annotation is the Secret's public claim: the Job holds no tool to hash tls.crt, and
      `capstan backup check -i` compares the certificate itself.
    - workload_kubeconfig: the workload cluster's kubeconfig from <cluster>-kubeconfig (the
      control-plane provider writes it), to a file only this process can read.
    - workload: what the workload cluster runs: $kubeadm_etcd (etcd static Pods in kube-system:
      kubeadm's; Talos runs etcd as a service, not a Pod), $kubeadm_cp and $talos_cp
      (control-plane Nodes by operating system).
    - workload_twice: workload, read twice a few seconds apart; the two reads must agree.
    -#}
ns={{ cluster.namespace }}
cluster={{ cluster.name }}
tcp={{ names.controlPlane }}
ca_fingerprint={{ cluster.caFingerprint or "" }}
cp_selector={{ "cluster.x-k8s.io/cluster-name=" ~ cluster.name ~ ",cluster.x-k8s.io/control-plane" }}
{% raw -%}
tcp_res=taloscontrolplanes.controlplane.cluster.x-k8s.io
machine_res=machines.cluster.x-k8s.io
kubeconfig=/tmp/workload.kubeconfig
umask 077
log() { printf 'capstan: %s\n' "$*"; }
err() { printf 'capstan: %s\n' "$*" >&2; }
kc() { out=$(kubectl --request-timeout=20s "$@"); }
kw() { out=$(kubectl --kubeconfig="$kubeconfig" --request-timeout=20s "$@"); }
tcp_get() { kc -n "$ns" get "$tcp_res" "$tcp" -o "jsonpath=$1"; }
name_ok() {
  case "$1" in
    '' | *[!a-z0-9.-]*) err "unexpected kubectl output: '$1'"; return 1 ;;
  esac
}
pause_state() {
  kc -n "$ns" get "$tcp_res" "$tcp" \
    -o 'go-template={{range $k, $v := .metadata.annotations}}{{if eq $k "cluster.x-k8s.io/paused"}}paused{{end}}{{end}}' || return 1
  case "$out" in
    paused) is_paused=1 ;;
    '') is_paused=0 ;;
    *) err "unexpected kubectl output: '$out'"; return 1 ;;
  esac
}
paused() { pause_state && [ "$is_paused" = 1 ]; }
retry() {
  r_max=$1
  r_sleep=$2
  r_what=$3
  shift 3
  r_try=0
  until "$@"; do
    r_try=$((r_try + 1))
    if [ "$r_try" -ge "$r_max" ]; then err "$r_what"; return 1; fi
    sleep "$r_sleep"
  done
}
pause_once() { kc -n "$ns" annotate "$tcp_res" "$tcp" cluster.x-k8s.io/paused=true --overwrite && paused; }
pause() {
  retry 30 10 "COULD NOT PAUSE $ns/$tcp: pause it by hand now: kubectl -n $ns annotate $tcp_res $tcp cluster.x-k8s.io/paused=true --overwrite" pause_once
}
machines() {
  kc -n "$ns" get "$machine_res" -l "$cp_selector" \
    -o 'jsonpath={range .items[*]}{.metadata.name}{" "}{.status.nodeRef.name}{"\n"}{end}' || return 1
  count=0
  joined=0
  while read -r m node extra; do
    [ -n "$m" ] || continue
    name_ok "$m" || return 1
    if [ -n "$node" ]; then name_ok "$node" || return 1; joined=$((joined + 1)); fi
    if [ -n "$extra" ]; then err "unexpected kubectl output: '$m $node $extra'"; return 1; fi
    count=$((count + 1))
  done <<EOF
$out
EOF
}
machines_twice() {
  machines || return 1
  first="$count/$joined"
  sleep 3
  machines || return 1
  if [ "$first" != "$count/$joined" ]; then
    err "two reads of the control-plane Machines disagree ($first, then $count/$joined machines/joined)"
    return 1
  fi
}
cluster_unpaused_read() { kc -n "$ns" get clusters.cluster.x-k8s.io "$cluster" -o name; }
cluster_unpaused() {
  kc -n "$ns" get clusters.cluster.x-k8s.io "$cluster" -o 'jsonpath={.spec.paused}' || return 1
  case "$out" in
    '' | false) return 0 ;;
    true)
      err "Cluster $ns/$cluster is paused (spec.paused: true), which no phase does: a clusterctl move killed between pausing and unpausing leaves it so, and nothing of the cluster reconciles. Make sure no clusterctl move runs, then: kubectl -n $ns patch clusters.cluster.x-k8s.io $cluster --type merge -p '{\"spec\":{\"paused\":false}}'"
      return 1 ;;
    *) err "unexpected spec.paused '$out'"; return 1 ;;
  esac
}
guard() {
  retry 60 5 "Cluster $ns/$cluster cannot be read after 5 minutes" cluster_unpaused_read || return 1
  cluster_unpaused || return 1
  retry 60 5 "TalosControlPlane $ns/$tcp cannot be read after 5 minutes" tcp_get '{.metadata.name}' || return 1
  retry 60 5 "Secrets $ns/$cluster-talos and $ns/$cluster-ca are not both there after 5 minutes: the providers would generate a new PKI; sync the sealed Secrets first (sops-secrets-operator: kubectl -n $ns get sopssecrets)" \
    kc -n "$ns" get secret "$cluster-talos" "$cluster-ca" -o name || return 1
  ca_check || return 1
  tcp_get '{.status.bootstrapped}' || return 1
  case "$out" in
    true) log "$ns/$tcp: status.bootstrapped is true"; return 0 ;;
    '' | false) ;;
    *) err "unexpected status.bootstrapped '$out'"; return 1 ;;
  esac
  machines_twice || return 1
  if [ "$count" -eq 0 ]; then
    retry 60 5 "Secret $ns/$cluster-kubeconfig does not exist after 5 minutes: the control-plane provider writes it while it reconciles $ns/$tcp unpaused (phase prepare); status.bootstrapped stays unset and no machine is admitted" \
      workload_kubeconfig || return 1
    workload_twice || return 1
    if [ "$talos_cp" -gt 0 ]; then
      err "refusing to set status.bootstrapped: the workload cluster runs $talos_cp Talos control-plane Nodes but no control-plane Machine exists: this management cluster lost its Machines (rebuilt from git?), and new ones would become a second control plane; restore them (clusterctl move from a backup) first"
      return 1
    fi
  fi
  kc -n "$ns" patch "$tcp_res" "$tcp" --subresource=status --type=merge -p '{"status":{"bootstrapped":true}}' || return 1
  if ! tcp_get '{.status.bootstrapped}' || [ "$out" != true ]; then
    err "status.bootstrapped of $ns/$tcp does not read back as true"
    return 1
  fi
  log "$ns/$tcp: status.bootstrapped=true"
  if [ "$count" -gt 0 ]; then
    err "$count control-plane Machines existed before status.bootstrapped was set: the provider may have bootstrapped a second etcd; check etcdctl member list on a kubeadm control-plane node (capstan explain 'please run talosctl bootstrap')"
    return 1
  fi
}
ca_check() {
  [ -n "$ca_fingerprint" ] || return 0
  kc -n "$ns" get secret "$cluster-ca" -o 'jsonpath={.metadata.annotations.capstan\.dev/kubernetes-ca}' || return 1
  case "$out" in
    "$ca_fingerprint") log "$ns/$cluster-ca holds the Kubernetes CA git records ($ca_fingerprint)"; return 0 ;;
    '')
      err "Secret $ns/$cluster-ca was not applied from git (no capstan.dev/kubernetes-ca annotation): the bootstrap provider writes one with its own CA when it reconciles before the sealed Secret exists, and new machines would join a foreign PKI; delete it (kubectl -n $ns delete secret $cluster-ca) and sync the sealed Secret from git, then compare fingerprints: capstan explain x509-unknown-authority"
      return 1 ;;
    sha256:*[!0-9a-f]* | *[!0-9a-z:]*) err "unexpected kubectl output for $ns/$cluster-ca's annotation"; return 1 ;;
    *)
      err "Secret $ns/$cluster-ca holds the Kubernetes CA $out, but git (spec.provenance) records $ca_fingerprint: it comes from another import; apply the sealed Secret from git (or restore this cluster's secrets.age) before any machine is admitted"
      return 1 ;;
  esac
}
workload_kubeconfig() {
  if ! kc -n "$ns" get secret "$cluster-kubeconfig" -o 'go-template={{.data.value | base64decode}}'; then
    err "cannot read Secret $ns/$cluster-kubeconfig (the control-plane provider writes it while reconciling $ns/$tcp unpaused, in phase prepare)"
    return 1
  fi
  printf '%s\n' "$out" > "$kubeconfig" || return 1
}
workload() {
  kw get pods -n kube-system -l component=etcd \
    -o 'jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}' || return 1
  kubeadm_etcd=0
  while read -r p extra; do
    [ -n "$p" ] || continue
    name_ok "$p" || return 1
    if [ -n "$extra" ]; then err "unexpected kubectl output: '$p $extra'"; return 1; fi
    kubeadm_etcd=$((kubeadm_etcd + 1))
  done <<EOF
$out
EOF
  kw get nodes -l node-role.kubernetes.io/control-plane \
    -o 'jsonpath={range .items[*]}{.metadata.name}{"|"}{.status.nodeInfo.osImage}{"\n"}{end}' || return 1
  kubeadm_cp=0
  talos_cp=0
  while IFS='|' read -r n os; do
    [ -n "$n" ] || continue
    name_ok "$n" || return 1
    case "$os" in
      Talos*) talos_cp=$((talos_cp + 1)) ;;
      *) kubeadm_cp=$((kubeadm_cp + 1)) ;;
    esac
  done <<EOF
$out
EOF
}
workload_twice() {
  workload || return 1
  first="$kubeadm_etcd/$kubeadm_cp/$talos_cp"
  sleep 3
  workload || return 1
  if [ "$first" != "$kubeadm_etcd/$kubeadm_cp/$talos_cp" ]; then
    err "two reads of the workload cluster disagree ($first, then $kubeadm_etcd/$kubeadm_cp/$talos_cp kubeadm etcd Pods/kubeadm control-plane Nodes/Talos control-plane Nodes)"
    return 1
  fi
}
{% endraw %}
