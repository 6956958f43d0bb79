"""SQuAD v1.1 training windows without the answer: `cls` (the reference) against `drop`
(albert_jax's earlier behaviour).

  nice -n 10 .venv/bin/python -m benchmarks.squad_windows [--steps=1000] [--seeds=3]

Generates a small SQuAD v1.1-format train and dev set whose contexts are longer than one window
(no download), trains a SentencePiece model on it, fine-tunes a tiny model from scratch once
per `--config.train_windows_without_answer` and seed (same data, same steps, same seeds), and
prints the final dev exact_match / f1 of the official v1.1 evaluator as a markdown table.

The task: a context of filler sentences holds "The key was <value>." and three distractors of
the same form ("The cup was <value>.", lamp, boat) at random places, values drawn from one pool;
the question is always "What was the key?". About 4 windows per context, so a window often holds
only distractors: `cls` trains on those windows with the answer at [CLS]; `drop` never sees
them, though at prediction every window puts forward candidates.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time

from albert_jax.data import tokenizers as tokenizer_lib
from albert_jax.finetune import run as finetune_run
from albert_jax.finetune.squad import data as squad
from configs import squad as squad_config

FILLER = ("man woman child dog cat bird house road car book song market garden door table "
          "night old small big quiet new walked ran saw found sold liked near over under and "
          "but").split()
THINGS = ["key", "cup", "lamp", "boat"]  # the question asks for the first; the rest distract
VALUES = ["red", "green", "blue", "yellow", "purple", "brown", "grey", "pink", "paris", "london",
          "rome", "madrid", "horse", "tiger", "rabbit", "eagle"]
SEQ_LEN, DOC_STRIDE, MAX_QUERY_LENGTH = 48, 16, 8
MODES = squad.WINDOWS_WITHOUT_ANSWER  # ("cls", "drop")


def _paragraph(rng: random.Random, index: int) -> dict:
    """One article: 8 filler sentences and "The <thing> was <value>." for each thing, at random
    places; one question, for the key."""
    sentences = [" ".join(rng.choice(FILLER) for _ in range(rng.randint(5, 8))).capitalize()
                 + "." for _ in range(8)]
    values = dict(zip(THINGS, rng.sample(VALUES, len(THINGS))))
    for thing, value in values.items():
        sentences.insert(rng.randrange(len(sentences) + 1), f"The {thing} was {value}.")
    context = " ".join(sentences)
    answer_start = context.index(f"The key was {values['key']}.") + len("The key was ")
    qas = [{"id": f"p{index}", "question": "What was the key?",
            "answers": [{"text": values["key"], "answer_start": answer_start}]}]
    return {"title": f"article_{index}", "paragraphs": [{"context": context, "qas": qas}]}


def write_data(directory: str, num_train: int, num_dev: int, seed: int = 0) -> dict[str, str]:
    """train-v1.1.json (num_train contexts), dev-v1.1.json (num_dev), spm.model; their paths."""
    rng = random.Random(seed)
    datasets = {split: {"version": "1.1", "data": [_paragraph(rng, index)
                                                   for index in range(count)]}
                for split, count in (("train", num_train), ("dev", num_dev))}
    paths = {split: os.path.join(directory, f"{split}-v1.1.json") for split in datasets}
    for split, dataset in datasets.items():
        with open(paths[split], "w", encoding="utf-8") as file:
            json.dump(dataset, file)
    # Shuffled words, many of them, so that the pieces are whole words.
    words = FILLER + THINGS + VALUES + ["the", "was", "what"]
    sentences = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(3000)]
    paths["tokenizer"] = tokenizer_lib.train(sentences, os.path.join(directory, "spm.model"),
                                             vocab_size=90)
    return paths


def train_windows(paths: dict[str, str], mode: str) -> squad.FeatureStats:
    """What `albert-jax finetune` builds from the train file with this mode."""
    _, _, stats = squad.build_features(
        squad.read_squad(paths["train"], "v1.1"), tokenizer_lib.Tokenizer.load(paths["tokenizer"]),
        version="v1.1", max_seq_length=SEQ_LEN, doc_stride=DOC_STRIDE,
        max_query_length=MAX_QUERY_LENGTH, training=True, windows_without_answer=mode)
    return stats


def finetune(paths: dict[str, str], mode: str, seed: int, steps: int, workdir: str
             ) -> dict[str, float]:
    """The dev exact_match and f1 after `steps` steps (the one evaluation, at the end)."""
    config = squad_config.get_config("version=1.1,runlocal")
    config.data.train_file, config.data.dev_file = paths["train"], paths["dev"]
    config.tokenizer = paths["tokenizer"]
    config.train_windows_without_answer = mode
    config.seed = seed
    config.seq_len, config.doc_stride, config.max_query_length = (SEQ_LEN, DOC_STRIDE,
                                                                  MAX_QUERY_LENGTH)
    config.total_steps = config.eval_every_steps = config.checkpoint_every_steps = steps
    config.optim.lr, config.optim.warmup_steps = 1e-3, 100
    # The tiny preset (2 layers, 4 heads) at H = E = 64: at H=32, E=16 neither mode got past
    # picking one of the four values at random in 600 steps.
    overrides = config.model_overrides
    overrides.embedding_size, overrides.hidden_size, overrides.intermediate_size = 64, 64, 128
    config.log_every_steps = 100
    best = finetune_run.finetune(config, workdir)
    return best["metrics"]["dev"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--num_train", type=int, default=400, help="train questions")
    parser.add_argument("--num_dev", type=int, default=200, help="dev questions")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="squad_windows_")
    paths = write_data(root, args.num_train, args.num_dev)
    results: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    began = time.time()
    for seed in range(args.seeds):
        for mode in MODES:  # interleaved: both modes see the same machine load
            results[mode].append(finetune(paths, mode, seed, args.steps,
                                          os.path.join(root, f"{mode}_seed{seed}")))
    elapsed = time.time() - began
    print(f"\ndata: {args.num_train} train / {args.num_dev} dev questions; seq_len "
          f"{SEQ_LEN}, doc_stride {DOC_STRIDE}; tiny preset at H = E = 64 from scratch, "
          f"{args.steps} steps of "
          f"batch 16, seeds 0..{args.seeds - 1}; {elapsed:.0f} s")
    print("| train_windows_without_answer | train windows (without answer) | "
          + " | ".join(f"seed {seed} EM / F1" for seed in range(args.seeds))
          + " | median EM / F1 |")
    print("|---|---|" + "---|" * (args.seeds + 1))
    for mode in MODES:
        stats = train_windows(paths, mode)
        kept = stats.windows_without_answer if mode == "cls" else 0
        cells = [f"{run['exact_match']:.1f} / {run['f1']:.1f}" for run in results[mode]]
        median = (statistics.median(run["exact_match"] for run in results[mode]),
                  statistics.median(run["f1"] for run in results[mode]))
        print(f"| {mode} | {stats.features} ({kept}) | " + " | ".join(cells)
              + f" | {median[0]:.1f} / {median[1]:.1f} |")


if __name__ == "__main__":
    main()
