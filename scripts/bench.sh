#!/usr/bin/env bash
# Benchmarks (BENCHMARKS.md): capture latency, report size, install cost, idle cost and viewer speed, against the
# peers (crash-handler + minidumper + minidump-writer, llvm-symbolizer), printed as Markdown tables on stdout
# (progress on stderr). Linux only. Then the collector's load benchmark (collector/examples/load_bench.rs): reports a
# second ingested over loopback HTTP with SQLite and PostgreSQL, and the groups page's p50/p99 with 100,000 stored
# reports (10,000 with --quick); PostgreSQL rows are skipped when it is not installed (.ci/run installs it).
#
# Builds `bench` (orchestrator, our crash children and probes), `bench-peer` (the peer's crash child and its
# minidumper server) and `viewer` in release mode, then runs `bench` with the arguments given:
#   scripts/bench.sh            full run: 20 crashes x 8/64/256 threads per reporter, 10 s idle window (~2-4 min)
#   scripts/bench.sh --quick    checks that every benchmark runs: 3 crashes x 8/64 threads, 1 s idle (~10 s once
#                               built; figures indicative only)
#   scripts/bench.sh --help     every option (--crashes, --threads, --depth, --libs, --idle-secs, --work DIR, ...)
#
# Needs (this script installs nothing; .ci/run installs what CI needs): cc (gcc), llvm-symbolizer (Debian package
# llvm). Exits non-zero when a benchmark cannot run or a crash is not captured as expected, never because of a
# figure: targets are reported as met / missed in the output.
# Environment: CARGO_TARGET_DIR (default <repo>/target), CARGO (default cargo).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
cargo="${CARGO:-cargo}"

if [[ "$(uname -s)" != Linux ]]; then
    echo "bench.sh: the benchmarks are Linux-only" >&2
    exit 0
fi
for tool in cc llvm-symbolizer; do
    if ! command -v "$tool" >/dev/null; then
        echo "bench.sh: $tool not found (apt-get install gcc llvm)" >&2
        exit 1
    fi
done

cd "$repo"
CARGO_TARGET_DIR="$target_dir" "$cargo" build --release --locked -p bench -p viewer --bins >&2
CARGO_TARGET_DIR="$target_dir" "$cargo" build --release --locked -p collector --example load_bench >&2
"$target_dir/release/bench" --viewer "$target_dir/release/viewer" "$@"
load_args=()
for a in "$@"; do
    case "$a" in
        --quick) load_args=(--quick) ;;
        --help|-h) exit 0 ;;
    esac
done
"$target_dir/release/examples/load_bench" "${load_args[@]}"
