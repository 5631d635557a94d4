#!/bin/bash
# Builds the launch gate's clock for aarch64 and runs its check under
# qemu-user (docs/scheduler.md, "The clock"). Needs the cross compiler and
# the emulator: apt-get install g++-aarch64-linux-gnu qemu-user-static.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
for tool in aarch64-linux-gnu-g++ qemu-aarch64-static; do
  command -v "$tool" >/dev/null || { echo "$tool not installed" >&2; exit 77; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
aarch64-linux-gnu-g++ -std=c++20 -O2 -Wall -Wextra -static -I"$repo" \
  "$repo/tests/cross/aarch64_clock_check.cpp" "$repo/shim/gate/tsc_clock.cpp" \
  "$repo/shim/gate/clock_source.cpp" "$repo/shim/gate/clock.cpp" -o "$out/aarch64_clock_check"
qemu-aarch64-static "$out/aarch64_clock_check"
