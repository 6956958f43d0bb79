"""Fill-mask on a pretraining run: what `albert-jax predict` does with a pretraining workdir.

  albert-jax predict --workdir=runs/pretrain --input=masked.jsonl --top_k=5 [--step=N]

The input: JSON Lines with a `text` field, or a plain text file (any other extension), one text a
line; each text holds one or more `[MASK]`. The run's masked-LM head (SPEC 5.2) at its latest
intact checkpoint (or `--step`) scores every [MASK] position; one JSON line per text:
  {"text": ..., "masks": [[{"piece": "▁notice", "id": 1234, "probability": 0.41}, ...top_k],
                          ...one list per [MASK], left to right]}
The text around each [MASK] is tokenised as HuggingFace's tokenizer does around its mask token,
so the exported AlbertForMaskedLM's `fill-mask` pipeline scores the same positions.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Iterator

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from etils import epath

from albert_jax import config as config_lib
from albert_jax.data.input import pipeline
from albert_jax.data.tokenizers import TextSettings, Tokenizer
from albert_jax.errors import ConfigError
from albert_jax.finetune.core.task import ArraySource, padded, real_rows
from albert_jax.model import ModelConfig
from albert_jax.pretraining import PretrainingTask
from albert_jax.train import workdir as workdir_names
from albert_jax.train.task import Batch, HostBatch

MASK = "[MASK]"
DEFAULT_TOP_K = 5


@dataclasses.dataclass(frozen=True)
class MaskedText:
    text: str
    source: str  # "<file>:<line>"


class FillMaskTask(PretrainingTask):
    """A pretraining run's model, asked for the top_k pieces at each [MASK] of a text. Its
    batches run at length buckets (the fine-tuning default, config_lib.DEFAULT_LENGTH_BUCKETS,
    below the run's seq_len): a batch of short texts does not pay for seq_len."""

    sequence_fields = ("input_ids", "segment_ids", "input_mask")

    def __init__(self, config: ml_collections.ConfigDict, model_config: ModelConfig,
                 tokenizer: Tokenizer, top_k: int = DEFAULT_TOP_K) -> None:
        super().__init__(config, model_config)
        if not 1 <= top_k <= model_config.vocab_size:
            raise ConfigError(f"--top_k={top_k}: give 1 to the vocabulary size "
                              f"{model_config.vocab_size}")
        self.tokenizer = tokenizer
        self.top_k = top_k

    @classmethod
    def checkpoint_to_predict(cls, run_dir: epath.Path, step: int | None
                              ) -> tuple[epath.Path, int | None, str]:
        """The run's checkpoints folder, the step (None: the latest intact one) and how to name
        it in messages."""
        which = f"step {step}" if step is not None else "the latest checkpoint"
        return (run_dir / workdir_names.CHECKPOINTS_SUBDIR, step,
                f"{which} of the pretraining run {run_dir}")

    @classmethod
    def from_run(cls, config: ml_collections.ConfigDict, run_dir: epath.Path,
                 model_config: ModelConfig, *, top_k: int | None = None) -> "FillMaskTask":
        tokenizer_path = workdir_names.tokenizer_path(run_dir)
        if tokenizer_path is None:
            raise FileNotFoundError(
                f"run {run_dir} has no tokenizer copy "
                f"({' or '.join(workdir_names.TOKENIZER_FILES.values())}): a pretraining run "
                "keeps its tokenizer there")
        tokenizer = Tokenizer.load(os.fspath(tokenizer_path), TextSettings.recorded(
            os.fspath(tokenizer_path), TextSettings.from_config(config.data)))
        config = config.copy_and_resolve_references()
        config.length_buckets = config.get("length_buckets", config_lib.DEFAULT_LENGTH_BUCKETS)
        return cls(config, model_config, tokenizer, DEFAULT_TOP_K if top_k is None else top_k)

    def prediction_splits(self, kind: str) -> tuple[str, ...]:
        raise ConfigError("albert-jax evaluate reads a fine-tuning workdir; a pretraining run's "
                          "eval metrics are in its metrics.jsonl")

    # --- Inputs ----------------------------------------------------------------------------------
    def read_inputs(self, path: str, chunk_rows: int) -> Iterator[list[MaskedText]]:
        """The texts of `path` (JSON Lines with `text`, else one text a line), in chunks."""
        is_jsonl = os.path.splitext(path)[1].lower() == ".jsonl"
        chunk = []
        with epath.Path(path).open("r", encoding="utf-8-sig") as file:
            for number, line in enumerate(file, 1):
                if not line.strip():
                    continue
                text = _json_text(line, f"{path}:{number}") if is_jsonl else line.rstrip("\n")
                if MASK not in text:
                    raise ValueError(f"{path}:{number}: no {MASK} in the text "
                                     f"{text[:60]!r}; fill-mask predicts the pieces at each "
                                     f"{MASK}")
                chunk.append(MaskedText(text, f"{path}:{number}"))
                if len(chunk) == chunk_rows:
                    yield chunk
                    chunk = []
        if chunk:
            yield chunk

    def _ids(self, example: MaskedText) -> np.ndarray:
        """[CLS] pieces [SEP], each [MASK] the mask id and the text between encoded on its own
        (as HuggingFace's tokenizer splits around its special tokens)."""
        parts = example.text.split(MASK)
        ids = [self.tokenizer.cls_id]
        for number, part in enumerate(parts):
            if number:
                ids.append(self.tokenizer.mask_id)
            ids.extend(self.tokenizer.encode(part).tolist())
        ids.append(self.tokenizer.sep_id)
        if len(ids) > self.config.seq_len:
            raise ValueError(f"{example.source}: {len(ids)} pieces with [CLS] and [SEP], more "
                             f"than the run's seq_len {self.config.seq_len}; shorten the text")
        return np.asarray(ids, np.int32)

    def input_features(self, examples: list[MaskedText]) -> dict[str, np.ndarray]:
        """input_ids, segment_ids, input_mask [texts, seq_len]; masked_lm_positions and
        masked_lm_weights [texts, most masks of a text]; zero labels for the loss sums."""
        rows = [self._ids(example) for example in examples]
        positions = [np.flatnonzero(ids == self.tokenizer.mask_id) for ids in rows]
        width = max(len(p) for p in positions)
        arrays = {name: np.zeros((len(rows), self.config.seq_len), np.int32)
                  for name in ("input_ids", "segment_ids", "input_mask")}
        arrays["masked_lm_positions"] = np.zeros((len(rows), width), np.int32)
        arrays["masked_lm_weights"] = np.zeros((len(rows), width), np.float32)
        for row, (ids, where) in enumerate(zip(rows, positions)):
            arrays["input_ids"][row, :len(ids)] = ids
            arrays["input_mask"][row, :len(ids)] = 1
            arrays["masked_lm_positions"][row, :len(where)] = where
            arrays["masked_lm_weights"][row, :len(where)] = 1.0
        arrays["masked_lm_ids"] = np.zeros_like(arrays["masked_lm_positions"])
        arrays["next_sentence_labels"] = np.zeros((len(rows), 1), np.int32)
        return arrays

    def batches_of(self, arrays: dict[str, np.ndarray]) -> Iterator[HostBatch]:
        """This host's rows of `arrays` in padded global eval batches."""
        return iter(pipeline.make_dataset(
            ArraySource(padded(arrays, self.config.eval_batch_size)),
            batch_size=self.config.eval_batch_size, process_index=jax.process_index(),
            process_count=jax.process_count(), repeat=False, shuffle_seed=None,
            dynamic_masking=None))

    # --- Predictions -----------------------------------------------------------------------------
    def predictions(self, outputs: tuple[jax.Array, jax.Array], batch: Batch
                    ) -> dict[str, jax.Array]:
        """top_ids, top_probabilities [batch, masks, top_k]: the most probable pieces at each
        masked position, most probable first."""
        mlm_logits, _ = outputs
        probabilities = jax.nn.softmax(mlm_logits.astype(jnp.float32), axis=-1)
        top_probabilities, top_ids = jax.lax.top_k(probabilities, self.top_k)
        return {"top_ids": top_ids, "top_probabilities": top_probabilities,
                "masked_lm_weights": batch["masked_lm_weights"]}

    def prediction_records(self, examples: list[MaskedText],
                           predictions: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        """One JSON object per text: the text and, per [MASK], the top_k pieces."""
        predictions = real_rows(predictions)
        records = []
        for row, example in enumerate(examples):
            masks = []
            for slot in np.flatnonzero(predictions["masked_lm_weights"][row] > 0):
                ids = predictions["top_ids"][row, slot].tolist()
                masks.append([{"piece": piece, "id": int(piece_id), "probability": float(p)}
                              for piece, piece_id, p in zip(
                                  self.tokenizer.id_to_piece(ids), ids,
                                  predictions["top_probabilities"][row, slot])])
            records.append({"text": example.text, "masks": masks})
        return records


def _json_text(line: str, where: str) -> str:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        raise ValueError(f"{where}: not valid JSON ({error.msg}); each line must be one JSON "
                         'object such as {"text": "The [MASK] sat."}') from None
    if not isinstance(row, dict) or not isinstance(row.get("text"), str):
        raise ValueError(f'{where}: expected a JSON object with a "text" string, got '
                         f"{line.strip()[:60]}")
    return row["text"]
