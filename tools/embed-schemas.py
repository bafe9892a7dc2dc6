#!/usr/bin/env python3
"""Generate src/schema/embedded.json: the schemas `capstan validate` embeds, so that it
needs no `--crds` for the provider releases capstan pins and validates the built-in kinds it
renders.

Inputs (each recorded in the output's "sources"):
- CRDs: the controller-gen bases vendored in tests/fixtures/crds (tests/fixtures/crds/SOURCES.md
  names each file's upstream tag, commit and path), in two sets:
  - "v1beta1": the releases src/inputs/providers.rs pins for the flavour v1beta1 (Cluster API
    v1.10.10, CABPT v0.6.12, CACPPT v0.5.12, CAPV v1.13.1, in-cluster IPAM v1.0.3);
  - "v1beta2": the releases of the CAPI v1beta2 contract the fixtures hold (Cluster API v1.14.0,
    CABPT v0.7.0-alpha.2, the CACPPT fork neticdk@33d812b, CAPV v1.16.1, IPAM v1.0.3); the
    flavour v1beta2 has no verified release (providers.rs `verified`).
- Built-in kinds: the Kubernetes OpenAPI schemas as the PyPI package `kubernetes-validate`
  vendors them (`kubernetes_validate/kubernetes-json-schema/vX.Y.0-local-strict/`, JSON Schema
  2020-12 generated from kubernetes/kubernetes api/openapi-spec, every `$ref` local to its
  `_definitions.json`, every object `additionalProperties: false`), for the kinds capstan
  renders (KINDS) and the Kubernetes minors it supports (MINORS: the union of the Talos
  support table, src/model/mod.rs TALOS_SUPPORT).

Only what validation reads is kept (src/schema/mod.rs): descriptions, defaults, CEL rules
(`x-kubernetes-validations`, not evaluated) and other annotations are dropped; a CRD's
top-level `metadata` schema is replaced by `{"type": "object"}` (the validator checks
ObjectMeta itself). The JSON Schemas are turned into the CRD schema dialect: `type: [T,
"null"]` becomes `type: T, nullable: true`; IntOrString (`oneOf` string / integer) becomes
`x-kubernetes-int-or-string`; `$ref`s are inlined; `additionalProperties: false` next to
`properties` is dropped (declared properties already refuse unknown fields); an object with
neither accepts any field (`x-kubernetes-preserve-unknown-fields`). Identical schemas are
stored once, shared by versions and minors: every sub-schema of 256 bytes or more sits once
in "schemas" and is referenced as `{"$s": index}` wherever it occurs.

Usage: python3 tools/embed-schemas.py [--check]   (from the repository root; --check compares
with the committed file and exits 1 when it differs). Needs PyYAML and kubernetes-validate
(pip install kubernetes-validate pyyaml); the output does not depend on where they are.
"""
import json
import os
import sys

import yaml

OUT = "src/schema/embedded.json"
CRDS = "tests/fixtures/crds"

# (set name, [(provider inventory name, release, [CRD files])])
CRD_SETS = [
    (
        "v1beta1",
        [
            ("cluster-api", "v1.10.10", [
                "pinned/cluster.x-k8s.io_clusters.yaml",
                "pinned/cluster.x-k8s.io_machinedeployments.yaml",
                "pinned/cluster.x-k8s.io_machinehealthchecks.yaml",
            ]),
            ("bootstrap-talos", "v0.6.12", [
                "pinned/bootstrap.cluster.x-k8s.io_talosconfigs.yaml",
                "pinned/bootstrap.cluster.x-k8s.io_talosconfigtemplates.yaml",
            ]),
            ("control-plane-talos", "v0.5.12", [
                "controlplane.cluster.x-k8s.io_taloscontrolplanes.yaml",
            ]),
            ("infrastructure-vsphere", "v1.13.1", [
                "pinned/infrastructure.cluster.x-k8s.io_vsphereclusters.yaml",
                "pinned/infrastructure.cluster.x-k8s.io_vspheremachinetemplates.yaml",
            ]),
            ("ipam-in-cluster", "v1.0.3", [
                "ipam.cluster.x-k8s.io_inclusterippools.yaml",
            ]),
        ],
    ),
    (
        "v1beta2",
        [
            ("cluster-api", "v1.14.0", [
                "cluster.x-k8s.io_clusters.yaml",
                "cluster.x-k8s.io_machinedeployments.yaml",
                "cluster.x-k8s.io_machinehealthchecks.yaml",
            ]),
            ("bootstrap-talos", "v0.7.0-alpha.2", [
                "bootstrap.cluster.x-k8s.io_talosconfigs.yaml",
                "bootstrap.cluster.x-k8s.io_talosconfigtemplates.yaml",
            ]),
            ("control-plane-talos", "neticdk@33d812b", [
                "cacppt-v1beta2-contract/controlplane.cluster.x-k8s.io_taloscontrolplanes.yaml",
                "cacppt-v1beta2-contract/controlplane.cluster.x-k8s.io_taloscontrolplanetemplates.yaml",
            ]),
            ("infrastructure-vsphere", "v1.16.1", [
                "infrastructure.cluster.x-k8s.io_vsphereclusters.yaml",
                "infrastructure.cluster.x-k8s.io_vspheremachinetemplates.yaml",
            ]),
            ("ipam-in-cluster", "v1.0.3", [
                "ipam.cluster.x-k8s.io_inclusterippools.yaml",
            ]),
        ],
    ),
]

# The built-in kinds capstan renders (templates/ and src/: the guard policies and their
# bindings, the phase Jobs and their RBAC, sealed Secrets) and the two an overlay most often
# adds (ConfigMap, Namespace): (file stem in kubernetes-validate, apiVersion, kind).
KINDS = [
    ("validatingadmissionpolicy-admissionregistration-v1", "admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
    ("validatingadmissionpolicybinding-admissionregistration-v1", "admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
    ("job-batch-v1", "batch/v1", "Job"),
    ("role-rbac-v1", "rbac.authorization.k8s.io/v1", "Role"),
    ("rolebinding-rbac-v1", "rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("clusterrole-rbac-v1", "rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("clusterrolebinding-rbac-v1", "rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("serviceaccount-v1", "v1", "ServiceAccount"),
    ("secret-v1", "v1", "Secret"),
    ("configmap-v1", "v1", "ConfigMap"),
    ("namespace-v1", "v1", "Namespace"),
]
MINORS = list(range(26, 38))
# Sub-schemas this large (bytes of minified JSON) or larger are stored once and referenced.
SHARED_MIN = 256  # Kubernetes v1.26 .. v1.37

# The keywords src/schema/mod.rs reads; everything else is dropped.
KEEP = {
    "type", "nullable", "properties", "required", "additionalProperties", "items", "enum",
    "pattern", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "minItems", "maxItems", "uniqueItems", "minProperties",
    "maxProperties", "format", "anyOf", "allOf", "oneOf", "not",
    "x-kubernetes-int-or-string", "x-kubernetes-embedded-resource",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
}


def strip(node):
    """A CRD schema with only the keywords the validator reads."""
    out = {}
    for k, v in node.items():
        if k not in KEEP:
            continue
        if k == "properties":
            out[k] = {name: strip(s) for name, s in v.items()}
        elif k in ("items", "not") or (k == "additionalProperties" and isinstance(v, dict)):
            out[k] = strip(v)
        elif k in ("anyOf", "allOf", "oneOf"):
            out[k] = [strip(s) for s in v]
        else:
            out[k] = v
    return out


def kubernetes_dir():
    import kubernetes_validate  # noqa: PLC0415

    return os.path.join(os.path.dirname(kubernetes_validate.__file__), "kubernetes-json-schema")


class Builtins:
    """One Kubernetes minor's definitions, turned into the CRD schema dialect."""

    def __init__(self, minor):
        self.dir = os.path.join(kubernetes_dir(), f"v1.{minor}.0-local-strict")
        with open(os.path.join(self.dir, "_definitions.json")) as f:
            self.defs = json.load(f)["$defs"]

    def kind(self, stem):
        path = os.path.join(self.dir, stem + ".json")
        if not os.path.exists(path):
            return None  # the kind is not served in this minor (e.g. VAP v1 before 1.30)
        with open(path) as f:
            root = self.convert(json.load(f), ())
        props = root.get("properties", {})
        if "metadata" in props:
            props["metadata"] = {"type": "object"}
        return root

    def convert(self, node, stack):
        ref = node.get("$ref")
        if ref is not None:
            # Local references only: into `_definitions.json` from a kind's file, or within it.
            prefix = next((p for p in REF_PREFIXES if ref.startswith(p)), None)
            if prefix is None:
                sys.exit(f"{self.dir}: a $ref that is not local: {ref}")
            name = ref[len(prefix):]
            if name in stack:
                sys.exit(f"{self.dir}: recursive definition {name}: cannot be inlined")
            return self.convert(self.defs[name], stack + (name,))
        one_of = node.get("oneOf")
        if one_of is not None:
            types = sorted(t for b in one_of for t in as_list(b.get("type")) if t != "null")
            nullable = any("null" in as_list(b.get("type")) for b in one_of)
            if types == ["integer", "string"] and len(one_of) == 2:
                out = {"x-kubernetes-int-or-string": True}
                if nullable:
                    out["nullable"] = True
                return out
        out = {}
        ty = node.get("type")
        if ty is not None:
            ts = [t for t in as_list(ty) if t != "null"]
            if len(ts) != 1:
                sys.exit(f"{self.dir}: a type the validator cannot express: {ty}")
            out["type"] = ts[0]
            if "null" in as_list(ty):
                out["nullable"] = True
        for k, v in node.items():
            if k in ("type", "$ref") or k not in KEEP:
                continue
            if k == "properties":
                out[k] = {name: self.convert(s, stack) for name, s in v.items()}
            elif k in ("items", "not") or (k == "additionalProperties" and isinstance(v, dict)):
                out[k] = self.convert(v, stack)
            elif k in ("anyOf", "allOf", "oneOf"):
                out[k] = [self.convert(s, stack) for s in v]
            else:
                out[k] = v
        if out.get("additionalProperties") is False and "properties" in out:
            del out["additionalProperties"]
        if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
            out["x-kubernetes-preserve-unknown-fields"] = True
        return out


REF_PREFIXES = ("/api/_definitions.json#/$defs/", "_definitions.json#/$defs/", "#/$defs/")


def as_list(t):
    if t is None:
        return []
    return t if isinstance(t, list) else [t]


def generate():
    schemas, index = [], {}

    def store(schema):
        key = json.dumps(schema, sort_keys=True, separators=(",", ":"))
        if key not in index:
            index[key] = len(schemas)
            schemas.append(schema)
        return index[key]

    def shared(node):
        """`node` with every sub-schema of SHARED_MIN bytes or more stored once and
        replaced by `{"$s": index}` (not a schema keyword: src/schema/embedded.rs
        expands it)."""
        out = {}
        for k, v in node.items():
            if k == "properties":
                out[k] = {name: shared(c) for name, c in v.items()}
            elif k in ("items", "not") or (k == "additionalProperties" and isinstance(v, dict)):
                out[k] = shared(v)
            elif k in ("anyOf", "allOf", "oneOf"):
                out[k] = [shared(c) for c in v]
            else:
                out[k] = v
        if len(json.dumps(out, separators=(",", ":"))) >= SHARED_MIN:
            return {"$s": store(out)}
        return out

    def intern(schema):
        ref = shared(schema)
        return ref["$s"] if "$s" in ref else store(ref)

    sets = []
    for name, providers in CRD_SETS:
        releases, crds = [], []
        for provider, release, files in providers:
            releases.append({"provider": provider, "release": release})
            for rel in files:
                path = os.path.join(CRDS, rel)
                with open(path) as f:
                    doc = yaml.safe_load(f)
                spec = doc["spec"]
                versions = []
                for v in spec["versions"]:
                    root = strip(v["schema"]["openAPIV3Schema"])
                    if "metadata" in root.get("properties", {}):
                        root["properties"]["metadata"] = {"type": "object"}
                    versions.append({"name": v["name"], "served": v["served"], "schema": intern(root)})
                crds.append({
                    "file": path,
                    "provider": provider,
                    "group": spec["group"],
                    "kind": spec["names"]["kind"],
                    "versions": versions,
                })
        sets.append({"name": name, "releases": releases, "crds": crds})

    minors = []
    for minor in MINORS:
        b = Builtins(minor)
        kinds = []
        for stem, api_version, kind in KINDS:
            root = b.kind(stem)
            if root is None:
                continue
            kinds.append({"apiVersion": api_version, "kind": kind, "schema": intern(root)})
        minors.append({"minor": minor, "kinds": kinds})

    import kubernetes_validate  # noqa: PLC0415

    kv = getattr(kubernetes_validate, "__version__", None)
    if kv is None:
        from importlib.metadata import version  # noqa: PLC0415

        kv = version("kubernetes-validate")
    doc = {
        "generatedBy": "tools/embed-schemas.py",
        "sources": {
            "crds": "tests/fixtures/crds (upstream tags, commits and paths: tests/fixtures/crds/SOURCES.md)",
            "kubernetes": f"PyPI kubernetes-validate {kv}, kubernetes-json-schema/v1.N.0-local-strict "
                          "(from kubernetes/kubernetes api/openapi-spec)",
        },
        "crdSets": sets,
        "kubernetes": minors,
        "schemas": schemas,
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n"


def main():
    text = generate()
    if "--check" in sys.argv[1:]:
        try:
            with open(OUT) as f:
                current = f.read()
        except FileNotFoundError:
            current = None
        if current != text:
            sys.exit(f"{OUT} is not what tools/embed-schemas.py generates: run python3 tools/embed-schemas.py")
        print(f"{OUT} is up to date")
        return
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write(text)
    print(f"wrote {OUT} ({len(text)} bytes)")


if __name__ == "__main__":
    main()
