"""`albert-jax data inspect`: a few decoded examples and the statistics of a built dataset.

  albert-jax data inspect --config=configs/pretrain.py:runlocal --num_examples=3
  albert-jax data inspect --config=configs/pretrain.py:runlocal --documents=5

With --documents=N it prints instead the first N documents of the corpus as the build reads
them (`print_documents`), before anything is built: one sentence per line, a blank line between
documents (SPEC 1.2), so the output is a corpus in the 2018 BERT format too.

An example prints as its two segments with every prediction shown as `[shown→original]`
(`[[MASK]→word]` for the 80% [MASK] case, `[word→word]` kept, `[other→word]` random), and its
sentence-order label spelled out. The statistics check a build against SPEC 1: mean length,
masked fraction (SPEC 1.4.3), masked whole-word n-gram lengths (SPEC 1.4.4), the 80/10/10 split
(SPEC 1.4.7) and the label balance (SPEC 1.3.5).
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any, Iterable

import ml_collections
import numpy as np
import tensorflow_datasets as tfds
from etils import epath

from albert_jax.data import corpus
from albert_jax.data.building import dataset_settings
from albert_jax.data.input import pipeline, shard_copy
from albert_jax.data.tokenizers import TextSettings, Tokenizer, text_damage

STATISTICS_EXAMPLES = 20_000  # per split: enough for +-1% on every fraction below


@dataclasses.dataclass
class SplitStatistics:
    """What `split_statistics` measured over the first `measured` examples of a split.

    ngram_words: fraction of masked runs that cover n whole words. A run is a maximal stretch
      of consecutive predicted positions: two masked n-grams that happen to touch count as one
      longer run, so runs are a little longer than SPEC 1.4.4's 6/11, 3/11, 2/11 draw.
    replacements: fraction of predictions whose input is [MASK], the original token (kept), or
      another token (random); a random draw equal to the original counts as kept (p = 1/vocab).
    """
    examples: int
    measured: int
    mean_length: float
    masked_fraction: float
    predictions_per_example: float
    ngram_words: dict[int, float]
    replacements: dict[str, float]
    sentence_labels: dict[int, float]

    def report(self) -> str:
        ngrams = ", ".join(f"{n}: {fraction:.3f}" for n, fraction in sorted(self.ngram_words.items()))
        replacements = ", ".join(f"{name} {fraction:.3f}"
                                 for name, fraction in self.replacements.items())
        labels = ", ".join(f"{label}: {fraction:.3f}"
                           for label, fraction in sorted(self.sentence_labels.items()))
        return (f"{self.examples} examples (statistics over {self.measured})\n"
                f"  mean real length {self.mean_length:.1f} tokens, "
                f"{self.predictions_per_example:.2f} predictions per example, "
                f"masked fraction {self.masked_fraction:.4f} (SPEC 1.4.3)\n"
                f"  masked runs in whole words {{{ngrams}}} (SPEC 1.4.4 draw: 1: 0.545, 2: 0.273, "
                f"3: 0.182; touching n-grams merge into longer runs)\n"
                f"  replacements {replacements} (SPEC 1.4.7: 0.8 / 0.1 / 0.1)\n"
                f"  sentence labels {{{labels}}}")


def masked_word_runs(features: dict[str, np.ndarray]) -> list[int]:
    """Lengths, in whole words, of the maximal runs of predicted positions of one example.

    A word starts where token_boundary is 1 (SPEC 1.4.1); a run that starts inside a word
    counts that partial word as one.
    """
    real = features["masked_lm_weights"] > 0
    masked = np.zeros(len(features["input_ids"]) + 1, bool)
    masked[features["masked_lm_positions"][real]] = True
    edges = np.flatnonzero(np.diff(np.concatenate([[False], masked]).astype(np.int8)))
    runs = []
    for start, end in zip(edges[::2], edges[1::2]):
        words = int(features["token_boundary"][start:end].sum())
        runs.append(words + (features["token_boundary"][start] == 0))
    return runs


def split_statistics(examples: Iterable[dict[str, np.ndarray]], *, num_examples: int,
                     mask_id: int) -> SplitStatistics:
    """Statistics of `examples` (SPEC 1.5 feature dicts, unbatched) of a split of num_examples."""
    measured = real_tokens = predictions = 0
    runs: collections.Counter[int] = collections.Counter()
    replacements: collections.Counter[str] = collections.Counter()
    labels: collections.Counter[int] = collections.Counter()
    for features in examples:
        measured += 1
        real_tokens += int(features["input_mask"].sum())
        real = features["masked_lm_weights"] > 0
        positions = features["masked_lm_positions"][real]
        predictions += len(positions)
        shown = features["input_ids"][positions]
        original = features["masked_lm_ids"][real]
        is_mask = shown == mask_id
        is_kept = ~is_mask & (shown == original)
        replacements.update(mask=int(is_mask.sum()), kept=int(is_kept.sum()),
                            random=int((~is_mask & ~is_kept).sum()))
        runs.update(masked_word_runs(features))
        labels[int(features["next_sentence_labels"][0])] += 1
    if not measured:
        raise ValueError("no examples to measure")
    total_runs = max(1, sum(runs.values()))
    total_predictions = max(1, predictions)
    return SplitStatistics(
        examples=num_examples, measured=measured, mean_length=real_tokens / measured,
        masked_fraction=predictions / max(1, real_tokens),
        predictions_per_example=predictions / measured,
        ngram_words={n: count / total_runs for n, count in runs.items()},
        replacements={name: replacements[name] / total_predictions
                      for name in ("mask", "kept", "random")},
        sentence_labels={label: count / measured for label, count in labels.items()})


_LABEL_MEANINGS = {
    "sop": {0: "in order (A then B, as in the document)",
            1: "swapped (B came before A in the document)"},
    "nsp": {0: "B follows A in the document", 1: "random next (B from another document)"},
    "none": {0: "in order (no sentence objective)", 1: "random next (B from another document)"},
}


def format_example(features: dict[str, np.ndarray], tokenizer: Tokenizer, *,
                   sentence_objective: str, reference_compat: bool = False) -> str:
    """Segments A and B of one example, predictions as `[shown→original]`, the label in words."""
    length = int(features["input_mask"].sum())
    real = features["masked_lm_weights"] > 0
    originals = dict(zip(features["masked_lm_positions"][real].tolist(),
                         features["masked_lm_ids"][real].tolist()))
    shown_pieces = tokenizer.id_to_piece(features["input_ids"][:length])
    segments: dict[int, str] = collections.defaultdict(str)
    for position, piece in enumerate(shown_pieces):
        # A piece that starts a word ("▁" in front, or no "##") gets a space before it.
        if position in originals:
            starts_word, original = tokenizer.bare_piece(
                tokenizer.id_to_piece([originals[position]])[0])
            space = " " if starts_word else ""
            text = f"{space}[{tokenizer.bare_piece(piece)[1]}→{original}]"
        elif piece in ("[CLS]", "[SEP]"):
            text = f" {piece} "
        else:
            starts_word, bare = tokenizer.bare_piece(piece)
            text = f" {bare}" if starts_word else bare
        segments[int(features["segment_ids"][position])] += text
    label = int(features["next_sentence_labels"][0])
    meaning = _LABEL_MEANINGS[sentence_objective][label]
    if sentence_objective == "sop" and label == 1 and reference_compat:
        meaning += ", or B from another document (SPEC 1.3.5a reference quirk)"
    return (f"  label {label}: {meaning}; {length} tokens, {len(originals)} predictions\n"
            f"  A: {' '.join(segments[0].split())}\n  B: {' '.join(segments[1].split())}")


def print_documents(config: ml_collections.ConfigDict, num_documents: int) -> None:
    """`albert-jax data inspect --documents=N`: the first `num_documents` documents of
    config.data.corpus as the build reads them (data.documents, data.sentences, data.language,
    ...), one sentence per line, a blank line between documents (SPEC 1.2), on stdout."""
    settings = corpus.ReadSettings.from_config(config.data)
    for index, document in enumerate(corpus.iter_documents(config.data.corpus, settings)):
        if index == num_documents:
            break
        print(("\n" if index else "") + "\n".join(document))


def inspect_from_config(config: ml_collections.ConfigDict, num_examples: int) -> None:
    """`albert-jax data inspect`: prints `num_examples` decoded train examples and statistics."""
    dataset_dir = dataset_settings.dataset_dir(config)
    if not (epath.Path(dataset_dir) / "dataset_info.json").exists():
        raise FileNotFoundError(
            f"no dataset at {dataset_dir}: run `albert-jax data build` with the same config first")
    tokenizer = Tokenizer.load(config.data.tokenizer, TextSettings.from_config(config.data))
    print(f"dataset {dataset_dir}")
    # What the reference text settings do to the corpus, on its first sentences.
    sample = corpus.sample_sentences(corpus.list_sources(config.data.corpus),
                                     text_damage.SAMPLE_SENTENCES, int(config.seed),
                                     settings=corpus.ReadSettings.from_config(config.data))
    for line in text_damage.warnings(tokenizer, sample):
        print(f"  {line}")
    readable_dir, train_shards = dataset_dir, None
    if shard_copy.is_bucket(dataset_dir):
        # ArrayRecord reads local files only: copy the first train shard and the eval split (the
        # part of host 0 of as many hosts as there are train shards), not the whole dataset.
        num_train_shards = len(tfds.builder_from_directory(dataset_dir).info.splits["train"]
                               .shard_lengths)
        readable_dir = shard_copy.local_dataset_dir(dataset_dir, config.data.local_dir)
        shard_copy.copy_host_part(dataset_dir, readable_dir, process_index=0,
                                  process_count=num_train_shards)
        train_shards = [0]
        print(f"  (examples and statistics of its first train shard, copied to {readable_dir})")
    sources: dict[str, Any] = {}
    for split in ("train", "eval"):
        try:
            sources[split] = pipeline.SplitSource(readable_dir, split,
                                                  shards=train_shards if split == "train" else None)
        except ValueError:  # no eval split (eval_fraction 0)
            continue
    metadata = sources["train"].metadata
    settings = metadata["settings"]
    for split, counts in metadata["splits"].items():
        print(f"  {split}: built from {counts['documents']} documents, {counts['sentences']} "
              f"sentences: {counts['instances']} examples")
    print(f"\n{num_examples} train examples ([shown→original] marks each prediction):")
    train = sources["train"]
    for index in range(min(num_examples, len(train))):
        print(f"example {index}\n" + format_example(
            train[index], tokenizer, sentence_objective=settings["sentence_objective"],
            reference_compat=settings["reference_compat"]))
    for split, source in sources.items():
        measured = min(len(source), STATISTICS_EXAMPLES)
        statistics = split_statistics((source[index] for index in range(measured)),
                                      num_examples=len(source), mask_id=metadata["mask_id"])
        print(f"\n{split}: {statistics.report()}")
