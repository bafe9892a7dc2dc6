"""Give a copy of examples/gitops lab-f the kubeadm parity fields and a Talos version.

Usage: python3 .ci/talos-parity-cluster.py CLUSTER.yaml TALOS_VERSION
"""
import sys

path, talos = sys.argv[1], sys.argv[2]
# cluster.apiServer.authorizationConfig is in the config schemas from Talos v1.9 (capstan
# refuses spec.apiServer.authorizationConfig for v1.8).
minor = int(talos.lstrip("v").split(".")[1])
authz = (
    """    authorizationConfig:
    - {type: Node, name: node}
    - type: Webhook
      name: opa
      webhook: {timeout: 3s, subjectAccessReviewVersion: v1, matchConditionSubjectAccessReviewVersion: v1, failurePolicy: NoOpinion, connectionInfo: {type: KubeConfigFile, kubeConfigFile: /etc/kubernetes/authz/opa.kubeconfig}, matchConditions: [{expression: "has(request.resourceAttributes)"}]}
    - {type: RBAC, name: rbac}
"""
    if minor >= 9
    else ""
)
s = open(path).read()
for old, new in [
    # The example's own apiServer block (anonymous-auth and podSecurity, said explicitly):
    # the fuller one below replaces it, with both settings kept.
    (
        '  apiServer:\n    extraArgs:\n      anonymous-auth: "true"\n    podSecurity: privileged\n',
        "",
    ),
    # The endpoint as a Talos VIP: an interface's `vip` up to Talos 1.11, a Layer2VIPConfig
    # document from 1.12, both checked against the schema of each minor.
    (
        "    strategy: external\n    controlPlanePool:\n      addresses: [10.20.30.150-10.20.30.153]\n      prefix: 24\n      gateway: 10.20.30.1\n",
        "    strategy: vip\n    vip: {address: 10.20.30.10, link: ens192}\n",
    ),
    # KubePrism's control-plane addresses with the VIP: a discovery service of the site's own.
    ("  talos:\n", "  talos:\n    discovery: {endpoint: \"https://discovery.example.internal/\"}\n"),
    ("talos: v1.10.6", f"talos: {talos}"),
    # The VM template holds the Talos release cluster.yaml names (finding talos-image).
    ("template: talos-v1.10.6-vmware", f"template: talos-{talos}-vmware"),
    # Kubernetes 1.31 is supported by every Talos minor from 1.8 to 1.13.
    ("kubernetes: v1.30.4", "kubernetes: v1.31.4"),
    ('    etcdVersion: "3.5.15-0"\n', '    etcdVersion: "3.5.26-0"\n'),
    (
        "  encryption:\n",
        ("""  apiServer:
    certSANs: [api.lab-f.example.internal, 10.0.0.100, "*.lab-f.example.internal"]
    extraArgs: {anonymous-auth: "true", oidc-issuer-url: "https://dex.example.internal", service-node-port-range: "20000-32767", enable-admission-plugins: AlwaysPullImages}
    podSecurity: privileged
{authz}  etcd:
    extraArgs: {quota-backend-bytes: "8589934592", election-timeout: "5000", heartbeat-interval: "500"}
  controllerManager:
    extraArgs: {controllers: bootstrapsigner, node-cidr-mask-size: "25", node-monitor-grace-period: 20s}
  scheduler:
    extraArgs: {kube-api-qps: "100"}
  kubeProxy: {disabled: true}
  kubelet:
    clusterDNS: [169.254.20.10]
    extraConfig: {maxPods: 250, kubeReserved: {cpu: 200m, memory: 1Gi}, evictionHard: {memory.available: 500Mi}}
  encryption:
""").replace("{authz}", authz),
    ),
    (
        "  - name: ingress\n    replicas: 2\n",
        "  - name: ingress\n    replicas: 2\n    labels: {node-role.kubernetes.io/ingress: \"\", example.com/tier: edge}\n    taints: [{key: dedicated, value: ingress, effect: NoSchedule}]\n",
    ),
]:
    if old not in s:
        sys.exit(f"{path}: `{old.strip()}` not found")
    s = s.replace(old, new, 1)
open(path, "w").write(s)
