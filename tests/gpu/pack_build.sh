#!/usr/bin/env bash
# Packs a build for a GPU machine that cannot build cushare itself (no
# packages, no network), small enough to carry:
#
#   tests/gpu/pack_build.sh BUILD_DIR OUT_DIR
#
# OUT_DIR/build: lib/libcushare.so and bin/{cushared,cushare-gpu-probe,
# gate_bench,shim_probe,context_end_probe,capture_neighbour_probe,
# stream_cover_probe} (those present), without debug
# information.
# OUT_DIR/deps: the shared libraries they need beyond the C and C++ runtimes
# and the driver (spdlog, fmt, ...). On the GPU machine, from the checkout:
#
#   LD_LIBRARY_PATH=OUT_DIR/deps CUSHARE_BUILD_DIR=OUT_DIR/build tests/gpu/run.sh /tmp/gpu-report
set -euo pipefail
if [ $# -ne 2 ]; then
  sed -n 2,13p "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
build=$1
out=$2
[ -f "$build/lib/libcushare.so" ] || { echo "pack_build.sh: $build/lib/libcushare.so is missing" >&2; exit 2; }
rm -rf "$out/build" "$out/deps"
mkdir -p "$out/build/lib" "$out/build/bin" "$out/deps"
files=(lib/libcushare.so)
for b in cushared cushare-gpu-probe gate_bench shim_probe context_end_probe capture_neighbour_probe \
         stream_cover_probe; do
  [ -x "$build/bin/$b" ] && files+=("bin/$b")
done
for f in "${files[@]}"; do
  cp "$build/$f" "$out/build/$f"
  strip --strip-debug "$out/build/$f"
done
# What the GPU machine's C/C++ runtime and driver provide is left out.
system='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcuda|libnvidia-ml)\.'
for f in "${files[@]}"; do
  ldd "$out/build/$f" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
    while read -r name path; do
      [[ $name =~ $system ]] || cp -L "$path" "$out/deps/$name"
    done
done
echo "pack_build.sh: $(du -sh "$out" | cut -f1) in $out: ${files[*]}; deps: $(ls "$out/deps" | tr '\n' ' ')"
