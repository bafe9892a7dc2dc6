"""Independent check of a capstan-sealed SOPS file: the data key comes from the real `age`
CLI (stdin: the 32-byte key), values are decrypted with AES-256-GCM (32-byte IV, AAD = the
key path joined by ':' plus ':'), and the MAC is recomputed as sops does and compared with
the decrypted `sops.mac`. Prints nothing secret. Used by .ci/run."""
import base64, hashlib, re, sys, yaml
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

path = sys.argv[1]
key = sys.stdin.buffer.read()
assert len(key) == 32, f"{path}: data key is {len(key)} bytes"
doc = yaml.safe_load(open(path))
meta = doc.pop("sops")
ENC = re.compile(r"^ENC\[AES256_GCM,data:(.*),iv:(.*),tag:(.*),type:(.*)\]$")

def dec(value, aad):
    m = ENC.match(value)
    data, iv, tag, typ = m.groups()
    iv = base64.b64decode(iv)
    assert len(iv) == 32, "IV must be 32 bytes"
    plain = AESGCM(key).decrypt(iv, base64.b64decode(data) + base64.b64decode(tag), aad.encode())
    return plain, typ

regex = re.compile(meta["encrypted_regex"])
mac_only = meta.get("mac_only_encrypted", False)
h = hashlib.sha512()
if mac_only:
    h.update(hashlib.sha256(b"sops").digest())
count = 0
def walk(node, keys):
    global count
    if isinstance(node, dict):
        for k, v in node.items():
            walk(v, keys + [k])
    elif isinstance(node, list):
        for v in node:
            walk(v, keys)
    else:
        encrypted = any(regex.search(k) for k in keys)
        if encrypted and isinstance(node, str) and node.startswith("ENC["):
            plain, _ = dec(node, ":".join(keys) + ":")
            h.update(plain)
            count += 1
        elif not mac_only:
            h.update(str(node).encode())
walk(doc, [])
mac, _ = dec(meta["mac"], meta["lastmodified"])
assert mac.decode() == h.hexdigest().upper(), f"{path}: MAC mismatch"
assert meta.get("version"), "sops version written"
print(f"{path}: {count} values decrypted with the age-wrapped data key, MAC verified")
