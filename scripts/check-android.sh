#!/usr/bin/env bash
# Android type-check and lint: `cargo clippy -D warnings` (all targets) of the handler (report-format, its
# dependency, is type-checked with it; its own tests are left out: Debian's newer clippy flags their
# thread_local initializers, not Android code) for aarch64-linux-android and x86_64-linux-android. The
# Linux backend serves Android (bionic). Nothing is linked and nothing runs: Android is type-checked only (no NDK
# here). The reporter is not checked: its TLS dependency (ring) builds C with the NDK's clang.
#
# Needs Debian's Rust toolchain with the standard library's source for -Zbuild-std, the same packages as
# scripts/check-apple.sh (../shared/docs/toolchain.md §1); in CI, .ci/run installs them:
#   apt-get install -y --no-install-recommends rustc-web cargo-web rust-web-src rust-web-clippy
# Never `rustup target add`.
#
# Usage: scripts/check-android.sh [target ...]      (default: the two 64-bit Android targets)
# Environment: ANDROID_TARGET_DIR  cargo target dir (default: <repo>/target/android)
# The first run per target builds std (~3 min here); later runs take seconds.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${ANDROID_TARGET_DIR:-$repo/target/android}"

export PATH="/usr/bin:$PATH"
export RUSTC=/usr/bin/rustc
# -Zbuild-std is unstable; allow it on this stable compiler for these cross-target checks only.
export RUSTC_BOOTSTRAP=1
unset RUSTC_WRAPPER RUSTFLAGS CARGO_BUILD_RUSTFLAGS CARGO_ENCODED_RUSTFLAGS

for tool in /usr/bin/cargo /usr/bin/rustc /usr/bin/cargo-clippy; do
  if [ ! -x "$tool" ]; then
    echo "check-android: $tool missing; install rustc-web cargo-web rust-web-src rust-web-clippy" >&2
    exit 2
  fi
done
if [ ! -d /usr/lib/rustlib/src/rust/library ]; then
  echo "check-android: std source missing (/usr/lib/rustlib/src/rust/library); install rust-web-src" >&2
  exit 2
fi

if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  targets=(aarch64-linux-android x86_64-linux-android)
fi

cd "$repo"
status=0
for t in "${targets[@]}"; do
  echo "==> check-android: clippy --target $t -p handler (type-check only, nothing runs)"
  start=$(date +%s)
  if /usr/bin/cargo clippy -Zbuild-std=std,panic_abort --target "$t" --target-dir "$target_dir" \
      -p handler --all-targets -- -D warnings; then
    echo "==> check-android: $t ok ($(( $(date +%s) - start )) s)"
  else
    echo "==> check-android: $t FAILED ($(( $(date +%s) - start )) s)" >&2
    status=1
  fi
done
exit "$status"
