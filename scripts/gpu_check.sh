#!/usr/bin/env bash
# Everything CUDA-specific in the course, checked on one GPU in minutes (its first six steps: 254 s on an H100),
# written to one report file.
#
#   scripts/gpu_check.sh                        # on a machine with CUDA: writes gpu_check_report.md
#   scripts/gpu_check.sh --report out/gpu.md    # the report elsewhere
#   scripts/gpu_check.sh --cpu                  # a dry run of the script itself, on the CPU, at smaller sizes
#
# Steps (each with its own time limit; the report has every command, its status, its time and its output):
#   1. the environment: torch, CUDA, the GPU, whether FlashAttention is installed (transformers' continuous
#      batching takes a faster path with it);
#   2. the tests that follow MINI_LLM_DEVICE (tests/test_benchmark.py: the batched paged-attention kernel against
#      the per-request one, the runner's two kernels, engine / generate / continuous batching / sequential tokens
#      identical in fp32); the rest of the suite pins the CPU;
#   3. mini_llm and the engine against transformers on Qwen3-0.6B's shape (random weights), fp32 and bf16: the
#      largest logit differences, measured (fp32 must stay within 1e-3);
#   4. chapters 04 and 06 with MINI_LLM_DEVICE set;
#   5. the throughput benchmark on Qwen3-0.6B's shape in bf16: engine, hf, hf-cb (token differences in bf16 are
#      reported, not failed: two implementations can break a near-tie of two logits differently);
#   6. chapter 09 with MINI_LLM_DEVICE set and a smaller workload: its CUDA-graph cell captures a pure-decode step
#      and checks the replay against the eager runner (on the CPU that cell says so and skips);
#   7. batched attention's SDPA call, enable_gqa against K/V repeated per head: the kernel each takes, and times;
#   8. the roofline (benchmarks/roofline.py) on Qwen3-0.6B's shape in bf16: the GPU's peaks, the engine's steps;
#   9. chapter 13 with MINI_LLM_DEVICE set: structured output, xgrammar's bitmask applied to logits on the device.
# The exit status is 0 when every step passed. PYTHON chooses the interpreter (default: python).
set -uo pipefail

MODE=cuda
REPORT=gpu_check_report.md
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) MODE=cpu ;;
    --report) [ $# -ge 2 ] || { echo "--report needs a file name" >&2; exit 2; }; REPORT=$2; shift ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
PY=${PYTHON:-python}
case "$REPORT" in /*) ;; *) REPORT="$ROOT/$REPORT" ;; esac
mkdir -p "$(dirname "$REPORT")"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" MINI_LLM_DEVICE=$MODE

if [ "$MODE" = cuda ]; then
  if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "no CUDA device visible to $PY (torch.cuda.is_available() is False): run it on a GPU machine with a" \
         "CUDA build of PyTorch, or use --cpu for a dry run" >&2
    exit 2
  fi
  SHAPE_LAYERS=()  # all 28
  BENCH=(--num-requests 32 --output-lens 16,128 --rounds 3)
  CH09_PARAMS='NUM_REQUESTS = 8'
  GQA=()
  ROOF=(--shape qwen3-0.6b --dtype bfloat16)
else  # the same steps, sized for a CPU
  SHAPE_LAYERS=(--shape-layers 2)
  BENCH=(--num-requests 4 --prompt-lens 16,64 --output-lens 4,8 --rounds 1)
  CH09_PARAMS='NUM_REQUESTS = 4'
  GQA=(--repeats 1 --small)
  ROOF=()  # the embedded model: the 0.6B shape's steps take seconds each on a CPU
fi

FAILED=0
STARTED=$(date +%s)
{
  echo "# GPU check ($MODE mode)"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
       "$(git diff --quiet HEAD 2>/dev/null || echo '(with uncommitted changes)')"
  if [ "$MODE" = cpu ]; then
    echo
    echo "A dry run on the CPU: it exercises this script and says nothing about CUDA."
  fi
} > "$REPORT"

# step NAME LIMIT_SECONDS COMMAND...: run it; append its command, status, time and output to the report.
step() {
  local name=$1 limit=$2 log="$WORK/step.log" begin rc status seconds
  shift 2
  echo "== $name" >&2
  begin=$(date +%s)
  timeout "$limit" "$@" > "$log" 2>&1
  rc=$?
  seconds=$(( $(date +%s) - begin ))
  case $rc in
    0) status=passed ;;
    124) status="FAILED: over its ${limit} s limit"; FAILED=1 ;;
    *) status="FAILED (exit status $rc)"; FAILED=1 ;;
  esac
  echo "   $status, $seconds s" >&2
  {
    echo
    echo "## $name: $status, $seconds s"
    echo
    echo '```'
    echo "\$ $*"
    # Progress bars redraw their line with carriage returns: keep each state on its own line, drop empty ones and
    # the profiler's start/stop lines (torch's CPU builds), as scripts/execute_chapters.py does.
    tr '\r' '\n' < "$log" | grep -Ev '^[[:space:]]*$|^USDT:.*profiler_(start|stop)' | tail -n 60
    echo '```'
  } >> "$REPORT"
}

# The notebook runner: executes chapters/<name>.ipynb in a kernel of this interpreter (the optional code runs right
# after the cell tagged "parameters", to shrink the workload), prints every cell's text output, fails on an error.
cat > "$WORK/run_notebook.py" <<'PYTHON'
import json, os, sys, tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

chapter, code = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
path = Path("chapters") / f"{chapter}.ipynb"
nb = nbformat.read(path, as_version=4)
if code:
    at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])) + 1
    nb.cells.insert(at, nbformat.v4.new_code_cell(code))
# A kernelspec for this very interpreter, first on JUPYTER_PATH, so that no other Python's kernel is picked up.
share = Path(tempfile.mkdtemp())
(share / "kernels" / "python3").mkdir(parents=True)
(share / "kernels" / "python3" / "kernel.json").write_text(json.dumps(
    {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"], "language": "python",
     "display_name": "gpu check"}))
os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(share), os.environ.get("JUPYTER_PATH")]))
NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": "chapters"}}).execute()
for i, cell in enumerate(nb.cells):
    texts = [o.get("text", "") if o.output_type == "stream" else o.get("data", {}).get("text/plain", "")
             for o in cell.get("outputs", []) if o.output_type in ("stream", "execute_result")]
    if any(t.strip() for t in texts):
        print(f"--- cell {i}\n" + "".join(texts).rstrip())
print(f"{path}: every cell ran (MINI_LLM_DEVICE={os.environ.get('MINI_LLM_DEVICE')})")
PYTHON

step "1. environment" 120 "$PY" -c '
import importlib.util, platform, torch, transformers
print("python", platform.python_version(), "| torch", torch.__version__, "| CUDA build", torch.version.cuda,
      "| transformers", transformers.__version__)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("GPU:", p.name, f"{p.total_memory / 2**30:.0f} GiB, compute capability {p.major}.{p.minor},",
          torch.cuda.device_count(), "visible")
else:
    print("no CUDA device")
for lib in ("flash_attn", "kernels"):
    print(lib, "installed" if importlib.util.find_spec(lib) else "not installed")'

step "2. tests that follow MINI_LLM_DEVICE" 300 "$PY" -m pytest tests/test_benchmark.py -q -p no:cacheprovider

step "3. mini_llm and the engine against transformers, Qwen3-0.6B shape, fp32 and bf16" 300 \
  "$PY" benchmarks/against_transformers.py --shape qwen3-0.6b ${SHAPE_LAYERS[@]+"${SHAPE_LAYERS[@]}"} --dtypes float32,bfloat16

step "4a. chapter 04 on $MODE" 300 "$PY" "$WORK/run_notebook.py" 04_mixed_batch
step "4b. chapter 06 on $MODE" 300 "$PY" "$WORK/run_notebook.py" 06_inference_loop

step "5. throughput on Qwen3-0.6B shape, bf16: engine, hf, hf-cb" 300 \
  "$PY" benchmarks/throughput.py --shape qwen3-0.6b ${SHAPE_LAYERS[@]+"${SHAPE_LAYERS[@]}"} --dtype bfloat16 --systems engine,hf,hf-cb \
  "${BENCH[@]}" --tokens-may-differ

step "6. chapter 09 on $MODE (CUDA-graph replay against eager)" 400 \
  "$PY" "$WORK/run_notebook.py" 09_performance "$CH09_PARAMS"

step "7. batched attention's SDPA: enable_gqa against K/V repeated per head" 120 \
  "$PY" benchmarks/attention_gqa.py ${GQA[@]+"${GQA[@]}"}

step "8. the roofline and the engine's steps on it" 300 "$PY" benchmarks/roofline.py ${ROOF[@]+"${ROOF[@]}"}
step "9. chapter 13 on $MODE (grammar bitmasks on the logits' device)" 300 "$PY" "$WORK/run_notebook.py" \
  13_structured_output

{
  echo
  echo "## Result: $([ $FAILED = 0 ] && echo 'every step passed' || echo 'SOME STEPS FAILED'),"\
       "$(( $(date +%s) - STARTED )) s in all"
} >> "$REPORT"
echo "report: $REPORT" >&2
exit $FAILED
