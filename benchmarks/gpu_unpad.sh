#!/usr/bin/env bash
# The GPU check of the unpadded forward (docs/performance.md, "GPU"): benchmarks/gpu_check.py's own
# checks, then 300 training steps of a BERT-base-shaped model (random init from its config, no
# download) at batch 64, length 32, ragged sentences, padded and then unpadded. Writes one JSON line
# per run to $OUT (default: gpu-unpad/) and prints them: sentences/s, peak memory, unpad_max_rel_diff.
set -euo pipefail
OUT=${OUT:-gpu-unpad}
PY=${PY:-.venv/bin/python}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.csv" || true
for forward in no-unpad unpad; do
  "$PY" benchmarks/gpu_check.py --steps 300 --batch-size 64 --max-len 32 --lengths ragged \
    --"$forward" --json "$OUT/$forward.json"
done
cat "$OUT"/*.json
