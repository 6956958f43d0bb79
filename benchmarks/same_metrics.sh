#!/usr/bin/env bash
# Same seed, two commits (a refactor changes no number): a tiny pretraining run, then fine-tunes
# from it (GLUE MNLI, RACE, own CSV classification, own JSONL regression), each commit's code on
# its own inputs built by its own CLI; every metrics.jsonl record compared, timing fields aside.
# Prints one line a run: "<run>: N records before, N after, bit-identical" (or DIFFERENT).
#   bash benchmarks/same_metrics.sh BEFORE_COMMIT AFTER_COMMIT OUT_DIR   (from the checkout, its .venv active)
set -euo pipefail
BEFORE=$1; AFTER=$2; OUT=$(realpath -m "$3")
PY=${PYTHON:-python}
REPO=$(git rev-parse --show-toplevel)
mkdir -p "$OUT"
export XLA_FLAGS="--xla_force_host_platform_device_count=8"
for side in before after; do
  commit=$([ $side = before ] && echo $BEFORE || echo $AFTER)
  tree=$OUT/tree_$side
  rm -rf "$tree"; git -C "$REPO" worktree remove --force "$tree" 2>/dev/null || true
  git -C "$REPO" worktree add --detach "$tree" "$commit" >/dev/null
  run=$OUT/run_$side; rm -rf "$run"; mkdir -p "$run"
  (
    cd "$tree"
    export PYTHONPATH=$tree:$tree/tests
    $PY - "$run" <<'EOF'
import sys
from pathlib import Path
from albert_jax.data import corpus
from albert_jax.finetune.demo import demo_sentences
from finetune_fixtures import write_glue_task, write_race
root = Path(sys.argv[1])
text = "\n\n".join("\n".join(d) for _, d in zip(range(300), corpus.demo_documents()))
(root / "corpus.txt").write_text(text + "\n")
write_glue_task(str(root / "glue"), "mnli", num_train=40, num_dev=16, num_test=5, seed=1)
write_race(str(root / "race"), articles_per_level=3, questions_per_article=2, seed=3)
sentences = demo_sentences()
import csv, json
with (root / "train.csv").open("w", newline="") as f:
    w = csv.writer(f); w.writerow(["text", "label"])
    for i in range(48): w.writerow([sentences[i], ("yes", "no", "maybe")[i % 3]])
with (root / "dev.csv").open("w", newline="") as f:
    w = csv.writer(f); w.writerow(["text", "label"])
    for i in range(48, 64): w.writerow([sentences[i], ("yes", "no", "maybe")[i % 3]])
for name, rows in (("train", range(0, 40)), ("dev", range(40, 56))):
    (root / f"{name}.jsonl").write_text("".join(json.dumps(
        {"sentence": sentences[i], "score": (i * 7 % 50) / 10}) + "\n" for i in rows))
EOF
    DATA="--config=configs/pretrain.py:runlocal --config.data.corpus=$run/corpus.txt --config.data.tokenizer=$run/spm.model --config.data.dir=$run/data --config.data.vocab_size=400 --config.seq_len=64 --config.data.dupe_factor=1"
    $PY -m albert_jax.cli tokenizer train $DATA
    $PY -m albert_jax.cli data build $DATA
    $PY -m albert_jax.cli pretrain $DATA --config.model=tiny --config.total_steps=20 \
      --config.model_overrides.vocab_size=400 --config.batch_size=8 --config.eval_batch_size=8 \
      --config.eval_every_steps=10 --config.log_every_steps=1 --workdir=$run/pretrain
    SMALL="--config.seq_len=32 --config.batch_size=8 --config.eval_batch_size=8 --config.total_steps=10 --config.eval_every_steps=5 --config.checkpoint_every_steps=5 --config.log_every_steps=1"
    $PY -m albert_jax.cli finetune --config=configs/glue.py:task=mnli,runlocal \
      --config.data.path=$run/glue/MNLI --config.init_from=$run/pretrain $SMALL --workdir=$run/mnli
    $PY -m albert_jax.cli finetune --config=configs/race.py:runlocal --config.data.path=$run/race/RACE \
      --config.init_from=$run/pretrain $SMALL --config.max_qa_length=8 --workdir=$run/race_run
    $PY -m albert_jax.cli finetune --config=configs/custom.py:kind=classification,runlocal \
      --config.data.train_file=$run/train.csv --config.data.dev_file=$run/dev.csv \
      --config.init_from=$run/pretrain $SMALL --workdir=$run/own
    $PY -m albert_jax.cli finetune --config=configs/custom.py:kind=regression,runlocal \
      --config.data.train_file=$run/train.jsonl --config.data.dev_file=$run/dev.jsonl \
      --config.data.text_a=sentence --config.data.label=score \
      --config.init_from=$run/pretrain $SMALL --workdir=$run/regression
  ) > "$OUT/log_$side.txt" 2>&1
  git -C "$REPO" worktree remove --force "$tree"
done
$PY - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
TIMING = {"steps_per_second", "examples_per_second", "tokens_per_second", "mfu", "eta_seconds"}
def records(path):
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING}
            for line in path.read_text().splitlines()]
for run in ("pretrain", "mnli", "race_run", "own", "regression"):
    before = records(out / "run_before" / run / "metrics.jsonl")
    after = records(out / "run_after" / run / "metrics.jsonl")
    print(f"{run}: {len(before)} records before, {len(after)} after, "
          f"{'bit-identical' if before == after else 'DIFFERENT'}")
EOF
