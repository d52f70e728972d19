#!/usr/bin/env bash
# Every GPU figure of the docs, in one run on one CUDA GPU, each part under a time limit:
#
#   bash scripts/gpu_checks.sh OUT [tests] [bench] [train] [distill]     # no part named: all four, about 18 minutes
#
#   tests    python -m pytest -m cuda tests: the CUDA tests (the step graph against the eager step, no host syncs)
#            -> OUT/cuda_tests.log; about 2 minutes
#   bench    python scripts/bench_gpu.py --device cuda (function, module, sync check, trainer) -> OUT/bench_gpu.*
#            (docs/benchmarks.md, "On a GPU"; docs/bench_gpu.txt is its text); about 7 minutes
#   train    timestep-embed train --config mnist-gpu with train.compile=step-graph (if that fails: cudagraphs)
#            -> OUT/mnist-gpu-step-graph or OUT/mnist-gpu-cudagraphs (docs/ddpm.md, "On one GPU"); about 5 minutes
#   distill  timestep-embed distill of that run, 2 minutes -> OUT/distill; about 4 minutes
#
# A machine lent for 15 minutes (its start included) runs tests and two of the other three parts.
#
# A part that fails or passes its limit is written in OUT/summary.txt and the next part runs; the exit status is
# the number of parts that failed. Run from the repository root with the package installed (pip install -e .).
set -u
if [ $# -lt 1 ] || [[ "$1" == -* ]]; then
    echo "usage: bash scripts/gpu_checks.sh OUT [tests] [bench] [train] [distill]" >&2
    exit 2
fi
OUT=$1
shift
PARTS=${*:-tests bench train distill}
for part in $PARTS; do
    case $part in
        tests | bench | train | distill) ;;
        *) echo "error: part $part: expected tests, bench, train or distill" >&2; exit 2 ;;
    esac
done
if ! python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "error: no CUDA device here (torch.cuda.is_available() is False): these checks measure a GPU" >&2
    exit 2
fi
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
START=$(date +%s)
FAILED=0
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  python -c "import torch, timestep_embed; print('torch', torch.__version__, 'CUDA', torch.version.cuda, \
'timestep_embed', timestep_embed.__version__)"; } > "$SUMMARY"

# step NAME LIMIT_S COMMAND...: run COMMAND with its output in OUT/NAME.log, and write its status in the summary
step() {
    local name=$1 limit=$2
    shift 2
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || FAILED=$((FAILED + 1))
    echo "$name: exit $rc$([ $rc -eq 124 ] && echo " (past its ${limit} s)") at $(($(date +%s) - START)) s" \
        | tee -a "$SUMMARY"
    return $rc
}

if [[ " $PARTS " == *" tests "* ]]; then
    step cuda_tests 240 python -m pytest -q -m cuda -p no:cacheprovider tests
fi
if [[ " $PARTS " == *" bench "* ]]; then
    step bench_gpu 480 python scripts/bench_gpu.py --device cuda --out "$OUT/bench_gpu.json"
fi
if [[ " $PARTS " == *" train "* ]]; then
    for mode in step-graph cudagraphs; do
        step "mnist-gpu-$mode" 330 timestep-embed train --config mnist-gpu --out-dir "$OUT/mnist-gpu-$mode" \
            --overwrite --quiet "train.compile=$mode" && break
    done
fi
if [[ " $PARTS " == *" distill "* ]]; then
    TEACHER=$OUT/mnist-gpu-step-graph
    [ -f "$TEACHER/metrics.json" ] || TEACHER=$OUT/mnist-gpu-cudagraphs
    step distill 240 timestep-embed distill "$TEACHER" --out-dir "$OUT/distill" --overwrite --quiet train.minutes=2
fi
for run in mnist-gpu-step-graph mnist-gpu-cudagraphs distill; do
    [ -f "$OUT/$run/metrics.json" ] && python -c "import json, sys; m = json.load(open(sys.argv[1])); \
print(sys.argv[2] + ':', m.get('train_steps'), 'steps, FD', m.get('fd'), 'real', m.get('real_fd'), \
'copies', m.get('copies'), 'held-out', m.get('heldout_copies'))" "$OUT/$run/metrics.json" "$run" | tee -a "$SUMMARY"
done
exit $FAILED
