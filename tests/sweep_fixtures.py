"""What the sweep tests share (test_sweep.py on a journal file, test_sweep_postgres.py on a
PostgreSQL server): a tiny classification task that a good learning rate learns in a few steps,
the trials running and their workers, and a run's records without their timing."""
from __future__ import annotations

import csv
import json
import random
from pathlib import Path

from albert_jax.data import tokenizers as tokenizer_lib
from albert_jax.finetune.demo import demo_sentences

TOTAL_STEPS = 40
# The loop's timing fields: the only ones a resumed run may differ in.
TIMING = {"steps_per_second", "examples_per_second", "tokens_per_second", "mfu", "eta_seconds"}


def classification_task_flags(root: Path) -> list[str]:
    """Writes a tiny classification task on CSV files into `root` (a word at the start of each
    text says its label) and returns the config flags of fine-tuning on it from scratch: the
    tiny model and a 200-piece SentencePiece model, TOTAL_STEPS steps, a checkpoint every 8."""
    sentences = demo_sentences()
    spm = tokenizer_lib.train(sentences, str(root / "spm.model"), vocab_size=200)
    rng = random.Random(0)
    for name, count in (("train", 64), ("dev", 16)):
        with (root / f"{name}.csv").open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=["text", "label"])
            writer.writeheader()
            for _ in range(count):
                label = rng.choice(["good", "bad"])
                writer.writerow({"text": f"{label} {rng.choice(sentences)}", "label": label})
    return ["--config=configs/custom.py:kind=classification,runlocal",
            f"--config.tokenizer={spm}", f"--config.data.train_file={root / 'train.csv'}",
            f"--config.data.dev_file={root / 'dev.csv'}", "--config.seq_len=32",
            "--config.batch_size=8", "--config.eval_batch_size=16",
            f"--config.total_steps={TOTAL_STEPS}", "--config.eval_every_steps=8",
            "--config.checkpoint_every_steps=8", "--config.log_every_steps=8",
            "--config.optim.warmup_steps=2"]


def run_records(run_dir: Path) -> list[dict]:
    """metrics.jsonl without the timing fields."""
    return [{key: value for key, value in json.loads(line).items() if key not in TIMING}
            for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def running_trials(workdir: Path) -> dict[Path, int]:
    """The trials that have saved a checkpoint and are not yet done: their folder -> the pid of
    the worker that runs them (its trial.lock's)."""
    running = {}
    for lock in workdir.glob("trials/*/trial.lock"):
        try:
            holder = json.loads(lock.read_text())["pid"]
        except (OSError, ValueError):
            continue  # being written or released
        folder = lock.parent
        # A finished checkpoint's folder is its step; Orbax writes it as STEP.orbax-checkpoint-tmp.
        steps = [int(path.name) for path in (folder / "checkpoints").glob("*")
                 if path.name.isdigit()]
        if steps and max(steps) < TOTAL_STEPS:
            running[folder] = holder
    return running
