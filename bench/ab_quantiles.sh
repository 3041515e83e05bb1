#!/bin/bash
# ab_quantiles.sh — A/B timing of two ember_bench binaries (or two files) on a noisy machine.
#
#   bench/ab_quantiles.sh PTE INPUT THREADS ROUNDS BIN_A BIN_B [PTE_B]
#
# Alternates rounds of 10 timed runs (3 warm-up) of A and B, pools every run's time, and prints
# the p10 / p25 / p50 of each and their ratios A/B (> 1: B is faster). The low quantiles are
# what to read when the host steals time from one run and not the other. Each binary writes its
# JSON to a file that is parsed after it exits: piped straight into Python, the interpreter's
# start-up ran on the second vCPU during the first ~50 ms of the timed process and made its
# 2-thread runs up to 3x slower. BIN_A / BIN_B: ember_bench built against two libember.a
# (bench/ember_bench.c); PTE_B: time another file with BIN_B instead.
set -euo pipefail
P=$1; IN=$2; TH=$3; R=$4; A=$5; B=$6; PB=${7:-$1}
PY=${PYTHON:-python3}
TA=$(mktemp); TB=$(mktemp); OUT=$(mktemp); J=$(mktemp)
trap 'rm -f "$TA" "$TB" "$OUT" "$J"' EXIT
times() { "$PY" -c "import json,sys;print('\n'.join(map(str,json.load(open(sys.argv[1]))['times_ms'])))" "$J"; }
for _ in $(seq "$R"); do
  "$A" "$P" "$IN" "$OUT" "$TH" 3 10 > "$J"
  times >> "$TA"
  "$B" "$PB" "$IN" "$OUT" "$TH" 3 10 > "$J"
  times >> "$TB"
done
"$PY" - "$TA" "$TB" "$TH" <<'PYEOF'
import sys
import numpy as np
a, b = np.loadtxt(sys.argv[1]), np.loadtxt(sys.argv[2])
q = [10, 25, 50]
qa, qb = np.percentile(a, q), np.percentile(b, q)
print(f"{sys.argv[3]}t n={len(a)}  A p10/p25/p50 " + " ".join(f"{v:.3f}" for v in qa)
      + " | B " + " ".join(f"{v:.3f}" for v in qb)
      + " | A/B " + " ".join(f"{v:.3f}" for v in qa / qb))
PYEOF
