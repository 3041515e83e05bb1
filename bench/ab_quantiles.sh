#!/bin/bash
# ab_quantiles.sh — A/B timing of two ember_bench binaries (or two files) on a noisy machine.
#
#   bench/ab_quantiles.sh PTE INPUT THREADS ROUNDS BIN_A BIN_B [PTE_B]
#
# Alternates rounds of 10 timed runs (3 warm-up) of A and B, pools every run's time, and prints
# the p10 / p25 / p50 of each and their ratios A/B (> 1: B is faster). The low quantiles are
# what to read when the host steals time from one run and not the other (2-thread runs of one
# file on the shared 2-vCPU VM spread 2x between rounds). BIN_A / BIN_B: ember_bench built
# against two libember.a (bench/ember_bench.c); PTE_B: time another file with BIN_B instead.
set -euo pipefail
P=$1; IN=$2; TH=$3; R=$4; A=$5; B=$6; PB=${7:-$1}
PY=${PYTHON:-python3}
TA=$(mktemp); TB=$(mktemp); OUT=$(mktemp)
trap 'rm -f "$TA" "$TB" "$OUT"' EXIT
times() { "$PY" -c "import json,sys;print('\n'.join(map(str,json.load(sys.stdin)['times_ms'])))"; }
for _ in $(seq "$R"); do
  "$A" "$P" "$IN" "$OUT" "$TH" 3 10 | times >> "$TA"
  "$B" "$PB" "$IN" "$OUT" "$TH" 3 10 | times >> "$TB"
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
