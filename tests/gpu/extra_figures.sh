#!/bin/bash
# Figures beside the suite, run after it on the same card (docs/gpu-validation.md):
# a tenant capped without a daemon (the local duty cycle), spin kernels of 1 ms or
# 100 us with a wait after every kernel (--inflight 1) or a queue of 8, alone and as
# a pair of two allocations; then gate_bench in a plain process and under the shim,
# without and with a sync after every launch. Each figure is the probe's own
# "done" line (completions x kernel length / wall time) or gate_bench's JSON.
#
#   tests/gpu/extra_figures.sh PACK OUTDIR   (PACK: what tests/gpu/pack_build.sh made)
set -u
[ $# -eq 2 ] || { sed -n 2,9p "$0" | sed 's/^# \{0,1\}//'; exit 2; }
P=$1; O=$2; B=$P/build/bin; L=$P/build/lib/libcushare.so; T=$(mktemp -d)
mkdir -p "$O"
spin() { # name inflight kernel_ns [limit]
  local name=$1 inflight=$2 kns=$3 limit=$4 env=()
  if [ -n "$limit" ]; then
    mkdir -p "$T/$name"
    env=(LD_PRELOAD=$L CUSHARE_RUN_DIR=$T/$name CUSHARE_COMPUTE_LIMIT=$limit CUSHARE_COMPUTE_MODE=capped CUSHARE_LOG_LEVEL=warn)
  fi
  timeout 25 env "${env[@]}" "$B/cushare-gpu-probe" spin --kernel-ns "$kns" --inflight "$inflight" \
    --seconds 4 --progress-ms 1000 < <(sleep 40) > "$O/$name.jsonl" 2> "$O/$name.err"
  echo "$name rc=$? $(grep '"done"' "$O/$name.jsonl")"
}
spin solo_sync1 1 1000000
spin solo_q8 8 1000000
spin cap30_sync1 1 1000000 30
spin cap30_q8 8 1000000 30
spin cap50_sync1 1 1000000 50
spin cap30_sync1_100us 1 100000 30
spin pair30_sync1 1 1000000 30 & spin pair50_sync1 1 1000000 50 & wait
if [ -x "$B/gate_bench" ]; then
  timeout 60 "$B/gate_bench" 100 2000 > "$O/gate_plain.txt" 2>&1
  timeout 60 env LD_PRELOAD=$L CUSHARE_RUN_DIR=$T/gb CUSHARE_LOG_LEVEL=warn "$B/gate_bench" 100 2000 > "$O/gate_shim.txt" 2>&1
  timeout 60 env LD_PRELOAD=$L CUSHARE_RUN_DIR=$T/gbs CUSHARE_LOG_LEVEL=warn "$B/gate_bench" 50 2000 1 > "$O/gate_shim_sync1.txt" 2>&1
  tail -n 4 "$O"/gate_*.txt
fi
rm -rf "$T"
