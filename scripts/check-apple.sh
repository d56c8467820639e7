#!/usr/bin/env bash
# Apple type-check and lint: `cargo clippy -D warnings` (all targets: libraries, binaries, tests, benches) for every
# Apple target we ship to. Nothing is linked and nothing runs: Darwin code is type-checked only.
# - macOS targets: the whole workspace (the viewer and the collector also run on an engineer's Mac).
# - iOS targets (device and simulators): the crates that ship inside an app, report-format, handler and reporter;
#   the viewer, collector, bench and crash tests never run on iOS, and their dependency tree (HTTP server, SQL
#   drivers) was most of each iOS target's time.
#
# Needs Debian's Rust toolchain, which ships the standard library's source so `-Zbuild-std` can build `std` for the
# Apple targets (see ../shared/docs/toolchain.md §1). This script installs nothing; in CI, .ci/run first does
#   apt-get install -y --no-install-recommends rustc-web cargo-web rust-web-src rust-web-clippy
# (rustc-web: /usr/bin/rustc, cargo-web: /usr/bin/cargo, rust-web-src: /usr/lib/rustlib/src/rust/library,
#  rust-web-clippy: /usr/bin/cargo-clippy + clippy-driver). Never `rustup target add`.
#
# Usage: scripts/check-apple.sh [target ...]      (default: all five Apple targets below; .ci/run also passes
#        aarch64-unknown-linux-gnu and aarch64-linux-android)
# Environment:
#   APPLE_TARGET_DIR   cargo target dir for these builds (default: <repo>/target/apple, kept apart from the host
#                      build because it is built by a different compiler with -Zbuild-std)
#   CHECK_APPLE_EXCLUDE  space-separated workspace packages left out (default: none). Crates whose dependencies build
#                      C or C++ with cc-rs cannot be checked here (cc-rs asks `xcrun` for the Apple SDK); such
#                      features are gated to non-Apple targets instead (viewer's Swift demangler, reporter's TLS).
# The first run per target builds std (~45 s, ~220 MB each); later runs take seconds.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${APPLE_TARGET_DIR:-$repo/target/apple}"

# Debian's compiler, not rustup's proxies in ~/.cargo/bin: rustup's stable rustc cannot build the 1.96 std source.
export PATH="/usr/bin:$PATH"
export RUSTC=/usr/bin/rustc
# -Zbuild-std is unstable; allow it on this stable compiler for these cross-target checks only.
export RUSTC_BOOTSTRAP=1
unset RUSTC_WRAPPER RUSTFLAGS CARGO_BUILD_RUSTFLAGS CARGO_ENCODED_RUSTFLAGS
# Marks this cross type-check for Cargo's target tables: the viewer then leaves out the Swift demangler, whose C++
# build needs xcrun (viewer/Cargo.toml). Native builds on a Mac do not set it.
export RUSTFLAGS="--cfg apple_cross_check"

for tool in /usr/bin/cargo /usr/bin/rustc /usr/bin/cargo-clippy; do
  if [ ! -x "$tool" ]; then
    echo "check-apple: $tool missing; install rustc-web cargo-web rust-web-src rust-web-clippy" >&2
    exit 2
  fi
done
if [ ! -d /usr/lib/rustlib/src/rust/library ]; then
  echo "check-apple: std source missing (/usr/lib/rustlib/src/rust/library); install rust-web-src" >&2
  exit 2
fi

if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  targets=(aarch64-apple-ios aarch64-apple-ios-sim x86_64-apple-ios aarch64-apple-darwin x86_64-apple-darwin)
fi

exclude_args=()
for p in ${CHECK_APPLE_EXCLUDE-}; do
  exclude_args+=(--exclude "$p")
done
[ "${#exclude_args[@]}" -gt 0 ] && echo "check-apple: not checked: ${CHECK_APPLE_EXCLUDE-}"

cd "$repo"
status=0
for t in "${targets[@]}"; do
  echo "==> check-apple: clippy --target $t (type-check only, nothing runs)"
  start=$(date +%s)
  case "$t" in
    *-apple-ios*) scope=(-p report-format -p handler -p reporter) ;;
    # Android (.ci/run: aarch64-linux-android; type-checked only, nothing links): the handler. The reporter's TLS
    # crate builds C with the NDK's clang, which Debian does not have.
    *-linux-android*) scope=(-p handler) ;;
    # Other targets given on the command line (.ci/run: aarch64 Linux, for the crash path's arm64 code): the crates
    # with target-specific code, and the crash tests.
    *-linux-*) scope=(-p report-format -p handler -p reporter -p crash-tests) ;;
    *) scope=(--workspace ${exclude_args[@]+"${exclude_args[@]}"}) ;;
  esac
  echo "==> check-apple: $t: ${scope[*]}"
  if /usr/bin/cargo clippy -Zbuild-std=std,panic_abort --target "$t" --target-dir "$target_dir" \
      "${scope[@]}" --all-targets -- -D warnings; then
    echo "==> check-apple: $t ok ($(( $(date +%s) - start )) s)"
  else
    echo "==> check-apple: $t FAILED ($(( $(date +%s) - start )) s)" >&2
    status=1
  fi
done
exit "$status"
