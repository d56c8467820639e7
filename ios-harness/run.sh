#!/usr/bin/env bash
# The crash matrix on an iOS simulator (default) or a device, from a fresh checkout on a Mac:
#   1. builds RustCrashReporterC.xcframework (scripts/build-xcframework.sh) and the viewer (cargo build -p viewer);
#   2. generates CrashHarness.xcodeproj from project.yml (XcodeGen);
#   3. starts `viewer serve` on 127.0.0.1:8787 with an empty store;
#   4. runs the UI tests (xcodebuild test): every trigger crashes the app, the relaunch uploads the report;
#   5. checks every report with check_reports.py against the app's dSYM.
# Exit status 0 only when the UI tests and the report checks all pass. Output in ios-harness/build/.
#
# Usage: ios-harness/run.sh [options]
#   --simulator NAME|UDID   simulator to use (default: an available iPhone; booted if needed)
#   --device UDID           run on a connected device instead (needs --team and an https collector URL, see README)
#   --team TEAMID           DEVELOPMENT_TEAM for device signing
#   --bundle-id-prefix P    bundle id prefix for device runs (default com.example.crashreporter)
#   --collector-url URL     URL the app and the tests use (default: the local collector, http://127.0.0.1:8787/);
#                           the local collector's ingest token is added as its user part unless it has one
#   --only TRIGGER[,..]     run only these triggers (names as in Shared/HarnessTrigger.swift, e.g. badPointer)
#   --skip-build            reuse target/ios/RustCrashReporterC.xcframework and target/release/viewer
# Needs: macOS with Xcode 15+ (xcode-select -p pointing at it), Rust (rustup), XcodeGen (brew install xcodegen),
# python3 (ships with Xcode's command line tools).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
build="$here/build"
port=8787

simulator=""
device=""
team=""
bundle_prefix="com.example.crashreporter"
collector_url=""
only=""
skip_build=no
while [ "$#" -gt 0 ]; do
  case "$1" in
    --simulator) simulator="$2"; shift ;;
    --device) device="$2"; shift ;;
    --team) team="$2"; shift ;;
    --bundle-id-prefix) bundle_prefix="$2"; shift ;;
    --collector-url) collector_url="$2"; shift ;;
    --only) only="$2"; shift ;;
    --skip-build) skip_build=yes ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

log() { printf '\n==> run.sh: %s (%s)\n' "$*" "$(date +%H:%M:%S)"; }
die() { printf 'run.sh: %s\n' "$*" >&2; exit 1; }

[ "$(uname -s)" = Darwin ] || die "this needs a Mac with Xcode (see ios-harness/README.md)"
command -v xcodebuild >/dev/null || die "xcodebuild missing: install Xcode, then sudo xcode-select -s /Applications/Xcode.app"
command -v xcodegen >/dev/null || die "xcodegen missing: brew install xcodegen"
command -v cargo >/dev/null || die "cargo missing: install Rust from https://rustup.rs"
command -v python3 >/dev/null || die "python3 missing: xcode-select --install"
if [ -n "$device" ]; then
  [ -n "$team" ] || die "--device needs --team TEAMID (your Apple developer team, for signing)"
  case "$collector_url" in
    https://*) ;;
    *) die "--device needs --collector-url https://...: the phone cannot reach the Mac's 127.0.0.1, and the reporter sends plain http only to loopback (README: Running on a device)" ;;
  esac
fi
[ -n "$collector_url" ] || collector_url="http://127.0.0.1:$port/"

triggers=(swiftFatalError forceUnwrapNil arrayIndexOutOfRange nsException cppException abortCall abortWithReason badPointer
          stackOverflow backgroundQueue mallocLock)
only_testing=()
if [ -n "$only" ]; then
  IFS=',' read -r -a selected <<<"$only"
  for t in "${selected[@]}"; do
    case " ${triggers[*]} " in *" $t "*) ;; *) die "unknown trigger $t (one of: ${triggers[*]})" ;; esac
    # Test method names: test + the trigger name with its first letter upper-cased, except these three.
    case "$t" in
      nsException) m=testNSException ;;
      cppException) m=testCppException ;;
      abortCall) m=testAbort ;;
      *) m="test$(printf '%s' "${t:0:1}" | tr '[:lower:]' '[:upper:]')${t:1}" ;;
    esac
    only_testing+=("-only-testing:HarnessUITests/CrashMatrixUITests/$m")
  done
fi

mkdir -p "$build"
cd "$repo"

# 1. Reporter XCFramework and the viewer (collector and symbolicator) for this Mac.
if [ "$skip_build" = no ]; then
  log "building RustCrashReporterC.xcframework"
  bash scripts/build-xcframework.sh
  log "building the viewer"
  cargo build --locked --release -p viewer
fi
viewer="${CARGO_TARGET_DIR:-$repo/target}/release/viewer"
[ -x "$viewer" ] || die "no viewer at $viewer"
[ -d "$repo/target/ios/RustCrashReporterC.xcframework" ] || die "no target/ios/RustCrashReporterC.xcframework (drop --skip-build)"

# 2. Xcode project.
log "generating CrashHarness.xcodeproj"
(cd "$here" && xcodegen generate --spec project.yml)

# 3. Destination.
if [ -n "$device" ]; then
  destination="platform=iOS,id=$device"
  sign_args=(DEVELOPMENT_TEAM="$team" HARNESS_BUNDLE_ID_PREFIX="$bundle_prefix" -allowProvisioningUpdates)
  products="Debug-iphoneos"
else
  # The simulator's UDID: the one named (by name or UDID), or the newest iOS runtime's first iPhone.
  udid="$(xcrun simctl list devices available --json | python3 -c '
import json, sys
want = sys.argv[1]
devs = json.load(sys.stdin)["devices"]
def version(runtime):
    tail = runtime.rsplit("iOS-", 1)[-1]
    return [int(x) for x in tail.split("-") if x.isdigit()]
for runtime in sorted((k for k in devs if ".iOS-" in k), key=version, reverse=True):
    for d in devs[runtime]:
        if (want and want in (d["udid"], d["name"])) or (not want and d["name"].startswith("iPhone")):
            print(d["udid"])
            sys.exit(0)
sys.exit("no available iOS simulator " + (want or "iPhone") + ": create one in Xcode, Window > Devices and Simulators")
' "$simulator")"
  log "booting simulator $udid"
  xcrun simctl bootstatus "$udid" -b
  destination="platform=iOS Simulator,id=$udid"
  sign_args=()
  products="Debug-iphonesimulator"
  # A fresh app container: no pending reports from an earlier run (the run id below tells them apart anyway).
  xcrun simctl uninstall "$udid" "$bundle_prefix.harness" 2>/dev/null || true
fi

# 4. Collector with an empty store. On a device run the https URL must forward to this collector.
store="$build/store"
rm -rf "$store" "$build/reports" "$build/HarnessUITests.xcresult" "$build/collector.log"
# The collector accepts uploads only with an ingest token; the app gets it as the upload URL's user part
# (http://TOKEN@127.0.0.1:8787/), which the reporter sends as `Authorization: Bearer`.
token="$("$viewer" serve token create --project harness --store "$store" 2>>"$build/collector.log")" \
  || die "viewer serve token create failed: $(cat "$build/collector.log")"
case "$collector_url" in
  *://*@*) ;;  # a URL that already carries a token (a device run through your own collector)
  *://*) collector_url="${collector_url%%://*}://$token@${collector_url#*://}" ;;
esac
log "starting viewer serve on 127.0.0.1:$port, store $store"
"$viewer" serve --addr "127.0.0.1:$port" --store "$store" >"$build/collector.out" 2>>"$build/collector.log" &
collector_pid=$!
cleanup() { kill "$collector_pid" 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 1 50); do
  grep -q '^http://' "$build/collector.out" 2>/dev/null && break
  kill -0 "$collector_pid" 2>/dev/null || die "viewer serve exited: $(cat "$build/collector.log")"
  sleep 0.2
done
grep -q '^http://' "$build/collector.out" || die "viewer serve did not start: $(cat "$build/collector.log")"

# 5. UI tests. TEST_RUNNER_<NAME> reaches the test process as <NAME>.
run_id="$(uuidgen)"
log "xcodebuild test ($destination), run $run_id"
ui_status=0
TEST_RUNNER_HARNESS_COLLECTOR_URL="$collector_url" TEST_RUNNER_HARNESS_RUN_ID="$run_id" \
  xcodebuild test \
    -project "$here/CrashHarness.xcodeproj" -scheme HarnessApp \
    -destination "$destination" \
    -derivedDataPath "$build/DerivedData" \
    -resultBundlePath "$build/HarnessUITests.xcresult" \
    ${only_testing[@]+"${only_testing[@]}"} \
    ${sign_args[@]+"${sign_args[@]}"} \
  || ui_status=$?

# 6. Report checks (also after a UI test failure: they say which reports arrived and what they hold).
dsym="$build/DerivedData/Build/Products/$products/HarnessApp.app.dSYM"
[ -d "$dsym" ] || die "no dSYM at $dsym (did the build fail?)"
log "checking the reports (symbols: $dsym)"
check_status=0
python3 "$here/check_reports.py" --viewer "$viewer" --store "$store/reports" --symbols "$dsym" --run-id "$run_id" \
  --bundle-id "$bundle_prefix.harness" --out "$build/reports" ${only:+--triggers "$only"} || check_status=$?

log "collector log: $build/collector.log; rendered reports: $build/reports; test results: $build/HarnessUITests.xcresult"
if [ "$ui_status" -ne 0 ] || [ "$check_status" -ne 0 ]; then
  echo "run.sh: FAILED (xcodebuild test exit $ui_status, check_reports exit $check_status)" >&2
  exit 1
fi
echo "run.sh: crash matrix passed"
