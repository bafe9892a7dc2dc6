"""Generates tests/hostile/corpus.json (the hostile corpus run by tests/hostile.rs).

Run from anywhere: python3 tests/hostile/generate.py. Review the diff of corpus.json.
"""
import os
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import json
C = []
import re
_ca = open(ROOT + "/examples/gitops/clusters/lab-f/secrets/lab-f-ca.yaml").read()
_m = re.search(r'  mac: "ENC\[AES256_GCM,data:(.)', _ca)
MAC_FROM = '  mac: "ENC[AES256_GCM,data:' + _m.group(1)
MAC_TO = '  mac: "ENC[AES256_GCM,data:' + ("B" if _m.group(1) == "A" else "A")
LF = "clusters/lab-f/cluster.yaml"
def case(name, kind, setup, run, stderr, exit=2, **kw):
    d = {"name": name, "kind": kind, "setup": setup, "run": run, "expect": {"exit": exit, "stderr": stderr}}
    if "stdout" in kw: d["expect"]["stdout"] = kw["stdout"]
    if "env" in kw: d["env"] = kw["env"]
    if "cwd" in kw: d["cwd"] = kw["cwd"]
    if kw.get("one_line"): d["expect"]["one_line"] = True
    C.append(d)
def rep(file, frm, to): return {"op": "replace", "file": file, "from": frm, "to": to}
def write(file, text): return {"op": "write", "file": file, "text": text}
R = ["render", "clusters/lab-f"]
RO = ["render", ".", "-o", "out"]
OUT = {"op": "render_out"}
ID = "{outside}/identity.txt"
ARGO_ENV = {"ARGOCD_APP_SOURCE_PATH": "clusters/lab-f", "ARGOCD_ENV_CAPSTAN_SECRETS": "omit"}
ARGO = dict(cwd="clusters/lab-f", one_line=True)

# --- cluster.yaml -------------------------------------------------------------
cy = [
 ("not-yaml", write(LF, ": : :\n- [\n"), [LF]),
 ("two-documents", write(LF, "a: 1\n---\nb: 2\n"), [LF, "one YAML document"]),
 ("a-list", write(LF, "- a\n- b\n"), [LF]),
 ("unknown-field", rep(LF, "  flavour: v1beta1\n", "  flavour: v1beta1\n  surprise: 1\n"), [LF, "surprise"]),
 ("wrong-kind", rep(LF, "kind: ClusterConfig", "kind: Cluster"), [LF, "kind"]),
 ("host-newline-braces", rep(LF, "host: lab-f.example.internal", 'host: "lab-f.example.internal\\n{{ x }}"'), [LF, "spec.endpoint.host"]),
 ("host-url", rep(LF, "host: lab-f.example.internal", "host: https://lab-f.example.internal"), [LF, "spec.endpoint.host"]),
 ("port-zero", rep(LF, "port: 6443", "port: 0"), [LF, "spec.endpoint.port"]),
 ("port-overflow", rep(LF, "port: 6443", "port: 70000"), [LF, "port"]),
 ("replicas-u32-max", rep(LF, "replicas: 6", "replicas: 4294967295"), [LF, "spec.workers[0].replicas"]),
 ("replicas-negative", rep(LF, "replicas: 6", "replicas: -1"), [LF, "replicas"]),
 ("replicas-u32-overflow", rep(LF, "replicas: 6", "replicas: 4294967296"), [LF, "replicas"]),
 ("replicas-float", rep(LF, "replicas: 6", "replicas: 6.5"), [LF, "replicas"]),
 ("replicas-octal-ambiguous", rep(LF, "replicas: 6", "replicas: 010"), [LF, "`010` is ambiguous"]),
 ("numcpus-huge", rep(LF, "numCPUs: 8", "numCPUs: 3000000000"), [LF, "spec.workers[0].machine.numCPUs"]),
 ("memory-over-int64", rep(LF, "memoryMiB: 32768", "memoryMiB: 9223372036854775808"), [LF, "spec.workers[0].machine.memoryMiB"]),
 ("disk-over-int32", rep(LF, "diskGiB: 40", "diskGiB: 2147483648"), [LF, "spec.controlPlane.machine.diskGiB"]),
 ("version-escape-sequence", rep(LF, "kubernetes: v1.30.4", 'kubernetes: "v1.30.4\\e[2J\\rok"'), [LF, "spec.versions.kubernetes", "\\u{1b}"]),
 ("version-huge", rep(LF, "kubernetes: v1.30.4", "kubernetes: v1" + "9" * 100000), [LF, "more characters)"]),
 ("unknown-tag", rep(LF, "  flavour: v1beta1", "  flavour: !!python/object:os.system v1beta1"), [LF, "tag"]),
 ("alias-bomb", write(LF, "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\nh: [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"), [LF]),
 ("deep-nesting", write(LF, "a: " + "[" * 5000 + "]" * 5000 + "\n"), [LF]),
 ("duplicate-keys", rep(LF, "  flavour: v1beta1\n", "  flavour: v1beta1\n  flavour: v1beta2\n"), [LF, "uplicate"]),
 ("name-traversal", rep(LF, "  name: lab-f\n  namespace", '  name: "../../etc"\n  namespace'), [LF, "metadata.name"]),
 ("name-too-long", rep(LF, "  name: lab-f\n  namespace", "  name: " + "a" * 300 + "\n  namespace"), [LF, "metadata.name"]),
 ("namespace-invalid", rep(LF, "  namespace: lab-f", "  namespace: Lab_F"), [LF, "metadata.namespace"]),
 ("recipient-garbage", rep(LF, "  recipients:\n", "  recipients:\n  - not-a-recipient\n"), [LF, "spec.recipients"]),
 ("overlay-absolute", rep(LF, "  - overlays/talos-vmware\n", "  - /etc\n"), [LF, "spec.overlays[1]"]),
 ("overlay-climbs-out", rep(LF, "  - overlays/talos-vmware\n", "  - ../../../..\n"), [LF, "spec.overlays[1]"]),
 ("overlay-missing", rep(LF, "  - overlays/talos-vmware\n", "  - overlays/nope\n"), [LF, "overlays/nope"]),
 ("cidr-invalid", rep(LF, "pods: [10.244.0.0/16]", "pods: [10.244.0.0/33]"), [LF, "spec.network.pods"]),
 ("dns-domain-newline", rep(LF, "dnsDomain: cluster.local", 'dnsDomain: "cluster.local\\nx: y"'), [LF, "spec.network.dnsDomain"]),
 ("key-name-wrong", rep(LF, "keyName: key2", "keyName: key0"), [LF, "spec.encryption.keyName"]),
 ("phase-unknown", rep(LF, "phase: prepare", "phase: yolo"), [LF, "phase"]),
 ("flavour-unknown", rep(LF, "flavour: v1beta1", "flavour: v9"), [LF, "flavour"]),
 ("block-scalar-at-eof", write(LF, open(ROOT + "/examples/gitops/clusters/lab-f/cluster.yaml").read() + "  notes: |\n    x"), [LF, "block scalar ends the file"]),
 ("del-in-folder", rep(LF, "folder: /dc-zrh/vm/k8s/lab-f", 'folder: "/dc-zrh/vm/k8s/lab-f\\x7f"'), ["spec.folder holds U+007F"]),
 ("tab-indentation", rep(LF, "  flavour: v1beta1", "\tflavour: v1beta1"), [LF]),
 ("not-utf8", {"op": "hex", "file": LF, "hex": "6170693a20ff0a"}, [LF, "not UTF-8"]),
]
for n, op, err in cy:
    case("cluster.yaml/" + n, "cluster.yaml", [op], R, err)
case("cluster.yaml/over-cap", "cluster.yaml", [{"op": "size", "file": LF, "bytes": 2 << 20}], R, [LF, "larger than 1048576 bytes"])
case("cluster.yaml/fifo", "cluster.yaml", [{"op": "fifo", "file": LF}], ["render", "."], [LF, "a FIFO"])
case("cluster.yaml/directory", "cluster.yaml", [{"op": "dir", "file": LF}], ["render", "."], [LF, "a directory"])
case("cluster.yaml/link-outside", "cluster.yaml", [{"op": "symlink", "file": LF, "to": "{outside}/cluster.yaml"}], ["render", "."], [LF, "outside"])
case("cluster.yaml/link-dev-zero", "cluster.yaml", [{"op": "symlink", "file": LF, "to": "/dev/zero"}], ["render", "."], [LF, "outside"])
case("cluster.yaml/cluster-dir-link-outside", "cluster.yaml", [{"op": "symlink", "file": "clusters/lab-x", "to": "{outside}"}], ["render", "."], ["clusters/lab-x", "outside"])
case("cluster.yaml/plan-on-broken", "cluster.yaml", [rep(LF, "port: 6443", "port: 0")], ["plan", "clusters/lab-f"], [LF, "spec.endpoint.port"])
case("cluster.yaml/check-on-broken", "cluster.yaml", [write(LF, "- x\n")], ["check", "clusters/lab-f"], [LF])
case("cluster.yaml/render-o-untouched", "cluster.yaml", [OUT, rep(LF, "port: 6443", "port: 0")], RO, [LF, "spec.endpoint.port"])
case("cluster.yaml/duplicate-cluster-name", "cluster.yaml", [{"op": "copy", "from": "clusters/lab-f", "to": "clusters/lab-h"}], ["render", "."], ["clusters/lab-h/cluster.yaml", "cluster name `lab-f` is already used by"])
case("cluster.yaml/duplicate-cluster-name-o", "cluster.yaml", [OUT, {"op": "copy", "from": "clusters/lab-f", "to": "clusters/lab-h"}], RO, ["clusters/lab-h/cluster.yaml", "cluster name `lab-f` is already used by"])

# --- secrets.age ----------------------------------------------------------------
SA = "clusters/lab-f/secrets.age"
case("secrets.age/fifo", "secrets.age", [{"op": "fifo", "file": SA}], R, [SA, "a FIFO"])
case("secrets.age/link-outside", "secrets.age", [{"op": "symlink", "file": SA, "to": ID}], R, [SA, "outside"])
case("secrets.age/over-cap", "secrets.age", [{"op": "size", "file": SA, "bytes": (1 << 20) + 1}], R, [SA, "larger than"])
case("secrets.age/directory", "secrets.age", [{"op": "dir", "file": SA}], R, [SA, "a directory"])
case("secrets.age/garbage-render-stale", "secrets.age", [write(SA, "garbage\n")], R, ["lab-f-talos.yaml", "stale"])
case("secrets.age/garbage-decrypt", "secrets.age", [write(SA, "garbage\n")], ["secrets", "decrypt", "-i", ID, SA], [SA])
case("secrets.age/garbage-seal", "secrets.age", [write(SA, "-----BEGIN AGE ENCRYPTED FILE-----\nnope\n-----END AGE ENCRYPTED FILE-----\n")], ["secrets", "seal", "-i", ID, "clusters/lab-f"], [SA])
case("secrets.age/dev-zero-decrypt", "secrets.age", [], ["secrets", "decrypt", "-i", ID, "/dev/zero"], ["/dev/zero", "not a regular file"])
case("secrets.age/fifo-rekey", "secrets.age", [{"op": "fifo", "file": SA}], ["secrets", "rekey", "-i", ID, "clusters/lab-f"], [SA, "a FIFO"])
case("secrets.age/check-with-identity-garbage", "secrets.age", [write(SA, "garbage\n")], ["check", "-i", ID, "clusters/lab-f"], [SA])

# --- sealed files ---------------------------------------------------------------
CA = "clusters/lab-f/secrets/lab-f-ca.yaml"
TA = "clusters/lab-f/secrets/lab-f-talos.yaml"
sealed = [
 ("renamed", rep(CA, "name: lab-f-ca", "name: lab-f-ca-x"), "metadata.name: expected `lab-f-ca`"),
 ("namespace", rep(CA, "namespace: lab-f", "namespace: kube-system"), "metadata.namespace"),
 ("type", rep(CA, "type: cluster.x-k8s.io/secret", "type: Opaque"), "type: expected"),
 ("label-removed", rep(CA, "    cluster.x-k8s.io/cluster-name: lab-f\n", "    team: x\n"), "metadata.labels.cluster.x-k8s.io/cluster-name"),
 ("data-key-renamed", rep(CA, "  tls.key:", "  tls.pem:"), "data: expected the keys"),
 ("plaintext-value", rep(CA, "  tls.key: \"ENC[AES256_GCM,data:", "  tls.key: \"PLAIN[AES256_GCM,data:"), "data.tls.key: not a well-formed ENC"),
 ("bad-iv", rep(TA, ",iv:", ",iv:AAAA") if False else rep(CA, "type: cluster.x-k8s.io/secret\n", "type: cluster.x-k8s.io/secret\n"), None),
 ("crypt-rule-off", rep(CA, 'encrypted_regex: "^(data|stringData)$"', 'encrypted_regex: "^nothing$"'), "not covered by the file's crypt rule"),
 ("sops-removed", {"op": "write", "file": CA, "text": "apiVersion: v1\nkind: Secret\nmetadata:\n  name: lab-f-ca\n  namespace: lab-f\ntype: cluster.x-k8s.io/secret\ndata:\n  tls.crt: eA==\n  tls.key: eA==\n"}, "not SOPS-encrypted"),
 ("kind-configmap", rep(CA, "kind: Secret", "kind: ConfigMap"), "expected a v1 Secret"),
 ("stale-digest", rep(CA, "capstan.dev/secrets-age-sha256: c", "capstan.dev/secrets-age-sha256: 0"), "stale"),
 ("fingerprint", rep(CA, "capstan.dev/etcd-ca: sha256:5", "capstan.dev/etcd-ca: sha256:6"), "spec.provenance"),
 ("multi-document", {"op": "write", "file": CA, "text": "a: 1\n---\nb: 2\n"}, "invalid YAML"),
 ("unknown-enc-type", None, "unknown value type"),
]
for n, op, err in sealed:
    if op is None or err is None:
        continue
    case("sealed/" + n, "sealed file", [op], R, [CA if "ca" in op.get("file", CA) else TA, err])
# ENC type and IV changes need per-file single replacements: use the mac line (one per file)
case("sealed/bad-mac-iv", "sealed file", [rep(CA, "  mac: \"ENC[AES256_GCM,data:", "  mac: \"ENC[AES256_GCM,data:%%")], R, [CA, "sops.mac"])
case("sealed/link-outside", "sealed file", [{"op": "symlink", "file": CA, "to": ID}], R, [CA, "outside"])
case("sealed/fifo", "sealed file", [{"op": "fifo", "file": CA}], R, [CA, "a FIFO"])
case("sealed/over-cap", "sealed file", [{"op": "size", "file": CA, "bytes": (1 << 20) + 5}], R, [CA, "larger than"])
case("sealed/extra-misnamed", "sealed file", [{"op": "write", "file": "clusters/lab-f/secrets/vsphere.yaml", "text": open(ROOT + "/examples/gitops/clusters/lab-f/secrets/lab-f-talos.yaml").read()}], R, ["clusters/lab-f/secrets/vsphere.yaml", "metadata.name: expected `vsphere`"])
case("sealed/missing", "sealed file", [{"op": "remove", "file": CA}], R, [CA, "missing"])
case("sealed/corrupt-mac-argocd-decrypt", "sealed file", [rep(CA, MAC_FROM, MAC_TO)], ["argocd", "generate"], ["lab-f-ca"], env={"ARGOCD_APP_SOURCE_PATH": "clusters/lab-f", "ARGOCD_ENV_CAPSTAN_SECRETS": "decrypt", "SOPS_AGE_KEY_FILE": ID}, **ARGO)
case("sealed/corrupt-mac-secrets-decrypt", "sealed file", [rep(CA, MAC_FROM, MAC_TO)], ["secrets", "decrypt", "-i", ID, CA], [CA, "sops.mac"])
case("sealed/corrupt-mac-render-decrypt", "sealed file", [rep(CA, MAC_FROM, MAC_TO)], ["render", "--decrypt", "-i", ID, "clusters/lab-f"], ["lab-f-ca", "sops.mac"])
case("sealed/render-o-untouched", "sealed file", [OUT, rep(CA, "name: lab-f-ca", "name: other")], RO, [CA, "metadata.name"])
case("sealed/not-utf8", "sealed file", [{"op": "hex", "file": CA, "hex": "ff0a"}], R, [CA, "not UTF-8"])

# --- templates ------------------------------------------------------------------
WP = "templates/talos/worker-patch.yaml"
T = lambda text: write(WP, text)
tpl = [
 ("link-to-identity", {"op": "symlink", "file": WP, "to": ID}, [WP, "outside"]),
 ("link-proc-environ", {"op": "symlink", "file": WP, "to": "/proc/self/environ"}, [WP, "outside"]),
 ("fifo", {"op": "fifo", "file": WP}, [WP, "a FIFO"]),
 ("over-cap", {"op": "size", "file": WP, "bytes": (1 << 20) + 1}, [WP, "larger than"]),
 ("endless-loop", T("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"), [WP, "ran out of fuel"]),
 ("output-bomb", T("{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}"), [WP, "ran out of fuel"]),
 ("concat-bomb", T("{% set s = 'x' * 50000000 %}{{ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s }}"), [WP, "ran out of fuel"]),
 ("recursion", T("{% macro m(n) %}{{ m(n) }}{% endmacro %}{{ m(1) }}"), ["talos/worker-patch.yaml"]),
 ("syntax-error", T("a: {{ x \n"), [WP, "syntax error"]),
 ("undefined", T("a: {{ cluster.nope }}\n"), [WP, "undefined"]),
 ("not-yaml-output", T("a: [\n"), ["talos/worker-patch.yaml", "invalid Talos patch"]),
 ("not-a-mapping", T("- a\n"), ["talos/worker-patch.yaml", "not a mapping"]),
 ("include-missing", T("{% include 'nope.yaml' %}"), ["talos/worker-patch.yaml"]),
 ("include-identity-path", T("{% include '../../../outside/identity.txt' %}"), ["talos/worker-patch.yaml"]),
]
for n, op, err in tpl:
    case("template/" + n, "template", [op], ["render", "."], err)
case("template/unknown-name", "template", [write("templates/talos/nope.yaml", "a: 1\n")], ["render", "."], ["templates/talos/nope.yaml", "not a template capstan knows"])
case("template/migration-override", "template", [write("templates/migration/rbac.yaml", "a: 1\n")], ["render", "."], ["templates/migration/rbac.yaml"])
case("template/dir-link-outside", "template", [{"op": "symlink", "file": "templates", "to": "{outside}"}], ["render", "."], ["templates", "outside"])
case("template/flag-missing-dir", "template", [], ["render", ".", "--templates", "no-such-dir"], ["no-such-dir"])
case("template/flag-a-file", "template", [], ["render", ".", "--templates", "clusters/lab-f/cluster.yaml"], ["clusters/lab-f/cluster.yaml", "not a directory"])
case("template/not-yaml-extension", "template", [write("templates/talos/x.txt", "a")], ["render", "."], ["templates/talos/x.txt"])
case("template/loop-argocd", "template", [T("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")], ["argocd", "generate"], ["worker-patch.yaml", "ran out of fuel"], env=ARGO_ENV, **ARGO)
case("template/link-argocd", "template", [{"op": "symlink", "file": WP, "to": ID}], ["argocd", "generate"], ["worker-patch.yaml", "outside"], env=ARGO_ENV, **ARGO)
case("template/render-o-untouched", "template", [OUT, T("{{ nope }}")], RO, [WP])

# --- overlays -------------------------------------------------------------------
OV = "overlays/t/overlay.yaml"
HEAD = "apiVersion: capstan.dev/v1alpha1\nkind: Overlay\n"
USE = rep(LF, "  - overlays/talos-vmware\n", "  - overlays/talos-vmware\n  - overlays/t\n")
def ov(name, text_or_op, err, extra=()):
    op = write(OV, text_or_op) if isinstance(text_or_op, str) else text_or_op
    case("overlay/" + name, "overlay", [USE, op, *extra], R, err)
ov("link-outside", {"op": "symlink", "file": OV, "to": ID}, [OV, "outside"])
ov("fifo", {"op": "fifo", "file": OV}, ["overlays/t", "a FIFO"])
ov("over-cap", {"op": "size", "file": OV, "bytes": (4 << 20) + 1}, [OV, "larger than"])
ov("not-yaml", ": [\n", [OV])
ov("unknown-field", HEAD + "surprise: 1\n", [OV, "surprise"])
ov("resource-climbs-out", HEAD + "resources: [../../../../etc/passwd]\n", [OV, "resources[0]"])
ov("resource-link-outside", HEAD + "resources: [r.yaml]\n", [OV, "outside"], [{"op": "symlink", "file": "overlays/t/r.yaml", "to": "{outside}/cluster.yaml"}])
ov("patch-file-link-outside", HEAD + "patches:\n- target: {kind: Cluster}\n  type: merge\n  path: p.yaml\n", [OV, "outside"], [{"op": "symlink", "file": "overlays/t/p.yaml", "to": ID}])
ov("patch-file-fifo", HEAD + "patches:\n- target: {kind: Cluster}\n  type: merge\n  path: p.yaml\n", ["overlays/t/p.yaml", "a FIFO"], [{"op": "fifo", "file": "overlays/t/p.yaml"}])
ov("remove-name", HEAD + "patches:\n- target: {kind: Cluster}\n  type: json\n  patch:\n  - {op: remove, path: /metadata/name}\n", [OV])
ov("bad-pointer", HEAD + "patches:\n- target: {kind: Cluster}\n  type: json\n  patch:\n  - {op: replace, path: /no/such/thing, value: 1}\n", [OV, "patches[0]"])
ov("a-secret-resource", HEAD + "resources: [s.yaml]\n", [OV, "resources"], [write("overlays/t/s.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: x, namespace: lab-f}\nstringData: {a: b}\n")])
ov("bases-cycle", HEAD + "bases: [../t]\n", [OV])
ov("octal-ambiguous", HEAD + "patches:\n- target: {kind: VSphereMachineTemplate, name: lab-f-general}\n  type: json\n  patch:\n  - {op: replace, path: /spec/template/spec/numCPUs, value: 010}\n", [OV, "`010` is ambiguous"])
ov("unknown-tag", HEAD + "patches:\n- target: {kind: Cluster}\n  type: json\n  patch:\n  - {op: add, path: /metadata/labels/x, value: !vault secret/x}\n", [OV, "unsupported tag"])
ov("del-value", HEAD + "patches:\n- target: {kind: Cluster}\n  type: json\n  patch:\n  - {op: add, path: /metadata/labels/x, value: \"a\\x7fb\"}\n", ["metadata.labels.x holds U+007F"])
ov("talos-mode-ambiguous", HEAD + "talos:\n  controlPlane:\n  - machine:\n      files:\n      - {path: /var/x, op: create, content: x, permissions: 0644}\n", [OV, "`0644` is ambiguous"])
ov("block-scalar-at-eof", HEAD + "patches:\n- target: {kind: Cluster}\n  type: json\n  patch:\n  - op: add\n    path: /metadata/labels/x\n    value: |\n      x", [OV, "block scalar ends the file"])
ov("rename-template", HEAD + "patches:\n- target: {kind: VSphereMachineTemplate, name: lab-f-general}\n  type: json\n  patch:\n  - {op: replace, path: /metadata/name, value: renamed}\n", [OV])
ov("patch-job", HEAD + "patches:\n- target: {kind: Job}\n  type: json\n  patch:\n  - {op: replace, path: /spec/template/spec/containers/0/command, value: [\"true\"]}\n", [OV])
ov("deep-nesting", HEAD + "x: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n", [OV])

# --- argocd generate --------------------------------------------------------------
def argo(name, env, err, setup=()):
    case("argocd/" + name, "argocd environment", list(setup), ["argocd", "generate"], err, env=env, **ARGO)
argo("no-mode", {"ARGOCD_APP_SOURCE_PATH": "clusters/lab-f"}, ["no secrets mode"])
argo("bad-parameters-json", {"ARGOCD_APP_SOURCE_PATH": "clusters/lab-f", "ARGOCD_APP_PARAMETERS": "[{"}, ["ARGOCD_APP_PARAMETERS"])
argo("decrypt-without-identity", {"ARGOCD_APP_SOURCE_PATH": "clusters/lab-f", "ARGOCD_ENV_CAPSTAN_SECRETS": "decrypt"}, ["age identity"])
argo("identity-fifo", {"ARGOCD_APP_SOURCE_PATH": "clusters/lab-f", "ARGOCD_ENV_CAPSTAN_SECRETS": "decrypt", "SOPS_AGE_KEY_FILE": "{outside}/fifo"}, ["{outside}/fifo", "a FIFO"], [{"op": "fifo", "file": "../outside/fifo"}])
argo("identity-dev-zero", {"ARGOCD_APP_SOURCE_PATH": "clusters/lab-f", "ARGOCD_ENV_CAPSTAN_SECRETS": "decrypt", "SOPS_AGE_KEY_FILE": "/dev/zero"}, ["/dev/zero", "not a regular file"])
argo("identity-garbage", {"ARGOCD_APP_SOURCE_PATH": "clusters/lab-f", "ARGOCD_ENV_CAPSTAN_SECRETS": "decrypt", "SOPS_AGE_KEY": "AGE-SECRET-KEY-1NOPE"}, ["SOPS_AGE_KEY"])
argo("source-path-climbs", {"ARGOCD_APP_SOURCE_PATH": "../../..", "ARGOCD_ENV_CAPSTAN_SECRETS": "omit"}, ["ARGOCD_APP_SOURCE_PATH"])
argo("mode-unknown", {"ARGOCD_APP_SOURCE_PATH": "clusters/lab-f", "ARGOCD_ENV_CAPSTAN_SECRETS": "plaintext"}, ["ARGOCD_ENV_CAPSTAN_SECRETS"])
argo("namespace-mismatch", {"ARGOCD_APP_SOURCE_PATH": "clusters/lab-f", "ARGOCD_ENV_CAPSTAN_SECRETS": "omit", "ARGOCD_APP_NAMESPACE": "other"}, ["ARGOCD_APP_NAMESPACE"])
argo("broken-cluster", {"ARGOCD_APP_SOURCE_PATH": "clusters/lab-f", "ARGOCD_ENV_CAPSTAN_SECRETS": "omit"}, ["cluster.yaml", "spec.endpoint.port"], [rep(LF, "port: 6443", "port: 0")])
argo("operator-missing", {"ARGOCD_APP_SOURCE_PATH": "clusters/lab-f", "ARGOCD_ENV_CAPSTAN_SECRETS": "operator"}, ["secrets/operator"])
argo("operator-link-outside", {"ARGOCD_APP_SOURCE_PATH": "clusters/lab-f", "ARGOCD_ENV_CAPSTAN_SECRETS": "operator"}, ["outside"], [{"op": "symlink", "file": "clusters/lab-f/secrets/operator/lab-f-ca.yaml", "to": ID}, {"op": "symlink", "file": "clusters/lab-f/secrets/operator/lab-f-talos.yaml", "to": ID}])

# --- diff ------------------------------------------------------------------------
case("diff/corrupt-mac-is-high", "diff input", [{"op": "render_out"}, rep(CA, MAC_FROM, MAC_TO)], ["diff", "out", "."], [], exit=1, stdout=["high", "Secret lab-f/lab-f-ca: the sealed file cannot be opened or verified"])
case("diff/missing-side", "diff input", [], ["diff", "nope-a", "."], ["nope-a"])
case("diff/git-bad-rev", "diff input", [], ["diff", "--git", "nope..HEAD"], ["git"])
case("diff/side-fifo", "diff input", [{"op": "fifo", "file": "side.yaml"}], ["diff", "side.yaml", "."], ["side.yaml"])
case("diff/side-over-cap", "diff input", [{"op": "size", "file": "side.yaml", "bytes": (64 << 20) + 1}], ["diff", "side.yaml", "."], ["side.yaml", "larger than"])

# --- validate --------------------------------------------------------------------
case("validate/fifo", "validate input", [{"op": "fifo", "file": "x.yaml"}], ["validate", "--crds", "clusters", "x.yaml"], ["x.yaml", "a FIFO"])
case("validate/alias-bomb", "validate input", [write("x.yaml", "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\n")], ["validate", "--crds", "clusters", "x.yaml"], ["x.yaml"])
case("validate/over-cap", "validate input", [{"op": "size", "file": "x.yaml", "bytes": (64 << 20) + 1}], ["validate", "--crds", "clusters", "x.yaml"], ["x.yaml", "larger than"])
case("validate/crds-fifo", "validate input", [{"op": "fifo", "file": "crds/x.yaml"}], ["validate", "--crds", "crds", "clusters"], ["crds/x.yaml", "a FIFO"])

# --- identities ------------------------------------------------------------------
case("identity/dev-zero", "identity", [], ["secrets", "decrypt", "-i", "/dev/zero", SA], ["/dev/zero", "not a regular file"])
case("identity/fifo", "identity", [{"op": "fifo", "file": "id.txt"}], ["secrets", "decrypt", "-i", "id.txt", SA], ["id.txt", "a FIFO"])
case("identity/garbage", "identity", [write("id.txt", "AGE-SECRET-KEY-1NOPE\n")], ["secrets", "decrypt", "-i", "id.txt", SA], ["id.txt"])
case("identity/over-cap", "identity", [{"op": "size", "file": "id.txt", "bytes": (1 << 20) + 1}], ["secrets", "decrypt", "-i", "id.txt", SA], ["id.txt", "larger than"])
case("identity/wrong-key", "identity", [write("id.txt", "AGE-SECRET-KEY-1QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQGZZ9LN\n")], ["secrets", "decrypt", "-i", "id.txt", SA], ["id.txt"])
case("identity/env-dev-zero", "identity", [], ["secrets", "decrypt", SA], ["/dev/zero"], env={"SOPS_AGE_KEY_FILE": "/dev/zero"})

# --- import kubeadm ----------------------------------------------------------------
IMP = ["import", "kubeadm", "--pki", "pki", "--apiserver-manifest", "m.yaml", "--kubeadm-config", "k.yaml", "-r", "age1uhh4sjky7uv75cdmgk5vjarsd9dv6kxkvjnf7zspu3v4crp0udgq47fxk5", "--talos-version", "v1.10.6", "--out", "clusters/new"]
case("import/pki-missing", "kubeadm input", [write("m.yaml", "a: 1\n"), write("k.yaml", "a: 1\n")], IMP, ["pki"])
case("import/encryption-config-fifo", "kubeadm input", [{"op": "dir", "file": "pki"}, {"op": "fifo", "file": "e.yaml"}, write("m.yaml", "a: 1\n"), write("k.yaml", "a: 1\n")], IMP + ["--encryption-config", "e.yaml"], ["pki"])
case("import/ca-dev-zero", "kubeadm input", [{"op": "dir", "file": "pki"}, {"op": "symlink", "file": "pki/ca.crt", "to": "/dev/zero"}, write("m.yaml", "a: 1\n"), write("k.yaml", "a: 1\n")], IMP, ["pki/ca.crt", "not a regular file"])
case("kubeadm/manifest-fifo", "kubeadm input", [{"op": "fifo", "file": "m.yaml"}], ["check", "clusters/lab-f", "--apiserver-manifest", "m.yaml"], ["m.yaml", "a FIFO"])
case("kubeadm/manifest-garbage", "kubeadm input", [write("m.yaml", ": [\n")], ["check", "clusters/lab-f", "--apiserver-manifest", "m.yaml"], ["m.yaml"])
case("kubeadm/config-garbage", "kubeadm input", [write("k.yaml", "- : [\n")], ["check", "clusters/lab-f", "--kubeadm-config", "k.yaml"], ["k.yaml"])
case("kubeadm/encryption-config-over-cap", "kubeadm input", [{"op": "size", "file": "e.yaml", "bytes": (1 << 20) + 1}], ["check", "clusters/lab-f", "--encryption-config", "e.yaml"], ["e.yaml", "larger than"])
case("kubeadm/pki-link-outside-dir", "kubeadm input", [{"op": "symlink", "file": "pki", "to": "{outside}"}], ["check", "clusters/lab-f", "--pki", "pki"], ["pki"])

# --- check inputs ------------------------------------------------------------------
case("check/providers-fifo", "check input", [{"op": "fifo", "file": "p.yaml"}], ["check", "clusters/lab-f", "--providers", "p.yaml"], ["p.yaml", "a FIFO"])
case("check/providers-garbage", "check input", [write("p.yaml", "items: [1, 2]\n")], ["check", "clusters/lab-f", "--providers", "p.yaml"], ["p.yaml"])
case("check/kube-proxy-garbage", "check input", [write("kp.yaml", "- : [\n")], ["check", "clusters/lab-f", "--kube-proxy", "kp.yaml"], ["kp.yaml"])
case("check/apiserver-dev-zero", "check input", [], ["check", "clusters/lab-f", "--apiserver-manifest", "/dev/zero"], ["/dev/zero", "not a regular file"])

# --- render -o output directory ----------------------------------------------------
case("out/foreign-file", "output directory", [OUT, write("out/lab-f/notes.txt", "mine")], RO, ["out/lab-f", "notes.txt"])
case("out/foreign-directory", "output directory", [OUT, write("out/.git/HEAD", "ref"), rep(LF, "replicas: 6", "replicas: 5")], RO, ["out", ".git/"])
case("out/is-a-file", "output directory", [write("out", "x")], RO, ["out", "not a directory"])
case("out/bad-lock", "output directory", [OUT, write("out/lab-f/capstan.lock", "kind: Nope\n")], RO, ["out/lab-f/capstan.lock", "not a capstan lock file"])
case("out/decrypt-refused", "output directory", [OUT], ["render", ".", "--decrypt", "-i", ID, "-o", "out"], ["--decrypt"])

json.dump(C, open(ROOT + "/tests/hostile/corpus.json", "w"), indent=1, ensure_ascii=False)
print(len(C))
