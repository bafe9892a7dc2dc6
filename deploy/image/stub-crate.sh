#!/bin/sh
# Writes a stub of capstan's crate (every target Cargo.toml declares, each empty) beside the
# real Cargo.toml and Cargo.lock, so that deploy/image/Dockerfile builds the ~340 dependencies
# in a layer of their own: a source change then rebuilds capstan alone. .ci/run builds the
# stub with --locked, so a target added to Cargo.toml without a stub here fails CI.
set -eu
mkdir -p src tests
printf 'fn main() {}\n' > src/main.rs
printf '//! stub\n' > src/lib.rs
printf '//! stub\n' > tests/tests.rs
printf 'fn main() {}\n' > build.rs
