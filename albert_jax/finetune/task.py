"""GLUE and RACE as tasks of the training loop (SPEC 8.1, 8.2, 8.4).

  GlueTask: AlbertForSequenceClassification; softmax cross-entropy, or mean squared error for
            STS-B (regression, one output); metrics from finetune/metrics.py.
  RaceTask: AlbertForMultipleChoice over 4 options; cross-entropy; accuracy overall, middle, high.

Data: the examples are read and tokenised once, at start, into arrays held in memory
(`ArraySource`) and streamed with the pretraining pipeline's grain stream (one global shuffled
stream cut into global batches, each host reading its rows), so the train iterator is saved with
every checkpoint and a resumed run sees the batches it would have seen. Eval sets are padded to
whole global eval batches with rows of `example_weight` 0, so every example is scored once and
the dev score covers the whole set.
"""
from __future__ import annotations

import json
import os
from typing import Any, Iterator, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from albert_jax import files
from albert_jax.data import pipeline
from albert_jax.data.tokenizer import Tokenizer
from albert_jax.errors import ConfigError
from albert_jax.finetune import features, glue, metrics, race
from albert_jax.finetune.pretrained import Pretrained
from albert_jax.pretraining import TOKENIZER_FILE
from albert_jax.model import (AlbertForMultipleChoice, AlbertForSequenceClassification, ModelConfig,
                              example_inputs, presets)
from albert_jax.train import flops
from albert_jax.train.task import Batch, HostBatch, Selection, Task

RACE_LEVELS = ("middle", "high")  # stored as their index in the `level` feature
NUM_CHOICES = len(race.ANSWER_LETTERS)


class ArraySource:
    """Random access to examples held as arrays of one length: `source[i]` = {name: array[i]}."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays
        self._length = len(next(iter(arrays.values())))

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        return {name: value[index] for name, value in self.arrays.items()}

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, np.ndarray]]:
        return [self[index] for index in indices]


def padded(arrays: dict[str, np.ndarray], multiple: int) -> dict[str, np.ndarray]:
    """`arrays` plus `example_weight` (1 real, 0 padding), padded with zero rows to a multiple."""
    count = len(next(iter(arrays.values())))
    padding = -count % multiple
    arrays = dict(arrays, example_weight=np.ones(count, np.float32))
    return {name: np.concatenate([value, np.zeros((padding, *value.shape[1:]), value.dtype)])
            for name, value in arrays.items()}


def finetune_model_config(config: ml_collections.ConfigDict,
                          base: ModelConfig) -> ModelConfig:
    """The model config a fine-tuning run trains: `base` (the checkpoint's architecture) with the
    task's dropout (SPEC 8.2 "ALBERT DR"), the compute dtype and `model_overrides`."""
    fields = base.to_dict()
    fields.update(hidden_dropout_prob=config.dropout, attention_probs_dropout_prob=config.dropout,
                  dtype=config.compute_dtype)
    fields.update({key: value for key, value in config.model_overrides.items() if value is not None})
    model_config = presets.from_dict(fields)
    if config.seq_len > model_config.max_position_embeddings:
        raise ConfigError(f"config seq_len={config.seq_len} exceeds the model's "
                          f"max_position_embeddings={model_config.max_position_embeddings}; "
                          "lower seq_len")
    return model_config


class FinetuneTask(Task):
    """What GLUE and RACE share: in-memory sources, padded eval sets, the backbone from
    `init_from`, cross-entropy over class labels (STS-B overrides the loss)."""

    name: str
    test_splits: tuple[str, ...] = ()
    # [batch, seq] (RACE [batch, 4, seq]): each batch runs at its length bucket (train/buckets.py).
    sequence_fields = ("input_ids", "segment_ids", "input_mask")

    def __init__(self, config: ml_collections.ConfigDict, model_config: ModelConfig,
                 tokenizer: Tokenizer, pretrained: Pretrained | None) -> None:
        self.config = config
        self.model_config = model_config
        self.tokenizer = tokenizer
        self.pretrained = pretrained
        self._eval_sources: dict[str, ArraySource] = {}

    # --- What each task supplies ------------------------------------------------------------
    def train_features(self) -> dict[str, np.ndarray]:
        """Arrays [examples, ...] of the training set: `input_ids`, the other model inputs and
        the labels."""
        raise NotImplementedError

    def eval_features(self, split: str) -> dict[str, np.ndarray]:
        """Arrays [examples, ...] of eval set `split` (a dev or test split name)."""
        raise NotImplementedError

    def write_predictions(self, split: str, predictions: dict[str, np.ndarray],
                          directory: str) -> list[str]:
        """Writes the prediction files of `split` into `directory`; returns their paths."""
        raise NotImplementedError

    def write_dev_metrics(self, split_metrics: dict[str, dict[str, float]], step: int,
                          directory: str) -> list[str]:
        """Writes `directory`/metrics.json: the dev metrics of the checkpoint at `step`, the
        selection split's at the top level, other dev sets (MNLI mismatched) nested."""
        report = dict(split_metrics.get("dev", {}))
        report.update({name: values for name, values in split_metrics.items() if name != "dev"})
        report["step"] = step
        path = os.path.join(directory, "metrics.json")
        files.write_atomically(path, json.dumps(report, indent=2, sort_keys=True))
        return [path]

    def prediction_splits(self, kind: str) -> tuple[str, ...]:
        """The eval sets `albert-jax evaluate --split=<kind>` predicts ("dev" or "test")."""
        return self.eval_splits if kind == "dev" else self.test_splits

    def workdir_files(self) -> dict[str, bytes]:
        # The tokenizer travels with the weights: evaluate, export and init_from find it there
        # (with its SPEC 2.3 digit-comma rule).
        return self.tokenizer.files(TOKENIZER_FILE)

    # --- Data ----------------------------------------------------------------------------------
    def _dataset(self, source: ArraySource, batch_size: int, *, train: bool) -> Any:
        return pipeline.make_dataset(
            source, batch_size=batch_size, process_index=jax.process_index(),
            process_count=jax.process_count(), repeat=train,
            shuffle_seed=self.config.seed if train else None, dynamic_masking=None)

    def train_iterator(self) -> Any:
        arrays = self.train_features()
        count = len(arrays["input_ids"])
        print(f"{self.name}: {count} training examples", flush=True)
        source = ArraySource(dict(arrays, example_weight=np.ones(count, np.float32)))
        return pipeline.iterate(self._dataset(source, self.config.batch_size, train=True),
                                prefetch=self.config.data.prefetch,
                                num_workers=self.config.data.num_workers)

    def train_batch_spec(self, batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
        """input_ids, segment_ids, input_mask [batch, seq] (RACE: [batch, 4, seq]), int32;
        example_weight [batch] float32; labels [batch] int32."""
        inputs = jax.ShapeDtypeStruct((batch_size, *self.init_inputs()[0].shape[1:]), jnp.int32)
        return {"input_ids": inputs, "segment_ids": inputs, "input_mask": inputs,
                "example_weight": jax.ShapeDtypeStruct((batch_size,), jnp.float32),
                "labels": jax.ShapeDtypeStruct((batch_size,), jnp.int32)}

    def eval_batches(self, split: str) -> Iterator[HostBatch]:
        if split not in self._eval_sources:
            self._eval_sources[split] = ArraySource(padded(self.eval_features(split),
                                                           self.config.eval_batch_size))
        return iter(self._dataset(self._eval_sources[split], self.config.eval_batch_size,
                                  train=False))

    # --- Model -----------------------------------------------------------------------------------
    def initial_params(self, params: Any) -> Any:
        """The checkpoint's backbone in place of the initialised one, with its shardings; the
        task head keeps its initialisation (SPEC 8.2: trunc-normal 0.02)."""
        if self.pretrained is None:
            return params
        loaded = dict(jax.tree_util.tree_flatten_with_path(self.pretrained.backbone)[0])
        wanted = dict(jax.tree_util.tree_flatten_with_path(params["albert"])[0])
        problems = [f"missing {jax.tree_util.keystr(path)}" for path in wanted if path not in loaded]
        problems += [f"{jax.tree_util.keystr(path)}: checkpoint {np.shape(loaded[path])}, model "
                     f"{leaf.shape}" for path, leaf in wanted.items()
                     if path in loaded and tuple(np.shape(loaded[path])) != tuple(leaf.shape)]
        if problems:
            raise ConfigError(f"config init_from={self.config.init_from} does not fit the model "
                              f"({'; '.join(problems[:6])}); check model_overrides")

        def place(path: Any, leaf: jax.Array) -> jax.Array:
            value = np.asarray(loaded[path], dtype=leaf.dtype)
            return jax.make_array_from_callback(leaf.shape, leaf.sharding, lambda index: value[index])

        print(f"Initialised the backbone from {self.config.init_from} ({self.pretrained.kind}); "
              "the task head starts fresh.", flush=True)
        return dict(params, albert=jax.tree_util.tree_map_with_path(place, params["albert"]))

    def init_inputs(self) -> tuple[jax.Array, ...]:
        return example_inputs((1, self.config.seq_len))

    def apply(self, params: Any, batch: Batch, *, train: bool, rng: jax.Array | None) -> jax.Array:
        rngs = {"dropout": rng} if train and rng is not None else {}
        return self.model.apply({"params": params}, batch["input_ids"], batch["segment_ids"],
                                batch["input_mask"], deterministic=not train, rngs=rngs)

    # --- Loss: cross-entropy over class labels ----------------------------------------------------
    def loss_sums(self, outputs: jax.Array, batch: Batch) -> dict[str, jax.Array]:
        """outputs: logits [batch, classes], float32."""
        weights = batch["example_weight"].astype(jnp.float32)
        labels = batch["labels"].astype(jnp.int32)
        log_probs = jax.nn.log_softmax(outputs.astype(jnp.float32), axis=-1)
        nll = -jnp.take_along_axis(log_probs, labels[:, None], axis=-1)[:, 0]
        correct = (jnp.argmax(outputs, axis=-1) == labels).astype(jnp.float32)
        return {"loss_sum": jnp.sum(weights * nll), "correct_sum": jnp.sum(weights * correct),
                "example_count": jnp.sum(weights)}

    def denominators(self, batch: Batch) -> dict[str, jax.Array]:
        return {"examples": jnp.maximum(jnp.sum(batch["example_weight"].astype(jnp.float32)), 1.0)}

    def loss(self, sums: dict[str, jax.Array], denominators: dict[str, jax.Array]) -> jax.Array:
        return sums["loss_sum"] / denominators["examples"]  # SPEC 8.2: the batch mean

    def metrics_from_sums(self, sums: dict[str, jax.Array]) -> dict[str, jax.Array]:
        count = jnp.maximum(sums["example_count"], 1.0)
        return {"loss": sums["loss_sum"] / count, "accuracy": sums["correct_sum"] / count}

    def predictions(self, outputs: jax.Array, batch: Batch) -> dict[str, jax.Array]:
        return {"prediction": jnp.argmax(outputs, axis=-1), "labels": batch["labels"]}

    def console_line(self, metrics: dict[str, float]) -> list[str]:
        return [f"loss {metrics['loss']:.4f}", f"acc {metrics['accuracy']:.3f}"]

    def flops_per_example(self, seq_len: int) -> float:
        # The backbone read at [CLS] alone, no masked-LM head.
        return flops.forward_flops_per_sequence(self.model_config, seq_len, 0,
                                                output_positions=1)

    def final_report(self, eval_metrics: dict[str, dict[str, float]]) -> None:
        for split, split_metrics in eval_metrics.items():
            print(f"{self.name} {split} at the last step: " + ", ".join(
                f"{key} {value:.4f}" for key, value in split_metrics.items()), flush=True)


def _real(predictions: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The rows of real examples (padding has example_weight 0)."""
    keep = predictions["example_weight"] > 0
    return {key: value[keep] for key, value in predictions.items()}


class GlueTask(FinetuneTask):
    """One GLUE task (`config.task`): sentence or pair classification, STS-B regression."""

    def __init__(self, config: ml_collections.ConfigDict, model_config: ModelConfig,
                 tokenizer: Tokenizer, pretrained: Pretrained | None) -> None:
        super().__init__(config, model_config, tokenizer, pretrained)
        self.name = config.task
        self.labels = glue.labels(config.task)  # None: STS-B regression
        self.model = AlbertForSequenceClassification(
            model_config, num_labels=1 if self.labels is None else len(self.labels),
            classifier_dropout=config.classifier_dropout)
        self.eval_splits = ("dev", "dev_mismatched") if config.task == "mnli" else ("dev",)
        self.selection = Selection("dev", metrics.BEST_METRIC[config.task])
        self._eval_sets: dict[str, glue.EvalSet] = {}

    def _read_eval_sets(self, kind: str) -> None:
        data = self.config.data
        if data.tfds_name:
            sets = glue.read_tfds_eval_sets(self.name, data.tfds_name, kind,
                                            data.tfds_data_dir or None)
        else:
            sets = glue.read_eval_sets(self.name, data.path, kind)
        self._eval_sets.update({eval_set.name: eval_set for eval_set in sets})

    def prediction_splits(self, kind: str) -> tuple[str, ...]:
        # MNLI test: matched, mismatched and, when diagnostic.tsv is there, AX.
        self._read_eval_sets(kind)
        return tuple(name for name in self._eval_sets if name.startswith(kind) or
                     (kind == "test" and name == "ax"))

    def eval_set(self, split: str) -> glue.EvalSet:
        if split not in self._eval_sets:
            self._read_eval_sets("dev" if split.startswith("dev") else "test")
        if split not in self._eval_sets:
            raise FileNotFoundError(f"{self.name}: no {split} set in {self.config.data.path}")
        return self._eval_sets[split]

    def train_features(self) -> dict[str, np.ndarray]:
        data = self.config.data
        examples = (glue.read_tfds_train(self.name, data.tfds_name, data.tfds_data_dir or None)
                    if data.tfds_name else glue.read_train(self.name, data.path))
        return features.classification_features(examples, self.tokenizer, self.config.seq_len,
                                                self.labels)

    def eval_features(self, split: str) -> dict[str, np.ndarray]:
        return features.classification_features(self.eval_set(split).examples, self.tokenizer,
                                                self.config.seq_len, self.labels)

    def train_batch_spec(self, batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
        spec = super().train_batch_spec(batch_size)
        if self.labels is None:  # STS-B: a similarity score
            spec["labels"] = jax.ShapeDtypeStruct((batch_size,), jnp.float32)
        return spec

    # STS-B is a regression: one output, mean squared error (SPEC 8.2).
    def loss_sums(self, outputs: jax.Array, batch: Batch) -> dict[str, jax.Array]:
        if self.labels is not None:
            return super().loss_sums(outputs, batch)
        weights = batch["example_weight"].astype(jnp.float32)
        error = outputs[:, 0].astype(jnp.float32) - batch["labels"].astype(jnp.float32)
        return {"loss_sum": jnp.sum(weights * jnp.square(error)), "example_count": jnp.sum(weights)}

    def metrics_from_sums(self, sums: dict[str, jax.Array]) -> dict[str, jax.Array]:
        if self.labels is not None:
            return super().metrics_from_sums(sums)
        return {"loss": sums["loss_sum"] / jnp.maximum(sums["example_count"], 1.0)}

    def predictions(self, outputs: jax.Array, batch: Batch) -> dict[str, jax.Array]:
        if self.labels is not None:
            return super().predictions(outputs, batch)
        return {"prediction": outputs[:, 0], "labels": batch["labels"]}

    def console_line(self, metrics_: dict[str, float]) -> list[str]:
        if self.labels is not None:
            return super().console_line(metrics_)
        return [f"loss {metrics_['loss']:.4f}"]

    def eval_metrics(self, split: str, sums: dict[str, np.ndarray],
                     predictions: dict[str, np.ndarray]) -> dict[str, float]:
        real = _real(predictions)
        task = "ax" if split == "ax" else self.name
        return metrics.glue_metrics(task, real["prediction"], real["labels"])

    def write_predictions(self, split: str, predictions: dict[str, np.ndarray],
                          directory: str) -> list[str]:
        values = _real(predictions)["prediction"]
        if self.labels is None:
            strings = [f"{float(value):.3f}" for value in values]
        else:
            strings = [self.labels[int(value)] for value in values]
        return [glue.write_predictions(directory, self.eval_set(split), strings)]


class RaceTask(FinetuneTask):
    """RACE (SPEC 8.4): 4-way multiple choice; the best checkpoint by dev accuracy."""

    name = "race"
    eval_splits = ("dev",)
    test_splits = ("test",)
    selection = Selection("dev", metrics.BEST_METRIC["race"])

    def __init__(self, config: ml_collections.ConfigDict, model_config: ModelConfig,
                 tokenizer: Tokenizer, pretrained: Pretrained | None) -> None:
        super().__init__(config, model_config, tokenizer, pretrained)
        self.model = AlbertForMultipleChoice(model_config,
                                             classifier_dropout=config.classifier_dropout)
        self._questions: dict[str, list[race.Question]] = {}

    def questions(self, split: str) -> list[race.Question]:
        if split not in self._questions:
            data = self.config.data
            self._questions[split] = (
                race.read_tfds_split(data.tfds_name, split, data.tfds_data_dir or None)
                if data.tfds_name else race.read_split(data.path, split))
        return self._questions[split]

    def _features(self, split: str) -> dict[str, np.ndarray]:
        questions = self.questions(split)
        arrays = features.multiple_choice_features(questions, self.tokenizer, self.config.seq_len,
                                                   self.config.max_qa_length)
        arrays["level"] = np.asarray([RACE_LEVELS.index(question.level)
                                      for question in questions], np.int32)
        return arrays

    def train_features(self) -> dict[str, np.ndarray]:
        return self._features("train")

    def eval_features(self, split: str) -> dict[str, np.ndarray]:
        return self._features(split)

    def init_inputs(self) -> tuple[jax.Array, ...]:
        return example_inputs((1, NUM_CHOICES, self.config.seq_len))

    def train_batch_spec(self, batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
        return dict(super().train_batch_spec(batch_size),
                    level=jax.ShapeDtypeStruct((batch_size,), jnp.int32))

    def predictions(self, outputs: jax.Array, batch: Batch) -> dict[str, jax.Array]:
        return dict(super().predictions(outputs, batch), level=batch["level"])

    def flops_per_example(self, seq_len: int) -> float:
        return NUM_CHOICES * super().flops_per_example(seq_len)

    def eval_metrics(self, split: str, sums: dict[str, np.ndarray],
                     predictions: dict[str, np.ndarray]) -> dict[str, float]:
        real = _real(predictions)
        levels = [RACE_LEVELS[level] for level in real["level"]]
        return metrics.race_metrics(real["prediction"], real["labels"], levels)

    def write_predictions(self, split: str, predictions: dict[str, np.ndarray],
                          directory: str) -> list[str]:
        return [race.write_predictions(directory, self.questions(split),
                                       [int(value) for value in _real(predictions)["prediction"]])]
