"""Write every Talos strategic patch of a rendered stream as a JSON file (for check-jsonschema).

Usage: python3 .ci/talos-patches.py STREAM.yaml OUTDIR  -> prints the files written.
"""
import json
import os
import sys

import yaml

stream, outdir = sys.argv[1], sys.argv[2]
os.makedirs(outdir, exist_ok=True)
n = 0
for doc in yaml.safe_load_all(open(stream)):
    if not doc or doc.get("kind") not in ("TalosControlPlane", "TalosConfigTemplate"):
        continue
    spec = doc["spec"]
    configs = []
    if doc["kind"] == "TalosControlPlane":
        configs.append(spec["controlPlaneConfig"]["controlplane"])
    else:
        configs.append(spec["template"]["spec"])
    for cfg in configs:
        for patch in cfg.get("strategicPatches", []):
            n += 1
            path = os.path.join(outdir, f"{doc['metadata']['name']}-{n}.json")
            json.dump(yaml.safe_load(patch), open(path, "w"))
            print(path)
if n == 0:
    sys.exit(f"{stream}: no Talos strategic patch found")
