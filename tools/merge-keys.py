#!/usr/bin/env python3
"""Generate src/overlay/merge_keys.rs: which lists a strategic patch merges, and by
which keys, for the built-in kinds and for the custom resources capstan validates against.

Inputs (recorded in the generated file's header):
- built-in kinds: the OpenAPI definitions Kubernetes publishes, as vendored by the PyPI
  package `kubernetes-validate` (`kubernetes-json-schema/v<K8S>-local/_definitions.json`,
  generated from kubernetes/kubernetes api/openapi-spec). A list merges when its property
  has `x-kubernetes-patch-strategy` containing `merge`; its keys are
  `x-kubernetes-list-map-keys` when that list contains `x-kubernetes-patch-merge-key`
  (composite keys, e.g. `containerPort` + `protocol`), else the merge key alone. A list
  with the strategy and no key is a list of primitives merged as a set (`finalizers`).
- custom resources: the CRD schemas vendored in tests/fixtures/crds (and its
  `cacppt-v1beta2-contract`; tests/fixtures/crds/SOURCES.md names their upstream): a list with `x-kubernetes-list-type: map` merges by its
  `x-kubernetes-list-map-keys`.

Usage: python3 tools/merge-keys.py [--check]   (run from the repository root; --check
compares with the committed file and exits 1 when it differs). Needs PyYAML and
kubernetes-validate (pip install kubernetes-validate pyyaml).
"""
import glob
import json
import os
import sys

import yaml

K8S = "v1.34.0"
OUT = "src/overlay/merge_keys.rs"
CRD_DIRS = ["tests/fixtures/crds", "tests/fixtures/crds/cacppt-v1beta2-contract"]


def definitions_path():
    import kubernetes_validate  # noqa: PLC0415

    base = os.path.dirname(kubernetes_validate.__file__)
    return os.path.join(base, "kubernetes-json-schema", f"{K8S}-local", "_definitions.json")


class Graph:
    """Nodes are tuples of fields (name, keys or None, is_merge, child node or -1)."""

    def __init__(self):
        self.nodes = []
        self.index = {}

    def intern(self, fields):
        fields = tuple(sorted(fields))
        if not fields:
            return -1
        if fields not in self.index:
            self.index[fields] = len(self.nodes)
            self.nodes.append(fields)
        return self.index[fields]


def builtins(graph):
    path = definitions_path()
    with open(path) as f:
        doc = json.load(f)
    defs = doc["$defs"]
    memo = {}

    def ref_of(prop):
        r = prop.get("$ref")
        if r is None:
            for sub in prop.get("allOf", []) + prop.get("anyOf", []) + prop.get("oneOf", []):
                r = sub.get("$ref") or r
        return r.split("/")[-1] if r else None

    def node(name):
        if name in memo:
            return memo[name]
        memo[name] = -1  # recursion (JSONSchemaProps) contributes nothing
        fields = []
        for fname, prop in sorted(defs[name].get("properties", {}).items()):
            strategy = prop.get("x-kubernetes-patch-strategy", "")
            types = prop.get("type", [])
            types = types if isinstance(types, list) else [types]
            if "array" in types:
                item = prop.get("items", {})
                child = node(ref_of(item)) if ref_of(item) else -1
                if "merge" in strategy.split(","):
                    key = prop.get("x-kubernetes-patch-merge-key")
                    if key is None:
                        keys = ()
                    else:
                        lmk = prop.get("x-kubernetes-list-map-keys") or []
                        keys = tuple(lmk) if key in lmk else (key,)
                        if key in lmk:
                            keys = (key,) + tuple(k for k in lmk if k != key)
                    fields.append((fname, keys, True, child))
                elif child != -1:
                    fields.append((fname, None, False, child))
            else:
                r = ref_of(prop)
                child = node(r) if r else -1
                if child != -1:
                    fields.append((fname, None, False, child))
        memo[name] = graph.intern(fields)
        return memo[name]

    kinds = []
    for name in sorted(defs):
        for gvk in defs[name].get("x-kubernetes-group-version-kind", []):
            if gvk["kind"].endswith("List") or gvk["kind"] in ("DeleteOptions", "WatchEvent", "Status"):
                continue
            n = node(name)
            if n != -1:
                kinds.append((gvk["group"], gvk["version"], gvk["kind"], n))
    return path, sorted(set(kinds))


def crds(graph):
    kinds, sources = [], []

    def walk(schema):
        fields = []
        for fname, prop in sorted((schema.get("properties") or {}).items()):
            if prop.get("type") == "array":
                item = prop.get("items") or {}
                child = walk(item) if item.get("type") == "object" else -1
                if prop.get("x-kubernetes-list-type") == "map" and prop.get("x-kubernetes-list-map-keys"):
                    fields.append((fname, tuple(prop["x-kubernetes-list-map-keys"]), True, child))
                elif child != -1:
                    fields.append((fname, None, False, child))
            elif prop.get("type") == "object" or "properties" in prop:
                child = walk(prop)
                if child != -1:
                    fields.append((fname, None, False, child))
        return graph.intern(fields)

    for d in CRD_DIRS:
        for path in sorted(glob.glob(os.path.join(d, "*.yaml"))):
            with open(path) as f:
                for doc in yaml.safe_load_all(f):
                    if not doc or doc.get("kind") != "CustomResourceDefinition":
                        continue
                    sources.append(path)
                    spec = doc["spec"]
                    for v in spec["versions"]:
                        schema = (v.get("schema") or {}).get("openAPIV3Schema") or {}
                        n = walk(schema)
                        if n != -1:
                            kinds.append((spec["group"], v["name"], spec["names"]["kind"], n))
    return sources, sorted(set(kinds))


def rust_str(s):
    return json.dumps(s)


def render():
    graph = Graph()
    defs_path, builtin_kinds = builtins(graph)
    crd_sources, crd_kinds = crds(graph)
    out = []
    out.append("//! Which lists a strategic patch merges, and by which keys (generated by")
    out.append("//! `tools/merge-keys.py`; do not edit). Built-in kinds: Kubernetes " + K8S + "'s")
    out.append("//! `x-kubernetes-patch-strategy: merge` and `x-kubernetes-patch-merge-key` (with the")
    out.append("//! `x-kubernetes-list-map-keys` that extend the merge key, e.g. `containerPort` +")
    out.append("//! `protocol`), from the OpenAPI definitions vendored by the PyPI package")
    out.append("//! `kubernetes-validate` (`" + "/".join(defs_path.split("/")[-3:]) + "`). Custom resources:")
    out.append("//! `x-kubernetes-list-type: map` with its `x-kubernetes-list-map-keys`, from")
    for s in crd_sources:
        out.append("//! - `" + s + "`")
    out.append("//!")
    out.append("//! A node is a type, as the fields below it that merge lists or lead to such fields.")
    out.append("")
    out.append("use super::strategic::Field;")
    out.append("")
    out.append("/// (group, version, kind, node of the object).")
    out.append("pub(super) static KINDS: &[(&str, &str, &str, u16)] = &[")
    for g, v, k, n in builtin_kinds + crd_kinds:
        out.append(f"    ({rust_str(g)}, {rust_str(v)}, {rust_str(k)}, {n}),")
    out.append("];")
    out.append("")
    out.append("/// The nodes; fields sorted by name.")
    out.append("pub(super) static NODES: &[&[Field]] = &[")
    for i, fields in enumerate(graph.nodes):
        out.append(f"    // {i}")
        out.append("    &[")
        for name, keys, merge, child in fields:
            k = "None" if not merge else "Some(&[" + ", ".join(rust_str(x) for x in keys) + "])"
            c = "None" if child == -1 else f"Some({child})"
            out.append(f"        Field {{ name: {rust_str(name)}, merge: {k}, node: {c} }},")
        out.append("    ],")
    out.append("];")
    return "\n".join(out) + "\n"


def main():
    text = render()
    if "--check" in sys.argv:
        with open(OUT) as f:
            if f.read() != text:
                print(f"{OUT} differs from what tools/merge-keys.py generates; run it", file=sys.stderr)
                sys.exit(1)
        print(f"{OUT} is up to date")
        return
    with open(OUT, "w") as f:
        f.write(text)
    print(f"wrote {OUT}: {text.count(chr(10))} lines")


if __name__ == "__main__":
    main()
