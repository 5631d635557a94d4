#!/usr/bin/env bash
# cushare real-GPU acceptance suite.
#
#   tests/gpu/run.sh OUTDIR [--only 1,2a,...] [--quick] [--budget SECONDS]
#
# On a Linux machine with an NVIDIA GPU and its driver: builds cushare if
# needed, runs every check (docs/gpu-validation.md), writes OUTDIR/report.json
# and OUTDIR/report.md (logs in OUTDIR/logs/), and leaves no process and no GPU
# memory behind. The whole run stays within CUSHARE_GPU_TIME_LIMIT seconds
# (default 470, i.e. under 8 minutes including the build).
#
# Environment:
#   CUSHARE_BUILD_DIR   a prebuilt build folder to use (e.g. carried from a
#                       machine with the build dependencies); default: build/,
#                       configured and built here when libcushare.so is missing
#   CUSHARE_GPU_PYTHON  the Python that has the frameworks (default: python3 or
#                       python on PATH, then /usr/bin/python3)
#   CUSHARE_GPU_TIME_LIMIT  overall limit in seconds (default 470)
# Exit status: 0 every check that ran passed; 1 a check failed or errored;
# 2 the suite could not run (build failed, bad arguments); 3 nothing could run
# (no GPU).
set -uo pipefail

t_start=$(date +%s)
limit=${CUSHARE_GPU_TIME_LIMIT:-470}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

if [ $# -lt 1 ] || [ "${1:0:1}" = "-" ]; then
  sed -n 2,21p "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
out=$1
shift
mkdir -p "$out/logs" || { echo "run.sh: cannot create $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
: >"$out/.pids"

python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3 || true)
if [ -z "$python" ]; then
  echo "run.sh: no python3 found (the orchestrator needs Python 3.7+, standard library only)" >&2
  exit 2
fi

elapsed() { echo $(($(date +%s) - t_start)); }

# --- cleanup: whatever happens, nothing we started survives ------------------
orchestrator=""
builder=""
cleanup() {
  local pid
  [ -n "$builder" ] && kill -TERM -- "-$builder" 2>/dev/null
  if [ -n "$orchestrator" ] && kill -0 "$orchestrator" 2>/dev/null; then
    kill -TERM -- "-$orchestrator" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$orchestrator" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$orchestrator" 2>/dev/null
  fi
  # Every worker runs in its own process group, listed in .pids.
  if [ -s "$out/.pids" ]; then
    while read -r pid; do
      [ -n "$pid" ] && kill -KILL -- "-$pid" 2>/dev/null
    done <"$out/.pids"
  fi
}
trap cleanup EXIT
trap 'echo "run.sh: interrupted" >&2; exit 130' INT TERM HUP

# --- the build ------------------------------------------------------------------
# cushared is not in the list: without it the checks that need the daemon
# are skipped with that reason, the others still run.
needed=(lib/libcushare.so bin/cushare-gpu-probe)
missing_artifacts() {
  local m=() f
  for f in "${needed[@]}"; do [ -e "$1/$f" ] || m+=("$f"); done
  echo "${m[*]:-}"
}

# Debian packages the build needs, read from scripts/setup (one source of truth).
missing_packages() {
  command -v dpkg-query >/dev/null || { echo "?"; return; }
  local pkgs p m=()
  pkgs=$(sed -n '/^packages=(/,/^)/p' "$repo/scripts/setup" | sed '1d;$d')
  for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || m+=("$p")
  done
  echo "${m[*]:-}"
}

fatal=""
build_info=""
if [ -n "${CUSHARE_BUILD_DIR:-}" ]; then
  build=$(cd "$CUSHARE_BUILD_DIR" 2>/dev/null && pwd || echo "$CUSHARE_BUILD_DIR")
  miss=$(missing_artifacts "$build")
  if [ -n "$miss" ]; then
    fatal="build failed: CUSHARE_BUILD_DIR=$build is incomplete: missing $miss (build targets cushare cushared cushare-gpu-probe there, or unset CUSHARE_BUILD_DIR to build into build/)"
  else
    build_info="prebuilt: $build"
  fi
else
  build="$repo/build"
  miss=$(missing_artifacts "$build")
  if [ -z "$miss" ] && [ -e "$build/bin/cushared" ]; then
    build_info="existing build: $build"
  else
    echo "run.sh: building cushare in $build (missing: $miss)"
    tools_missing=()
    for t in cmake c++; do command -v "$t" >/dev/null || tools_missing+=("$t"); done
    generator=()
    command -v ninja >/dev/null && generator=(-G Ninja)
    pkgs=$(missing_packages)
    cuda_h="${CUDA_HOME:-/usr/local/cuda}/include/cuda.h"
    problems=""
    [ ${#tools_missing[@]} -gt 0 ] && problems+=" tools not installed: ${tools_missing[*]};"
    [ -n "$pkgs" ] && [ "$pkgs" != "?" ] && problems+=" Debian packages not installed: $pkgs;"
    [ -f "$cuda_h" ] || problems+=" CUDA headers missing ($cuda_h; set CUDA_HOME);"
    build_budget=$((limit / 2))
    # An existing build folder keeps its configuration; a fresh one is Release.
    configure=(-DCMAKE_BUILD_TYPE=Release)
    if [ -f "$build/CMakeCache.txt" ]; then configure=(); generator=(); fi
    build_rc=1
    if [ ${#tools_missing[@]} -eq 0 ]; then
      # In its own process group and waited for in the background, so that a
      # signal stops the build at once (the trap kills the group).
      # cushared and the shim probes are optional: without them the daemon
      # checks and checks 11, 12 and 13 are skipped.
      # The build runs in its own process group (no `timeout` inside: it would
      # make groups of its own), bounded from here, and the trap kills the
      # whole group, so a signal or the time limit stops it at once.
      setsid bash -c 'cmake -S "$1" -B "$2" "${@:4}" &&
        cmake --build "$2" -j "$3" --target cushare cushare-gpu-probe &&
        { cmake --build "$2" -j "$3" --target cushared ||
          echo "run.sh: cushared not built; the checks that need the daemon are skipped"; } &&
        { cmake --build "$2" -j "$3" --target context_end_probe capture_neighbour_probe stream_cover_probe ||
          echo "run.sh: the shim probes not built; checks 11, 12 and 13 are skipped"; }' \
        _ "$repo" "$build" "$(nproc)" "${generator[@]}" "${configure[@]}" \
        ${CUDA_HOME:+-DCUDA_HOME=$CUDA_HOME} >"$out/build.log" 2>&1 &
      builder=$!
      while kill -0 "$builder" 2>/dev/null && [ "$(elapsed)" -lt "$build_budget" ]; do
        sleep 0.5
      done
      if kill -0 "$builder" 2>/dev/null; then
        echo "run.sh: the build took over $build_budget s, stopped" >>"$out/build.log"
        kill -TERM -- "-$builder" 2>/dev/null
      fi
      wait "$builder"
      build_rc=$?
      builder=""
    fi
    if [ "$build_rc" -eq 0 ]; then
      build_info="built here in $(elapsed) s: $build"
    else
      tail_msg=$(grep -m3 -E "Error|error:|Could not find|not found" "$out/build.log" 2>/dev/null | tr '\n' ' ' | cut -c1-400)
      fatal="build failed:${problems:- } ${tail_msg:-see build.log}. Without network or root, install the packages of scripts/setup elsewhere: build there and run with CUSHARE_BUILD_DIR=<that build folder>."
    fi
  fi
fi
# A build carried from another machine may miss shared libraries here.
if [ -z "$fatal" ] && command -v ldd >/dev/null; then
  unresolved=""
  for f in lib/libcushare.so bin/cushare-gpu-probe bin/cushared; do
    [ -e "$build/$f" ] || continue
    libs=$(ldd "$build/$f" 2>/dev/null | awk '/not found/ {print $1}' | tr '\n' ' ')
    [ -n "$libs" ] && unresolved+=" $f needs: $libs;"
  done
  [ -n "$unresolved" ] && fatal="build unusable here, shared libraries missing:$unresolved install their runtime packages or carry them with LD_LIBRARY_PATH"
fi
echo "run.sh: ${build_info:-$fatal}"

# --- the suite --------------------------------------------------------------------
budget=$((limit - $(elapsed) - 20))
if [ -z "$fatal" ] && [ "$budget" -lt 30 ]; then
  fatal="no time left after the build ($(elapsed) s of $limit s)"
fi
args=(--out "$out" --repo "$repo" --build-dir "$build" --budget "$budget"
  --build-info "$build_info")
[ -n "$fatal" ] && args+=(--fatal "$fatal")
[ -n "${CUSHARE_GPU_FAKEGPU_STAT:-}" ] && args+=(--fakegpu-stat "$CUSHARE_GPU_FAKEGPU_STAT")
[ -n "${CUSHARE_SHIM_LIB:-}" ] && args+=(--shim "$CUSHARE_SHIM_LIB")

# Own session: the trap can kill the orchestrator's whole group.
setsid "$python" "$here/suite.py" "${args[@]}" "$@" &
orchestrator=$!
rc=0
deadline=$((t_start + limit - 5))
while kill -0 "$orchestrator" 2>/dev/null; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "run.sh: time limit ($limit s) reached, stopping the suite" >&2
    kill -TERM -- "-$orchestrator" 2>/dev/null
    for _ in $(seq 1 25); do kill -0 "$orchestrator" 2>/dev/null || break; sleep 0.2; done
    break
  fi
  sleep 0.2
done
wait "$orchestrator" 2>/dev/null
rc=$?
if [ ! -s "$out/report.json" ]; then
  "$python" "$here/suite.py" --out "$out" --repo "$repo" --build-dir "$build" \
    --fatal "the orchestrator ended (status $rc) without writing a report; see $out/logs" \
    >/dev/null 2>&1
  rc=2
fi
echo "run.sh: report in $out/report.md (exit $rc, $(elapsed) s)"
exit "$rc"
