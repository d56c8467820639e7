#!/usr/bin/env bash
# arm64 for real: builds `report-format`, `handler` and `crash-tests` for aarch64-unknown-linux-gnu with Debian's
# toolchain and runs their tests under qemu-user (../shared/docs/toolchain.md §2), in two passes:
#   1. plain (frame pointers forced): `cargo test -p report-format -p handler -p crash-tests`, the frame oracle
#      (`crash-tests --test oracle`: gdb-multiarch through qemu's gdb stub, against an aarch64 `libreporter.a` built
#      here first) and the C++ client (`crash-tests --test cxx_client`, the same library) included; the crash
#      matrix's panic = "abort" cases run a crash client built here first under the `panic-abort` profile;
#   2. pointer authentication: the crash client (std and handler included) built with
#      `-Zbranch-protection=pac-ret`, so every saved return address in a frame record is signed; the crash matrix
#      (`crash-tests --test crashes`) runs against it, and the PAC probe (`crash-tests --test pac`, built the same
#      way) insists the return addresses really are signed and strip like the CPU's `xpaclri`.
#
# Needs (this script installs nothing; .ci/run installs them):
#   apt-get install -y --no-install-recommends rustc-web cargo-web rust-web-src gcc-aarch64-linux-gnu \
#     g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user gdb-multiarch
# (g++-aarch64-linux-gnu builds the C++ library of the crash matrix's uncaught-exception cases.)
# gdb-multiarch is the frame oracle's: without it the oracle's cases skip (with the reason printed here), and fail
# when CI is set.
# Never `rustup target add`: std is built from rust-web-src with -Zbuild-std.
#
# Usage: scripts/test-arm64.sh
# Environment:
#   ARM64_TARGET_DIR      target dir of pass 1 (default <repo>/target/arm64)
#   ARM64_PAC_TARGET_DIR  target dir of pass 2 (default <repo>/target/arm64-pac)
#   ARM64_PASSES          "plain pac" (default), or one of them (the pac pass's matrix harness is the plain
#                         build in ARM64_TARGET_DIR, built if missing)
# Exits non-zero when anything fails. From clean target dirs on 2 cores: ~4.5 min plain (mostly building std and
# the three packages) plus ~1.3 min for the oracle's libreporter.a (rustls and ring included), ~2.7 min pac; with
# warm target dirs ~3.5 min plain (the frame oracle's 15 cases ~45 s of it) and ~2.7 min pac, nearly all of it
# tests under emulation.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
plain_dir="${ARM64_TARGET_DIR:-$repo/target/arm64}"
pac_dir="${ARM64_PAC_TARGET_DIR:-$repo/target/arm64-pac}"
passes="${ARM64_PASSES:-plain pac}"
target=aarch64-unknown-linux-gnu

# Debian's compiler (ships the std source), not rustup's proxies in ~/.cargo/bin.
export PATH="/usr/bin:$PATH"
export RUSTC=/usr/bin/rustc
# -Zbuild-std and -Zbranch-protection are unstable; allowed for these cross-target runs only.
export RUSTC_BOOTSTRAP=1
unset RUSTC_WRAPPER RUSTFLAGS CARGO_BUILD_RUSTFLAGS CARGO_ENCODED_RUSTFLAGS CARGO_TARGET_DIR CRASH_TESTS_RUNNER
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
# LD_LIBRARY_PATH pinned to the cross glibc: mixing it with a multiarch arm64 glibc makes test binaries hang.
runner="qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib"
export CARGO_TERM_PROGRESS_WHEN=never

for tool in /usr/bin/cargo /usr/bin/rustc aarch64-linux-gnu-gcc aarch64-linux-gnu-g++ qemu-aarch64; do
  if ! command -v "$tool" >/dev/null; then
    echo "test-arm64: $tool missing; install rustc-web cargo-web rust-web-src gcc-aarch64-linux-gnu" \
         "g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user" >&2
    exit 2
  fi
done
for path in /usr/lib/rustlib/src/rust/library /usr/aarch64-linux-gnu/lib; do
  if [ ! -d "$path" ]; then
    echo "test-arm64: $path missing; install rust-web-src and libc6-dev-arm64-cross" >&2
    exit 2
  fi
done

cd "$repo"
status=0

plain_flags="-C force-frame-pointers=yes"
pac_flags="-C force-frame-pointers=yes -Zbranch-protection=pac-ret"
# qemu's CPU for pac-ret code: its default ("max") computes PACs with QARMA5 in software, which makes every signed
# call slow (the whole matrix took ~3x longer); `pauth-impdef=on` keeps real signing, authentication and the same
# bit layout with qemu's cheap implementation-defined algorithm.
pac_cpu="max,pauth-impdef=on"

# aarch64 <target dir> <rustflags> <qemu cpu or ""> <cargo subcommand and arguments...>
aarch64() {
  local dir="$1" flags="$2" cpu="$3"
  shift 3
  # The target-specific RUSTFLAGS replace .cargo/config.toml's [build] rustflags: frame pointers are repeated here.
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="$flags" \
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$runner${cpu:+ -cpu $cpu}" \
    /usr/bin/cargo "$1" --locked -Zbuild-std=std,panic_abort --target "$target" --target-dir "$dir" "${@:2}"
}

# step <name> <command...>: runs one step, reports its time, records a failure and goes on.
step() {
  local name="$1" start
  shift
  start=$(date +%s)
  echo "==> test-arm64 [$name]"
  if "$@"; then
    echo "==> test-arm64 [$name]: ok ($(( $(date +%s) - start )) s)"
  else
    echo "==> test-arm64 [$name]: FAILED ($(( $(date +%s) - start )) s)" >&2
    status=1
  fi
}

# The pac-ret client must really contain signing instructions (else pass 2 would silently test unsigned code).
client_is_signed() {
  local n
  n=$(aarch64-linux-gnu-objdump -d --no-show-raw-insn "$1" | grep -c -w paciasp || true)
  echo "test-arm64: $n functions of $1 sign their return address (paciasp)"
  [ "$n" -gt 100 ]
}

# Whether CI is set (a missing oracle tool is a failure there, a skip elsewhere; tests/tests/oracle.rs decides the
# same way).
ci() { [ -n "${CI:-}" ] && [ "${CI}" != "false" ] && [ "${CI}" != "0" ]; }

# The frame oracle's summary (tests/tests/oracle.rs writes a line per case to ORACLE_SUMMARY): how many cases
# compared frames with gdb's. Passing tests' output is not shown, so this is where a run says it really compared.
oracle_summary() {
  local file="$1" passed skipped
  passed=$(grep -c '^PASS ' "$file" 2>/dev/null || true)
  skipped=$(grep -c '^SKIPPED ' "$file" 2>/dev/null || true)
  [ -f "$file" ] && sed 's/^/  /' "$file"
  echo "test-arm64: frame oracle: ${passed:-0} cases compared every thread's frames with gdb's (aarch64, under" \
       "qemu-user), ${skipped:-0} skipped"
  if command -v gdb-multiarch >/dev/null && [ "${passed:-0}" -eq 0 ]; then
    echo "test-arm64: gdb-multiarch is installed but no oracle case compared frames" >&2
    return 1
  fi
}

pac_client="$pac_dir/$target/debug/crash-client"
for pass in $passes; do
  case "$pass" in
    plain)
      # The frame oracle's C clients link the reporter's static library through its C ABI; Cargo builds no
      # staticlib for a dependency, and a build inside the running `cargo test` would wait for its lock.
      step "plain: build libreporter.a (aarch64) for the frame oracle" \
        aarch64 "$plain_dir" "$plain_flags" "" build -p reporter --lib
      export ORACLE_STATICLIB="$plain_dir/$target/debug/libreporter.a"
      # The crash matrix's panic = "abort" client (tests/crashes.rs): the crash client under the `panic-abort`
      # profile (root Cargo.toml), whose std is then built with panic=abort too; its own directory under the
      # profile's name, so the plain build of the same binary stays.
      step "plain: build the panic = \"abort\" crash client (aarch64)" \
        aarch64 "$plain_dir" "$plain_flags" "" build --profile panic-abort -p crash-tests --bin crash-client
      export CRASH_TESTS_PANIC_ABORT_CLIENT="$plain_dir/$target/panic-abort/crash-client"
      if ! command -v gdb-multiarch >/dev/null; then
        if ci; then
          echo "test-arm64: gdb-multiarch missing (CI is set): the frame oracle cannot run; apt-get install" \
               "gdb-multiarch" >&2
          status=1
        else
          echo "test-arm64: gdb-multiarch missing: the frame oracle's cases skip (apt-get install gdb-multiarch)"
        fi
      fi
      export ORACLE_SUMMARY="$plain_dir/oracle-summary.txt"
      rm -f "$ORACLE_SUMMARY"
      # Everything of the three packages, frame pointers forced. tests/pac.rs: return addresses must be unsigned.
      export CRASH_TESTS_EXPECT_PAC=0
      step "plain: cargo test -p report-format -p handler -p crash-tests" \
        aarch64 "$plain_dir" "$plain_flags" "" test -p report-format -p handler -p crash-tests
      step "plain: the frame oracle ran" oracle_summary "$ORACLE_SUMMARY"
      unset ORACLE_SUMMARY ORACLE_STATICLIB CRASH_TESTS_PANIC_ABORT_CLIENT
      ;;
    pac)
      # pac-ret: every function that saves x30 signs it (paciasp) before storing it in its frame record, std and
      # the handler included, so the crash handler's walker reads signed return addresses and must strip them.
      step "pac: build the crash client with pac-ret" \
        aarch64 "$pac_dir" "$pac_flags" "$pac_cpu" build -p crash-tests --bin crash-client
      step "pac: the client signs return addresses" client_is_signed "$pac_client"
      # Live probe: signed values in this thread's own frame records, stripped like the CPU's xpaclri.
      export CRASH_TESTS_EXPECT_PAC=1
      step "pac: tests/pac.rs (pac-ret build)" \
        aarch64 "$pac_dir" "$pac_flags" "$pac_cpu" test -p crash-tests --test pac -- --nocapture
      # The crash matrix against the pac-ret client. The harness itself is the plain build (pac-ret code is slow to
      # emulate and the harness's own return addresses do not matter): CRASH_TESTS_CLIENT picks the client, whose
      # DWARF and build id the matrix then checks the reports against.
      export CRASH_TESTS_CLIENT="$pac_client"
      # The matrix's panic = "abort" case runs the plain pass's panic-abort client (built here if missing).
      step "pac: build the panic = \"abort\" crash client (plain flags)" \
        aarch64 "$plain_dir" "$plain_flags" "" build --profile panic-abort -p crash-tests --bin crash-client
      export CRASH_TESTS_PANIC_ABORT_CLIENT="$plain_dir/$target/panic-abort/crash-client"
      step "pac: crash matrix against the pac-ret client" \
        aarch64 "$plain_dir" "$plain_flags" "$pac_cpu" test -p crash-tests --test crashes
      unset CRASH_TESTS_CLIENT CRASH_TESTS_PANIC_ABORT_CLIENT
      ;;
    *)
      echo "test-arm64: unknown pass '$pass' (plain, pac)" >&2
      exit 2
      ;;
  esac
done
exit "$status"
