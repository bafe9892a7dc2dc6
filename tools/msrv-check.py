#!/usr/bin/env python3
"""Checks that capstan builds with its declared rust-version, as far as this machine can
tell without that toolchain (rustup here cannot fetch another one): no package of the locked
dependency graph, with every feature, declares a newer rust-version than Cargo.toml does.
clippy holds capstan's own use of the standard library to the same version (its
`incompatible_msrv` lint reads rust-version; `.ci/run` denies clippy's warnings). The
Dockerfile's `FROM rust:<rust-version>-…` build is the full check, on a machine that can pull it.
"""

import json
import re
import subprocess
import sys


def version(v):
    return tuple(int(p) for p in re.findall(r"\d+", v)[:3]) + (0,) * (3 - len(re.findall(r"\d+", v)[:3]))


def main():
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--locked", "--all-features", "--format-version", "1"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    root = next(p for p in meta["packages"] if p["id"] == meta["resolve"]["root"])
    ours = root.get("rust_version")
    if not ours:
        print("Cargo.toml declares no rust-version")
        return 1
    used = {n["id"] for n in meta["resolve"]["nodes"]}
    newer = sorted(
        f'{p["name"]} {p["version"]} needs Rust {p["rust_version"]}'
        for p in meta["packages"]
        if p["id"] in used and p.get("rust_version") and version(p["rust_version"]) > version(ours)
    )
    if newer:
        print(f"rust-version is {ours}, but:")
        for n in newer:
            print(f"  {n}")
        print("raise rust-version (and the Dockerfile's FROM rust:…), or pin an older release")
        return 1
    declared = sum(1 for p in meta["packages"] if p["id"] in used and p.get("rust_version"))
    print(f"rust-version {ours}: {declared} of {len(used)} packages declare one, none newer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
