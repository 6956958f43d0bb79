"""SQuAD v1.1 / v2.0 as a task of the training loop (SPEC 8.3).

  v1.1: AlbertForQuestionAnswering (cls/squad head), start/end cross-entropy; dev exact_match
        and f1 of the official v1.1 evaluator; the best checkpoint by f1.
  v2.0: AlbertForQuestionAnsweringV2 (XLNet-style head with an answerability class), span plus
        sigmoid loss; dev metrics of the official v2.0 evaluator with null_odds as na_probs;
        the best checkpoint by best_f1 (why: `SquadTask.__init__`).

Data: the examples become sliding-window features (squad/data.py), one row per window, held
in memory and streamed like GLUE's (core/task.py). Evaluation gathers per window its model
outputs and `feature_index`, so the windows of one question come together again whatever the
devices, hosts and padding (rows of `example_weight` 0 are dropped); post-processing
(squad/postprocess.py) picks each question's answer over all its windows.

Dev metrics are the evaluator's percentages (0-100), named as the official scripts name them,
except v2.0's "exact", which is `exact_match` here as in v1.1; counts ("total") are left out.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Iterator, Mapping, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from etils import epath

from albert_jax.convert.huggingface import FinetunedHead
from albert_jax.data.tokenizers import Tokenizer
from albert_jax.errors import ConfigError
from albert_jax.finetune.core import registry, tables
from albert_jax.finetune.core.pretrained import Pretrained
from albert_jax.finetune.core.task import FinetuneTask
from albert_jax.finetune.squad import data as squad
from albert_jax.finetune.squad import official_eval as squad_eval
from albert_jax.finetune.squad import postprocess as squad_postprocess
from albert_jax.finetune.squad.data import FeatureInfo, SquadExample
from albert_jax.model import (
    AlbertForQuestionAnswering,
    AlbertForQuestionAnsweringV2,
    ModelConfig,
    example_inputs,
    heads,
)
from albert_jax.train import flops
from albert_jax.train import workdir as workdir_names
from albert_jax.train.task import Batch

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
        {"qas": [{"id": example.id, "answers": [{"text": answer.text}
                                                 for answer in example.answers]}]}
        for example in examples]}]}


def _table_question(path: str, line: int, row: Mapping[str, Any], number: int) -> SquadExample:
    """A question of a table to predict: columns `context`, `question` and optionally `id`."""
    texts = {}
    for column in ("context", "question"):
        value = row.get(column)
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{path}:{line}: column {column!r} is missing or empty "
                             f"({value!r}); a SQuAD question needs a context and a question "
                             f"(the file's columns: {', '.join(map(repr, row))})")
        texts[column] = value
    return SquadExample(id=str(row.get("id", number)), question=texts["question"],
                        context=texts["context"], answers=(), is_impossible=False)


@registry.register("squad")
class SquadTask(FinetuneTask):
    """SQuAD `config.version` (v1.1 or v2.0) from data.train_file/data.dev_file or a TFDS name.

    One registered name for both versions: `version` picks the head, loss and evaluator (the
    data, windows and post-processing are shared)."""

    config_file = "squad.py:version=1.1"  # version=2.0: the same class
    eval_splits = ("dev",)
    # Every batch at seq_len: the n-best of SPEC 8.3 ranks the span logits of every position,
    # padding included, so evaluation needs all of them; no length buckets.
    sequence_fields = ()

    def __init__(self, config: ml_collections.ConfigDict, model_config: ModelConfig,
                 tokenizer: Tokenizer | None, pretrained: Pretrained | None,
                 run_dir: epath.Path | None = None) -> None:
        super().__init__(config, model_config, tokenizer, pretrained, run_dir)
        if config.get("length_buckets"):
            raise ConfigError(f"config length_buckets={tuple(config.length_buckets)}: SQuAD runs "
                              "every batch at seq_len (its n-best reads every position's "
                              "logits); set --config.length_buckets='()'")
        self.version = config.version
        self.name = f"SQuAD {self.version}"
        if self.version == "v1.1":
            self.model = AlbertForQuestionAnswering(model_config)
        else:
            self.model = AlbertForQuestionAnsweringV2(
                model_config, answer_class_dropout=config.classifier_dropout)
        self._eval_sets: dict[str, tuple[list[SquadExample], list[FeatureInfo],
                                         dict[str, np.ndarray]]] = {}
        self._last_result: tuple[str, dict[str, np.ndarray], SquadResult] | None = None
        self._input_windows: tuple[list[SquadExample], list[FeatureInfo]] | None = None

    @classmethod
    def metric_names(cls, config: ml_collections.ConfigDict) -> tuple[str, ...]:
        """The official evaluator's (module docstring); v2.0 adds HasAns_* and NoAns_* for each
        subset the dev set has."""
        if config.version == "v1.1":
            return ("exact_match", "f1")
        return ("exact_match", "f1", "best_exact", "best_exact_thresh", "best_f1",
                "best_f1_thresh")

    @classmethod
    def selection_metric(cls, config: ml_collections.ConfigDict) -> str:
        # v2.0 best_f1: the F1 with the no-answer threshold tuned on dev, which is how the
        # predictions are used (predictions_with_null.json) and what the reference reports as
        # v2.0 F1 (SPEC 8.3 QUIRK). Plain f1 applies the evaluator's fixed threshold 1.0 to
        # null_odds, whose scale the model is free to change from step to step.
        return "f1" if config.version == "v1.1" else "best_f1"  # SPEC 8.3

    @classmethod
    def validate_config(cls, config: ml_collections.ConfigDict) -> None:
        """SQuAD reads data.train_file and data.dev_file (official JSON) or data.tfds_name."""
        if config.version not in squad.VERSIONS:
            raise ConfigError(f"config version={config.version!r} must be one of {squad.VERSIONS} "
                              "(configs/squad.py:version=1.1 or version=2.0)")
        data = config.data
        if data.tfds_name and (data.train_file or data.dev_file):
            raise ConfigError(f"config data.tfds_name={data.tfds_name!r} and data.train_file/"
                              "data.dev_file are both set; give the files or the TFDS name")
        if not data.tfds_name:
            for key in ("train_file", "dev_file"):
                split = key.split("_")[0]
                if not data[key]:
                    raise ConfigError(
                        f"config data.{key} is empty: give the SQuAD {split} file "
                        f"(--config.data.{key}={split}-{config.version}.json) or a TFDS name "
                        f"(--config.data.tfds_name=squad/{config.version})")
                if not epath.Path(data[key]).is_file():
                    raise FileNotFoundError(f"config data.{key}={data[key]} does not exist")
        squad.check_windows_without_answer(config.train_windows_without_answer, config.version,
                                           "config train_windows_without_answer")
        for key in ("doc_stride", "max_query_length", "max_answer_length", "n_best_size"):
            if config[key] < 1:
                raise ConfigError(f"config {key}={config[key]} must be a positive integer")
        if config.seq_len < config.max_query_length + 4:
            raise ConfigError(f"config seq_len={config.seq_len} leaves no room for the context "
                              f"after max_query_length={config.max_query_length} question tokens "
                              "and [CLS] [SEP] [SEP]; raise seq_len or lower max_query_length")
        super().validate_config(config)

    def huggingface_head(self) -> FinetunedHead:
        """v1.1: AlbertForQuestionAnswering (SPEC 11.6); v2.0 has no transformers class."""
        if self.version != "v1.1":
            raise ConfigError(
                f"SQuAD {self.version}'s head (SPEC 8.3: the XLNet-style start/end beam and the "
                "answerability class) has no transformers class; export the backbone alone with "
                "`albert-jax convert --from=orbax --path=<workdir>/best --to=huggingface`")
        return FinetunedHead("AlbertForQuestionAnswering")

    # --- Data ----------------------------------------------------------------------------------
    def _read_examples(self, split: str) -> list[SquadExample]:
        """The questions of "train" or "dev", read from the config's file or TFDS split."""
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
        assert self.tokenizer is not None  # only a task for shapes (plan) has none
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
            examples = self._read_examples(split)
            arrays, infos = self._features(examples, split, training=False)
            # feature_index, not example_index, keys the gathered outputs (module docstring).
            arrays = {key: value for key, value in arrays.items() if key != "example_index"}
            arrays["feature_index"] = np.arange(len(infos), dtype=np.int32)
            self._eval_sets[split] = examples, infos, arrays
        return self._eval_sets[split]

    def train_features(self) -> dict[str, np.ndarray]:
        arrays, _ = self._features(self._read_examples("train"), "train", training=True)
        # The dev file is read now too, so a wrong one fails before the first step, not at the
        # first evaluation.
        self._eval_set("dev")
        return {key: value for key, value in arrays.items() if key != "example_index"}

    def eval_features(self, split: str) -> dict[str, np.ndarray]:
        return self._eval_set(split)[2]

    def prediction_splits(self, split: str) -> tuple[str, ...]:
        if split != "dev":
            raise ConfigError(f"SQuAD has no public {split} set (the official test set is "
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
            start_logits, end_logits = outputs
            losses = heads.squad_v1_loss(start_logits, end_logits, batch["start_positions"],
                                         batch["end_positions"])
        else:
            losses = heads.squad_v2_loss(outputs, batch["start_positions"],
                                         batch["end_positions"], batch["is_impossible"])
        return {"loss_sum": jnp.sum(weights * losses), "example_count": jnp.sum(weights)}

    # --- Evaluation ------------------------------------------------------------------------------
    def predictions(self, outputs: Any, batch: Batch) -> dict[str, jax.Array]:
        if self.version == "v1.1":
            start_logits, end_logits = outputs
            values = {"start_logits": start_logits, "end_logits": end_logits}
        else:
            values = {key: outputs[key] for key in squad_postprocess.V2_OUTPUT_KEYS}
        return dict(values, feature_index=batch["feature_index"])

    def split_result(self, split: str, predictions: dict[str, np.ndarray]) -> SquadResult:
        """Answers of every question of `split` from the gathered per-window `predictions`
        (padding rows included, any order), and the official evaluation of them.

        `albert-jax evaluate` asks for the metrics and then the files of the same predictions:
        the last result is kept (with the predictions object it came from, so it cannot be
        mistaken for another's) and the n-best search over every window runs once."""
        last = self._last_result
        if last is not None and last[0] == split and last[1] is predictions:
            return last[2]
        examples, infos, _ = self._eval_set(split)
        result = self._result(examples, infos, predictions, evaluate=True)
        self._last_result = (split, predictions, result)
        return result

    def _result(self, examples: list[SquadExample], infos: list[FeatureInfo],
                predictions: dict[str, np.ndarray], *, evaluate: bool) -> SquadResult:
        """Each question's answer from its windows' `predictions` (padding rows included, any
        order); with `evaluate`, the official evaluation of them (else an empty dict)."""
        keep = predictions["example_weight"] > 0
        order = np.argsort(predictions["feature_index"][keep], kind="stable")
        rows = {key: value[keep][order] for key, value in predictions.items()}
        if not np.array_equal(rows["feature_index"], np.arange(len(infos))):
            raise RuntimeError(f"{self.name}: the gathered predictions do not hold each of the "
                               f"{len(infos)} windows once; please report this")
        config = self.config
        sizes = dict(n_best_size=config.n_best_size, max_answer_length=config.max_answer_length)
        dataset = evaluator_dataset(examples)
        if self.version == "v1.1":
            answers, nbest = squad_postprocess.postprocess_v1(
                examples, infos, rows["start_logits"], rows["end_logits"], **sizes)
            return SquadResult(answers, nbest, None,
                               squad_eval.evaluate_v1(dataset, answers) if evaluate else {})
        answers, nbest, null_odds = squad_postprocess.postprocess_v2(examples, infos, rows,
                                                                     **sizes)
        return SquadResult(answers, nbest, null_odds,
                           squad_eval.evaluate_v2(dataset, answers, na_probs=null_odds)
                           if evaluate else {})

    # --- `albert-jax predict` and predictions.jsonl ----------------------------------------------
    def read_inputs(self, path: str, chunk_rows: int) -> Iterator[Sequence[SquadExample]]:
        """An official SQuAD JSON file, else a CSV/TSV/JSONL/Parquet table with the columns
        `id` (optional), `context` and `question`; questions in file order."""
        if path.endswith(".json"):
            yield from tables.in_chunks(squad.read_squad(path, self.version), chunk_rows)
            return
        rows_before = 0
        for chunk in tables.iter_row_chunks(path, chunk_rows):
            yield [_table_question(path, line, row, rows_before + number)
                   for number, (line, row) in enumerate(chunk)]
            rows_before += len(chunk)

    def input_features(self, examples: list[SquadExample]) -> dict[str, np.ndarray]:
        """The windows of `examples` (SPEC 8.3) with their `feature_index`; the windows are kept
        for `prediction_records` of the same examples."""
        arrays, infos = self._features(examples, "predict", training=False)
        self._input_windows = (examples, infos)
        arrays = {key: value for key, value in arrays.items() if key != "example_index"}
        arrays["feature_index"] = np.arange(len(infos), dtype=np.int32)
        return arrays

    def prediction_records(self, examples: list[SquadExample],
                           predictions: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        kept_examples, infos = self._input_windows or (None, None)
        if kept_examples is not examples:
            raise RuntimeError("prediction_records of SQuAD needs the examples of the last "
                               "input_features call; please report this")
        assert infos is not None  # kept with the examples
        return self._records(self._result(examples, infos, predictions, evaluate=False),
                             examples)

    def split_records(self, split: str, predictions: dict[str, np.ndarray]
                      ) -> list[dict[str, Any]]:
        return self._records(self.split_result(split, predictions), self.split_examples(split))

    def split_examples(self, split: str) -> list[SquadExample]:
        return self._eval_set(split)[0]

    def _records(self, result: SquadResult, examples: list[SquadExample]) -> list[dict[str, Any]]:
        """One JSON object per question: id, prediction (the best non-null answer text),
        answer_score (its n-best probability) and, for v2.0, no_answer_probability: the
        sigmoid of the null score, the answerability logit the v2.0 head is trained on with a
        sigmoid loss (SPEC 8.3)."""
        records = []
        for example in examples:
            best = result.nbest[example.id][0]
            record = {"id": example.id, "prediction": result.predictions[example.id],
                      "answer_score": best["probability"]}
            if result.null_odds is not None:
                null_score = (result.null_odds[example.id] + best["start_log_prob"]
                              + best["end_log_prob"])
                record["no_answer_probability"] = float(1 / (1 + np.exp(-null_score)))
            records.append(record)
        return records

    def eval_metrics(self, split: str, sums: dict[str, np.ndarray],
                     predictions: dict[str, np.ndarray]) -> dict[str, float]:
        evaluation = self.split_result(split, predictions).evaluation
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
        result = self.split_result(split, predictions)
        with_null = None
        if result.null_odds is not None:
            with_null = squad_postprocess.apply_null_threshold(
                result.null_odds, result.predictions, result.evaluation["best_f1_thresh"])
        written = squad_postprocess.write_prediction_files(
            directory, result.predictions, result.nbest, result.null_odds, with_null)
        metrics_path = os.path.join(directory, workdir_names.SCORES_FILE)
        squad_postprocess.write_json(metrics_path, result.evaluation)
        return [*written.values(), metrics_path]

    def write_dev_metrics(self, split_metrics: dict[str, dict[str, float]], step: int,
                          directory: str) -> list[str]:
        del split_metrics, step, directory  # write_predictions wrote the evaluator's metrics.json
        return []
