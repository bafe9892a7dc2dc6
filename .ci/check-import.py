"""Check an imported Talos secrets bundle (plaintext on stdin, never on disk) and the
cluster.yaml stub against the kubeadm files they came from. Used by .ci/run."""
import base64, hashlib, re, subprocess, sys, tempfile, yaml

src, provider, keyname, cluster_dir = sys.argv[1:5]
b = yaml.safe_load(sys.stdin.read())
pem = lambda p: open(f"{src}/pki/{p}", "rb").read()
pairs = {("k8s", "crt"): "ca.crt", ("k8s", "key"): "ca.key", ("etcd", "crt"): "etcd/ca.crt",
         ("etcd", "key"): "etcd/ca.key", ("k8saggregator", "crt"): "front-proxy-ca.crt",
         ("k8saggregator", "key"): "front-proxy-ca.key", ("k8sserviceaccount", "key"): "sa.key"}
for (c, k), f in pairs.items():
    assert base64.b64decode(b["certs"][c][k]) == pem(f), f"certs.{c}.{k} is not byte-identical to {f}"
secret = open(f"{src}/encryption-secret.txt").read().strip()
enc = {k: v for k, v in b["secrets"].items() if k.endswith("encryptionsecret")}
assert enc == {f"{provider}encryptionsecret": secret}, "the kubeadm encryption key was not carried as-is"
tok = re.compile(r"^[0-9a-z]{6}\.[0-9a-z]{16}$")
assert tok.match(b["secrets"]["bootstraptoken"]) and tok.match(b["trustdinfo"]["token"]), "token format"
assert len(base64.b64decode(b["cluster"]["secret"])) == 32 and len(base64.urlsafe_b64decode(b["cluster"]["id"])) == 32
assert list(b) == ["cluster", "secrets", "trustdinfo", "certs"], "talosctl key order"
with tempfile.NamedTemporaryFile(suffix=".crt") as f:
    f.write(base64.b64decode(b["certs"]["os"]["crt"])); f.flush()
    text = subprocess.run(["openssl", "x509", "-in", f.name, "-noout", "-text"], capture_output=True, text=True, check=True).stdout
    assert "O = talos" in text and "ED25519" in text.upper() and "CA:TRUE" in text, "OS CA shape"
    assert subprocess.run(["openssl", "verify", "-CAfile", f.name, f.name], capture_output=True).returncode == 0, "OS CA verifies"
assert base64.b64decode(b["certs"]["os"]["key"]).startswith(b"-----BEGIN ED25519 PRIVATE KEY-----")

c = yaml.safe_load(open(f"{cluster_dir}/cluster.yaml"))["spec"]
der = lambda p: hashlib.sha256(subprocess.run(["openssl", "x509", "-in", f"{src}/pki/{p}", "-outform", "der"], capture_output=True, check=True).stdout).hexdigest()
fp = c["provenance"]["fingerprints"]
assert fp["kubernetesCa"] == "sha256:" + der("ca.crt") and fp["etcdCa"] == "sha256:" + der("etcd/ca.crt") and fp["frontProxyCa"] == "sha256:" + der("front-proxy-ca.crt")
spki = hashlib.sha256(subprocess.run(["openssl", "pkey", "-in", f"{src}/pki/sa.key", "-pubout", "-outform", "der"], capture_output=True, check=True).stdout).hexdigest()
assert fp["serviceAccountKey"] == "sha256:" + spki, "service-account key fingerprint"
assert c["endpoint"] == {"host": "lab-f.example.internal", "port": 6443, "backendPort": 6443}, c["endpoint"]  # backendPort: the manifest's --secure-port (D2)
assert c["versions"]["kubernetes"] == "v1.30.4"
assert c["network"] == {"pods": ["10.244.0.0/16"], "services": ["10.96.0.0/12"], "dnsDomain": "cluster.local"}
assert c["serviceAccount"]["issuers"] == ["https://kubernetes.default.svc.cluster.local"]
assert c["encryption"] == {"provider": provider, "keyName": keyname}, "encryption recorded as found"
assert c["provenance"]["bootstrapTokenId"] == b["secrets"]["bootstraptoken"].split(".")[0]
print(f"{src}: bundle and cluster.yaml match the kubeadm files ({provider}/{keyname})")
