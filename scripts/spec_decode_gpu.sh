#!/usr/bin/env bash
# Speculative decoding's figures on one GPU (docs/performance.md): both workloads, then the speed-up against k.
#   OUT=folder scripts/spec_decode_gpu.sh      (PYTHON chooses the interpreter; default python3)
set -uo pipefail
PY=${PYTHON:-python3}
OUT=${OUT:-spec_gpu}
mkdir -p "$OUT"
export PYTHONPATH=.
nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv | tee "$OUT/env.txt"
$PY -c "import torch, transformers; print(torch.__version__, transformers.__version__)" | tee -a "$OUT/env.txt"
B="$PY benchmarks/throughput.py --device cuda --threads 1"
$B --workload repetitive --systems engine,engine-ngram,hf-lookup --rounds 3 --json "$OUT/repetitive.json" \
  --tokens-may-differ 2>&1 | tail -16 | tee "$OUT/repetitive.txt"
$B --systems engine,engine-ngram --rounds 3 --json "$OUT/default.json" 2>&1 | tail -12 | tee "$OUT/default.txt"
for k in 1 2 8; do
  $B --workload repetitive --systems engine,engine-ngram --rounds 1 --num-speculative-tokens $k 2>&1 \
    | grep -E "^(engine|ratio engine-ngram/engine:)" | sed "s/^/k=$k /" | tee -a "$OUT/k_sweep.txt"
done
