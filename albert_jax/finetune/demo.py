"""The fine-tuning half of `make demo`: a paraphrase task made at run time from real text and
written in GLUE's MRPC layout, fine-tuned from the demo's pretraining workdir and from scratch
with the same budget, beside the majority-class baseline.

  python -m albert_jax.finetune.demo --pretrained=runs/demo --workdir=runs/demo-paraphrase
  (either may be in a bucket, gs://...; os.path.join is lexical and joins such a path too)

The task: sentence 1 is a sentence of the stdlib docstrings (`corpus.demo_documents`); sentence
2 is the same sentence with one word left out (label 1, "equivalent") or another sentence of the
corpus (label 0). Telling the two apart needs both segments, so it exercises the pair input, the
segment ids and the pooled classifier of SPEC 8.2. Train, dev and test sentences are disjoint.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
from typing import Sequence

import ml_collections
from etils import epath

from albert_jax.config import finetune_config, parse_arg
from albert_jax.data import corpus
from albert_jax.files import write_atomically
from albert_jax.finetune import run as finetune_run
from albert_jax.train import workdir as workdir_names

_MRPC_COLUMNS = ("#1 ID", "#2 ID", "#1 String", "#2 String")


def demo_sentences(min_words: int = 6, max_words: int = 12) -> list[str]:
    """The corpus sentences of `min_words`..`max_words` words, in a fixed shuffled order."""
    sentences = sorted({sentence for document in corpus.demo_documents() for sentence in document
                        if min_words <= len(sentence.split()) <= max_words})
    random.Random(0).shuffle(sentences)
    return sentences


def write_paraphrase_task(directory: str, num_train: int, num_dev: int, num_test: int = 100,
                          seed: int = 0, max_words: int = 12) -> str:
    """Writes <directory>/MRPC/{train,dev,test}.tsv (the GLUE download's MRPC columns, balanced
    labels) and returns <directory>/MRPC. `num_train` may exceed the number of sentences: the
    train sentences are reused with fresh pairings; dev and test use sentences of their own."""
    sentences = demo_sentences(max_words=max_words)
    held_out = num_dev + num_test
    if len(sentences) < 2 * held_out:
        raise ValueError(f"the demo corpus has {len(sentences)} sentences of 6..{max_words} "
                         f"words, too few for {num_dev} dev and {num_test} test pairs")
    pools = {"dev": sentences[:num_dev], "test": sentences[num_dev:held_out],
             "train": sentences[held_out:]}
    rng = random.Random(seed)
    path = os.path.join(directory, "MRPC")  # write_atomically makes the folder
    for split, count in (("train", num_train), ("dev", num_dev), ("test", num_test)):
        pool = pools[split]
        first_column = "index" if split == "test" else "Quality"
        lines = ["\t".join((first_column,) + _MRPC_COLUMNS)]
        for row in range(count):
            sentence = pool[row % len(pool)]
            label = rng.random() < 0.5
            words = sentence.split()
            dropped = rng.randrange(1, len(words))
            other = pool[(row + rng.randrange(1, len(pool))) % len(pool)]
            second = " ".join(words[:dropped] + words[dropped + 1:]) if label else other
            first = str(row) if split == "test" else str(int(label))
            lines.append("\t".join((first, str(2 * row), str(2 * row + 1), sentence, second)))
        write_atomically(os.path.join(path, f"{split}.tsv"), "\n".join(lines) + "\n")
    return path


def demo_config(data_path: str, init_from: str, tokenizer: str, steps: int, lr: float
                ) -> ml_collections.ConfigDict:
    """The fine-tuning config of the demo: MRPC's reader and head on the demo model, a short
    AdamW run (SPEC 8.1 schedule) sized for a laptop CPU."""
    config = finetune_config(parse_arg(None, size="base", model="demo"))
    config.task = "mrpc"
    config.data.path, config.init_from, config.tokenizer = data_path, init_from, tokenizer
    config.seq_len, config.batch_size, config.eval_batch_size = 48, 32, 64
    config.total_steps = steps
    config.optim.lr, config.optim.warmup_steps = lr, steps // 10
    config.classifier_dropout = 0.0
    config.eval_every_steps = config.checkpoint_every_steps = steps // 4
    config.log_every_steps = steps // 4
    config.lock()
    return config


def _dev_accuracy_by_step(workdir: str) -> dict[int, float]:
    lines = (epath.Path(workdir) / workdir_names.METRICS_LOG_FILE).read_bytes().splitlines()
    records = [json.loads(line) for line in lines]
    return {record["step"]: record["accuracy"] for record in records
            if record.get("split") == "dev"}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pretrained", default="runs/demo", help="the demo pretraining workdir")
    parser.add_argument("--workdir", default="runs/demo-paraphrase")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=1e-4)
    args = parser.parse_args(argv)
    tokenizer = os.path.join(args.pretrained, workdir_names.TOKENIZER_FILE)
    if not epath.Path(tokenizer).exists():
        sys.exit(f"{tokenizer} does not exist: run the demo pretraining first "
                 f"(`albert-jax pretrain --config=configs/pretrain.py:runlocal "
                 f"--workdir={args.pretrained}`)")
    data_path = write_paraphrase_task(args.workdir, num_train=args.steps * 32, num_dev=500)
    curves = {}
    for name, subdirectory, init_from in (("pretrained start", "pretrained", args.pretrained),
                                          ("from scratch", "scratch", "")):
        print(f"--- fine-tuning the demo model, {name}, on {data_path}", flush=True)
        workdir = os.path.join(args.workdir, subdirectory)
        finetune_run.finetune(demo_config(data_path, init_from, tokenizer, args.steps, args.lr),
                              workdir)
        curves[name] = _dev_accuracy_by_step(workdir)  # also right when a rerun found it done
    dev = (epath.Path(data_path) / "dev.tsv").read_bytes().decode("utf-8")
    labels = [line.split("\t", 1)[0] for line in dev.splitlines()[1:]]
    majority = max(labels.count("0"), labels.count("1")) / len(labels)
    steps = sorted(curves["pretrained start"])
    print(f"Paraphrase task in MRPC's layout, {len(labels)} dev pairs; dev accuracy at step "
          + " / ".join(map(str, steps)) + ":", flush=True)
    for name, curve in curves.items():
        print(f"  {name:<17} " + " / ".join(f"{curve[step]:.3f}" for step in steps), flush=True)
    print(f"  {'majority class':<17} {majority:.3f}", flush=True)
    new_pairs = write_new_pairs(os.path.join(args.workdir, NEW_PAIRS_FILE))
    print(f"New sentence pairs to predict on: {new_pairs} (`albert-jax predict "
          f"--workdir={os.path.join(args.workdir, 'pretrained')} --input={new_pairs}`)",
          flush=True)
    return 0


NEW_PAIRS_FILE = "new_pairs.jsonl"


def write_new_pairs(path: str) -> str:
    """A few sentence pairs the runs never saw (sentences of the demo corpus longer than the
    task's), for `albert-jax predict`: columns id, text, text_b; the first of each two is a
    paraphrase (one word left out), the second is not."""
    sentences = demo_sentences(min_words=13, max_words=13)[:4]
    rows = []
    for number, sentence in enumerate(sentences):
        words = sentence.split()
        rows.append({"id": f"paraphrase-{number}", "text": sentence,
                     "text_b": " ".join(words[:3] + words[4:])})
        rows.append({"id": f"unrelated-{number}", "text": sentence,
                     "text_b": sentences[(number + 1) % len(sentences)]})
    write_atomically(path, "".join(json.dumps(row) + "\n" for row in rows))
    return path


if __name__ == "__main__":
    sys.exit(main())
