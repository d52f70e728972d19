#!/usr/bin/env bash
# Every GPU figure of the docs, on one CUDA GPU, each part under a time limit:
#
#   bash scripts/gpu_checks.sh OUT [tests] [bench] [train] [distill]     # no part named: all four
#
#   tests    pytest -m cuda on the CUDA test files (the step graph against the eager step, no host syncs); ~1 min
#   bench    scripts/bench_gpu.py --device cuda: function and module against diffusers, the sync check, the trainer's
#            steps/s (train.compile false and step-graph; BENCH_COMPILE to change) -> OUT/bench_gpu.json; ~7 min
#   train    timestep-embed train --config mnist-gpu with train.compile=step-graph (cudagraphs when the step cannot
#            be captured and the time allows), then its EMA weights exported to OUT/teacher; ~5 min
#   distill  timestep-embed distill of the teacher (TEACHER, default OUT/teacher or this call's run), 2 min; ~4 min
#
# A device call runs at most 600 s and brings back at most 8 files of 16 MiB from OUT. On a warm machine lent for
# 15 minutes: call `tests train`, then `bench`; `distill` in a later lease, with OUT/teacher carried and TEACHER set.
# The runs live in WORK (default /tmp/gpu_checks); OUT gets summary.txt (a line a part, the key figures, the last
# lines of a failed part's log), logs.tar.gz (every log, metrics.json and log.jsonl), bench_gpu.json and
# teacher/ (config.json, model.safetensors: 15 MiB). The exit status is the number of parts that failed.
# Run from the repository root; the package, diffusers and mlxtend must import (PYTHONPATH is set to the checkout).
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
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=$(command -v python || command -v python3)
if ! "$PY" -c "import timestep_embed, diffusers.models.embeddings, importlib.util, sys; \
sys.exit(0 if importlib.util.find_spec('mlxtend') else 3)"; then
    echo "error: timestep_embed, diffusers and mlxtend must import (the wheels of shared/notes/gpu.md)" >&2
    exit 2
fi
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "error: no CUDA device here (torch.cuda.is_available() is False): these checks measure a GPU" >&2
    exit 2
fi
WORK=${WORK:-/tmp/gpu_checks}
mkdir -p "$OUT" "$WORK"
SUMMARY=$OUT/summary.txt
START=$(date +%s)
FAILED=0
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  "$PY" -c "import torch, timestep_embed; print('torch', torch.__version__, 'CUDA', torch.version.cuda, \
'timestep_embed', timestep_embed.__version__)"; } >> "$SUMMARY"

# run NAME LIMIT_S COMMAND...: COMMAND with its output in WORK/NAME.log; its status (and, failed, its log's last
# lines) in the summary
run() {
    local name=$1 limit=$2
    shift 2
    timeout "$limit" "$@" > "$WORK/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc$([ $rc -eq 124 ] && echo " (past its ${limit} s)") at $(($(date +%s) - START)) s" \
        | tee -a "$SUMMARY"
    [ $rc -eq 0 ] || tail -n 4 "$WORK/$name.log" | sed 's/^/    /' >> "$SUMMARY"
    return $rc
}
# figures NAME: a run's steps, rate and scores in the summary
figures() {
    [ -f "$WORK/$1/metrics.json" ] && "$PY" -c "import json, sys; m = json.load(open(sys.argv[1])); \
print(sys.argv[2] + ':', m.get('train_steps'), 'steps,', m.get('steps_per_s'), 'steps/s,', m.get('train_seconds'), \
's; FD', m.get('fd'), 'real', m.get('real_fd'), 'copies', m.get('copies'), 'held-out', m.get('heldout_copies'))" \
        "$WORK/$1/metrics.json" "$1" | tee -a "$SUMMARY"
}

if [[ " $PARTS " == *" tests "* ]]; then
    run cuda_tests 180 "$PY" -m pytest -q -m cuda -p no:cacheprovider tests/test_devices.py \
        tests/ddpm/test_step_graph.py || FAILED=$((FAILED + 1))
fi
if [[ " $PARTS " == *" bench "* ]]; then
    run bench_gpu 540 "$PY" scripts/bench_gpu.py --device cuda --out "$OUT/bench_gpu.json" \
        --train-compile "${BENCH_COMPILE:-false,step-graph}" || FAILED=$((FAILED + 1))
fi
# train_gpu COMPILE: the mnist-gpu run with train.compile=COMPILE in WORK/mnist-gpu-COMPILE (RUN names it)
train_gpu() {
    RUN=mnist-gpu-$1
    run "$RUN" 330 "$PY" -m timestep_embed train --config mnist-gpu --out-dir "$WORK/$RUN" --overwrite --quiet \
        "train.compile=$1"
}
if [[ " $PARTS " == *" train "* ]]; then
    train_gpu step-graph
    rc=$?
    # the cudagraphs run only when the step could not be captured (not after a timeout or a failed score), and
    # only when it fits the device call's 600 s
    if [ $rc -ne 0 ] && grep -q "could not be captured" "$WORK/$RUN.log" && [ $(($(date +%s) - START)) -lt 240 ]; then
        train_gpu cudagraphs
        rc=$?
    fi
    [ $rc -eq 0 ] || FAILED=$((FAILED + 1))
    figures "$RUN"
    if [ -f "$WORK/$RUN/checkpoint.safetensors" ]; then  # the teacher a later lease distils (15 MiB)
        run export 60 "$PY" -m timestep_embed export "$WORK/$RUN" --out "$OUT/teacher" --overwrite \
            || FAILED=$((FAILED + 1))
    fi
fi
if [[ " $PARTS " == *" distill "* ]]; then
    TEACHER=${TEACHER:-$OUT/teacher}
    run distill 240 "$PY" -m timestep_embed distill "$TEACHER" --out-dir "$WORK/distill" --overwrite --quiet \
        train.minutes=2 || FAILED=$((FAILED + 1))
    figures distill
fi
# the logs, the runs' metrics and loss logs in one file (a device call brings back 8)
(cd "$WORK" && shopt -s nullglob && tar czf "$OUT/logs.tar.gz" ./*.log ./*/metrics.json ./*/log.jsonl)
exit $FAILED
