"""SQuAD v1.1 / v2.0 as a task of the training loop (SPEC 8.3).

  v1.1: AlbertForQuestionAnswering (cls/squad head), start/end cross-entropy; dev exact_match
        and f1 of the official v1.1 evaluator; the best checkpoint by f1.
  v2.0: AlbertForQuestionAnsweringV2 (XLNet-style head with an answerability class), span plus
        sigmoid loss; dev metrics of the official v2.0 evaluator with null_odds as na_probs;
        the best checkpoint by best_f1 (why: `SquadTask.__init__`).

Data: the examples become sliding-window features (finetune/squad.py), one row per window, held
in memory and streamed like GLUE's (finetune/task.py). Evaluation gathers per window its model
outputs and `feature_index`, so the windows of one question come together again whatever the
devices, hosts and padding (rows of `example_weight` 0 are dropped); post-processing
(finetune/squad_postprocess.py) picks each question's answer over all its windows.

Dev metrics are the evaluator's percentages (0-100), named as the official scripts name them,
except v2.0's "exact", which is `exact_match` here as in v1.1; counts ("total") are left out.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from albert_jax.data.tokenizer import Tokenizer
from albert_jax.errors import ConfigError
from albert_jax.finetune import squad, squad_eval, squad_postprocess
from albert_jax.finetune.pretrained import Pretrained
from albert_jax.finetune.squad import FeatureInfo, SquadExample
from albert_jax.finetune.task import FinetuneTask
from albert_jax.model import (AlbertForQuestionAnswering, AlbertForQuestionAnsweringV2, ModelConfig,
                              example_inputs, heads)
from albert_jax.train import flops
from albert_jax.train.task import Batch, Selection

METRICS_FILE = "metrics.json"
_TFDS_SPLITS = {"train": "train", "dev": "validation"}


@dataclasses.dataclass(frozen=True)
class SquadResult:
    """The post-processed predictions of one eval split.

    predictions: question id -> best non-null answer text; nbest: question id -> n-best entries;
    null_odds: v2.0 question id -> null score minus best non-null score (None for v1.1);
    evaluation: the official evaluator's output on `predictions` (with null_odds as na_probs).
    """
    predictions: dict[str, str]
    nbest: dict[str, list[dict[str, Any]]]
    null_odds: dict[str, float] | None
    evaluation: dict[str, float]


def evaluator_dataset(examples: list[SquadExample]) -> dict[str, Any]:
    """The official JSON structure the evaluator reads, rebuilt from `examples` (so a TFDS split
    is scored like its JSON file): one paragraph per question, only ids and answer texts."""
    return {"data": [{"paragraphs": [
        {"qas": [{"id": example.qid, "answers": [{"text": answer.text}
                                                 for answer in example.answers]}]}
        for example in examples]}]}


class SquadTask(FinetuneTask):
    """SQuAD `config.version` (v1.1 or v2.0) from data.train_file/data.dev_file or a TFDS name."""

    eval_splits = ("dev",)
    # Every batch at seq_len: the n-best of SPEC 8.3 ranks the span logits of every position,
    # padding included, so evaluation needs all of them; no length buckets.
    sequence_fields = ()

    def __init__(self, config: ml_collections.ConfigDict, model_config: ModelConfig,
                 tokenizer: Tokenizer, pretrained: Pretrained | None) -> None:
        super().__init__(config, model_config, tokenizer, pretrained)
        if config.get("length_buckets"):
            raise ConfigError(f"config length_buckets={tuple(config.length_buckets)}: SQuAD runs "
                              "every batch at seq_len (its n-best reads every position's "
                              "logits); set --config.length_buckets='()'")
        self.version = config.version
        self.name = f"SQuAD {self.version}"
        if self.version == "v1.1":
            self.model = AlbertForQuestionAnswering(model_config)
            self.selection = Selection("dev", "f1")  # SPEC 8.3
        else:
            self.model = AlbertForQuestionAnsweringV2(
                model_config, answer_class_dropout=config.classifier_dropout)
            # best_f1: the F1 with the no-answer threshold tuned on dev, which is how the
            # predictions are used (predictions_with_null.json) and what the reference reports
            # as v2.0 F1 (SPEC 8.3 QUIRK). Plain f1 applies the evaluator's fixed threshold 1.0
            # to null_odds, whose scale the model is free to change from step to step.
            self.selection = Selection("dev", "best_f1")
        self._eval_sets: dict[str, tuple[list[SquadExample], list[FeatureInfo],
                                         dict[str, np.ndarray]]] = {}
        self._last_postprocess: tuple[str, dict[str, np.ndarray], SquadResult] | None = None

    # --- Data ----------------------------------------------------------------------------------
    def examples(self, split: str) -> list[SquadExample]:
        """The questions of "train" or "dev", from the config's file or TFDS split."""
        data = self.config.data
        if data.tfds_name:
            return squad.read_tfds(data.tfds_name, _TFDS_SPLITS[split], self.version,
                                   data.tfds_data_dir or None)
        return squad.read_squad(data.train_file if split == "train" else data.dev_file,
                                self.version)

    def _features(self, examples: list[SquadExample], split: str, *, training: bool
                  ) -> tuple[dict[str, np.ndarray], list[FeatureInfo]]:
        config = self.config
        # Only training reads the key, so `albert-jax evaluate` of an older workdir still works.
        labels = ({"windows_without_answer": config.train_windows_without_answer} if training
                  else {})
        arrays, infos, stats = squad.build_features(
            examples, self.tokenizer, version=self.version, max_seq_length=config.seq_len,
            doc_stride=config.doc_stride, max_query_length=config.max_query_length,
            training=training, **labels)
        print(f"{self.name} {split}: {stats.report()}", flush=True)
        if not infos:
            raise ValueError(f"{self.name} {split}: no feature could be built from "
                             f"{len(examples)} questions ({stats.report()})")
        return arrays, infos

    def _eval_set(self, split: str) -> tuple[list[SquadExample], list[FeatureInfo],
                                             dict[str, np.ndarray]]:
        if split not in self._eval_sets:
            examples = self.examples(split)
            arrays, infos = self._features(examples, split, training=False)
            # feature_index, not example_index, keys the gathered outputs (module docstring).
            arrays = {key: value for key, value in arrays.items() if key != "example_index"}
            arrays["feature_index"] = np.arange(len(infos), dtype=np.int32)
            self._eval_sets[split] = examples, infos, arrays
        return self._eval_sets[split]

    def train_features(self) -> dict[str, np.ndarray]:
        arrays, _ = self._features(self.examples("train"), "train", training=True)
        # The dev file is read now too, so a wrong one fails before the first step, not at the
        # first evaluation.
        self._eval_set("dev")
        return {key: value for key, value in arrays.items() if key != "example_index"}

    def eval_features(self, split: str) -> dict[str, np.ndarray]:
        return self._eval_set(split)[2]

    def prediction_splits(self, kind: str) -> tuple[str, ...]:
        if kind != "dev":
            raise ConfigError(f"SQuAD has no public {kind} set (the official test set is "
                              "hidden); use --split=dev")
        return self.eval_splits

    # --- Model -----------------------------------------------------------------------------------
    def init_inputs(self) -> tuple[jax.Array, ...]:
        inputs = example_inputs((1, self.config.seq_len))
        if self.version == "v1.1":
            return inputs
        return *inputs, jnp.zeros((1, self.config.seq_len), jnp.int32)  # p_mask

    def train_batch_spec(self, batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
        spec = super().train_batch_spec(batch_size)
        del spec["labels"]
        ints = jax.ShapeDtypeStruct((batch_size,), jnp.int32)
        return dict(spec, start_positions=ints, end_positions=ints, is_impossible=ints,
                    p_mask=spec["input_ids"])

    def flops_per_example(self, seq_len: int) -> float:
        # Every position's span logits: the whole last layer.
        return flops.forward_flops_per_sequence(self.model_config, seq_len, 0)

    def apply(self, params: Any, batch: Batch, *, train: bool, rng: jax.Array | None) -> Any:
        rngs = {"dropout": rng} if train and rng is not None else {}
        inputs = (batch["input_ids"], batch["segment_ids"], batch["input_mask"])
        if self.version == "v1.1":
            return self.model.apply({"params": params}, *inputs, deterministic=not train,
                                    rngs=rngs)
        # Training conditions the end logits on the gold start; evaluation runs the beam.
        return self.model.apply({"params": params}, *inputs, batch["p_mask"],
                                batch["start_positions"] if train else None,
                                deterministic=not train, rngs=rngs)

    # --- Loss ------------------------------------------------------------------------------------
    def loss_sums(self, outputs: Any, batch: Batch) -> dict[str, jax.Array]:
        """outputs: (start_logits, end_logits) [batch, seq] (v1.1) or the v2 head's dict."""
        weights = batch["example_weight"].astype(jnp.float32)
        if "start_positions" not in batch:  # dev windows have no labels; the evaluator scores
            return {"example_count": jnp.sum(weights)}
        if self.version == "v1.1":
            losses = heads.squad_v1_loss(*outputs, batch["start_positions"],
                                         batch["end_positions"])
        else:
            losses = heads.squad_v2_loss(outputs, batch["start_positions"],
                                         batch["end_positions"], batch["is_impossible"])
        return {"loss_sum": jnp.sum(weights * losses), "example_count": jnp.sum(weights)}

    def metrics_from_sums(self, sums: dict[str, jax.Array]) -> dict[str, jax.Array]:
        return {"loss": sums["loss_sum"] / jnp.maximum(sums["example_count"], 1.0)}

    def console_line(self, metrics: dict[str, float]) -> list[str]:
        return [f"loss {metrics['loss']:.4f}"]

    # --- Evaluation ------------------------------------------------------------------------------
    def predictions(self, outputs: Any, batch: Batch) -> dict[str, jax.Array]:
        if self.version == "v1.1":
            start_logits, end_logits = outputs
            values = {"start_logits": start_logits, "end_logits": end_logits}
        else:
            values = {key: outputs[key] for key in squad_postprocess.V2_OUTPUT_KEYS}
        return dict(values, feature_index=batch["feature_index"])

    def postprocess(self, split: str, predictions: dict[str, np.ndarray]) -> SquadResult:
        """Answers of every question of `split` from the gathered per-window `predictions`
        (padding rows included, any order), and the official evaluation of them.

        `albert-jax evaluate` asks for the metrics and then the files of the same predictions:
        the last result is kept (with the predictions object it came from, so it cannot be
        mistaken for another's) and the n-best search over every window runs once."""
        last = self._last_postprocess
        if last is not None and last[0] == split and last[1] is predictions:
            return last[2]
        result = self._postprocess(split, predictions)
        self._last_postprocess = (split, predictions, result)
        return result

    def _postprocess(self, split: str, predictions: dict[str, np.ndarray]) -> SquadResult:
        examples, infos, _ = self._eval_set(split)
        keep = predictions["example_weight"] > 0
        order = np.argsort(predictions["feature_index"][keep], kind="stable")
        rows = {key: value[keep][order] for key, value in predictions.items()}
        if not np.array_equal(rows["feature_index"], np.arange(len(infos))):
            raise RuntimeError(f"{self.name} {split}: the gathered predictions do not hold each "
                               f"of the {len(infos)} windows once; please report this")
        config = self.config
        sizes = dict(n_best_size=config.n_best_size, max_answer_length=config.max_answer_length)
        dataset = evaluator_dataset(examples)
        if self.version == "v1.1":
            answers, nbest = squad_postprocess.postprocess_v1(
                examples, infos, rows["start_logits"], rows["end_logits"], **sizes)
            return SquadResult(answers, nbest, None, squad_eval.evaluate_v1(dataset, answers))
        answers, nbest, null_odds = squad_postprocess.postprocess_v2(examples, infos, rows,
                                                                     **sizes)
        return SquadResult(answers, nbest, null_odds,
                           squad_eval.evaluate(dataset, answers, na_probs=null_odds))

    def eval_metrics(self, split: str, sums: dict[str, np.ndarray],
                     predictions: dict[str, np.ndarray]) -> dict[str, float]:
        evaluation = self.postprocess(split, predictions).evaluation
        return {("exact_match" if key == "exact" else key): float(value)
                for key, value in evaluation.items() if not key.endswith("total")}

    def write_predictions(self, split: str, predictions: dict[str, np.ndarray],
                          directory: str) -> list[str]:
        """predictions.json, nbest_predictions.json, for v2.0 null_odds.json and
        predictions_with_null.json (the best-F1 threshold of this evaluation applied), and
        metrics.json: the official evaluator's output on predictions.json (v1.1: the v1.1
        script's exact_match and f1; v2.0: the v2.0 script's, with null_odds.json as na_probs,
        what `albert-jax squad-eval DEV.json predictions.json --na-prob-file=null_odds.json`
        prints)."""
        result = self.postprocess(split, predictions)
        with_null = None
        if result.null_odds is not None:
            with_null = squad_postprocess.apply_null_threshold(
                result.null_odds, result.predictions, result.evaluation["best_f1_thresh"])
        written = squad_postprocess.write_prediction_files(
            directory, result.predictions, result.nbest, result.null_odds, with_null)
        metrics_path = os.path.join(directory, METRICS_FILE)
        squad_postprocess.write_json(metrics_path, result.evaluation)
        return [*written.values(), metrics_path]

    def write_dev_metrics(self, split_metrics: dict[str, dict[str, float]], step: int,
                          directory: str) -> list[str]:
        del split_metrics, step, directory  # write_predictions wrote the evaluator's metrics.json
        return []
