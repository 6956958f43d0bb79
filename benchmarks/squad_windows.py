"""SQuAD v1.1 training windows without the answer: `cls` (the reference) against `drop` (issue 28).

  nice -n 10 .venv/bin/python -m benchmarks.squad_windows [--steps=400] [--seeds=3]

Generates a small SQuAD v1.1-format train and dev set whose contexts are longer than one window
(no download), trains a SentencePiece model on it, fine-tunes the tiny model from scratch once
per `--config.train_windows_without_answer` and seed (same data, same steps, same seeds), and
prints the final dev exact_match / f1 of the official v1.1 evaluator as a markdown table.

The task: a context of filler sentences holds one fact of each kind ("The colour was red.",
"The city was rome.", ...) at random places; the question asks for one kind ("What was the
colour?"). Value words are distinct per kind, so the model has to tie the question to one of
the facts; the facts of the other kinds are distractors, and a window often holds only
distractors. `cls` trains on those windows with the answer at [CLS]; `drop` never sees them,
though at prediction every window puts forward candidates.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time

from albert_jax.data import tokenizer as tokenizer_lib
from albert_jax.finetune import run as finetune_run, squad
from configs import squad as squad_config

FILLER = ("man woman child dog cat bird house road car book song market garden door table "
          "night old small big quiet new walked ran saw found sold liked near over under and "
          "but").split()
FACTS = {  # kind -> its values (no value is a filler word or another kind's value)
    "colour": ["red", "green", "blue", "yellow", "purple", "brown", "grey", "pink"],
    "city": ["paris", "london", "rome", "madrid", "vienna", "prague", "oslo", "lisbon"],
    "animal": ["horse", "tiger", "rabbit", "eagle", "salmon", "wolf", "mouse", "goat"],
    "number": ["seven", "eleven", "twenty", "ninety", "forty", "sixty", "three", "eight"],
}
SEQ_LEN, DOC_STRIDE, MAX_QUERY_LENGTH = 48, 16, 8
MODES = squad.WINDOWS_WITHOUT_ANSWER  # ("cls", "drop")


def _paragraph(rng: random.Random, index: int, questions: int) -> dict:
    """One article: 8 filler sentences and one fact of each kind at random places."""
    sentences = [" ".join(rng.choice(FILLER) for _ in range(rng.randint(5, 8))).capitalize()
                 + "." for _ in range(8)]
    values = {kind: rng.choice(options) for kind, options in FACTS.items()}
    for kind, value in values.items():
        sentences.insert(rng.randrange(len(sentences) + 1), f"The {kind} was {value}.")
    context = " ".join(sentences)
    qas = []
    for number, kind in enumerate(rng.sample(sorted(FACTS), questions)):
        fact = f"The {kind} was {values[kind]}."
        answer_start = context.index(fact) + len(f"The {kind} was ")
        qas.append({"id": f"p{index}_q{number}", "question": f"What was the {kind}?",
                    "answers": [{"text": values[kind], "answer_start": answer_start}]})
    return {"title": f"article_{index}", "paragraphs": [{"context": context, "qas": qas}]}


def write_data(directory: str, num_train: int, num_dev: int, seed: int = 0) -> dict[str, str]:
    """train-v1.1.json (num_train contexts), dev-v1.1.json (num_dev), spm.model; their paths."""
    rng = random.Random(seed)
    datasets = {split: {"version": "1.1", "data": [_paragraph(rng, index, 2)
                                                   for index in range(count)]}
                for split, count in (("train", num_train), ("dev", num_dev))}
    paths = {split: os.path.join(directory, f"{split}-v1.1.json") for split in datasets}
    for split, dataset in datasets.items():
        with open(paths[split], "w", encoding="utf-8") as file:
            json.dump(dataset, file)
    # Shuffled words, many of them, so that the pieces are whole words.
    words = FILLER + [*FACTS, "the", "was", "what"] + sum(FACTS.values(), [])
    sentences = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(3000)]
    paths["tokenizer"] = tokenizer_lib.train(sentences, os.path.join(directory, "spm.model"),
                                             vocab_size=108)
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
    config.optim.lr, config.optim.warmup_steps = 2e-3, 40
    # The tiny preset, twice as wide: at H=32 neither mode gets past picking a fact at random.
    overrides = config.model_overrides
    overrides.embedding_size, overrides.hidden_size, overrides.intermediate_size = 32, 64, 128
    config.log_every_steps = 100
    best = finetune_run.finetune(config, workdir)
    return best["metrics"]["dev"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--num_train", type=int, default=240, help="train contexts (2 questions each)")
    parser.add_argument("--num_dev", type=int, default=100, help="dev contexts (2 questions each)")
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
    print(f"\ndata: {2 * args.num_train} train / {2 * args.num_dev} dev questions; seq_len "
          f"{SEQ_LEN}, doc_stride {DOC_STRIDE}; tiny model from scratch, {args.steps} steps of "
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
