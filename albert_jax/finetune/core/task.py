"""What every fine-tuning task shares: its setup, not its problem.

`FinetuneTask` (a `train.task.Task`) holds how a task is built and fed, and nothing about what it
learns:
  setup:    the config checks before anything is read (`validate_config`), the tokenizer and the
            architecture of `init_from` (or the preset of a from-scratch run), the model config
            of the run (`albert_jax.config.model_config`), the backbone weights of `init_from`;
  data:     examples read and tokenised once, at start, into arrays held in memory
            (`ArraySource`) and streamed with the pretraining pipeline's grain stream (one global
            shuffled stream cut into global batches, each host reading its rows), so the train
            iterator is saved with every checkpoint and a resumed run sees the batches it would
            have seen; eval sets padded to whole global eval batches with rows of
            `example_weight` 0, so every example is scored once and the dev score covers the
            whole set;
  files:    the tokenizer (and the task's own files, e.g. labels.json) kept in the workdir, and
            the dev metrics.json of `albert-jax evaluate`.
Everything else (head, loss, metrics, readers, prediction files, the transformers head for
export) belongs to the kinds (kinds/: classification, multiple choice, token classification) and
the families built on them, one folder each: glue/, race/, squad/ and custom/ (the user's own
files: classification, regression, multiple choice, tagging). Each registers its names
(core/registry.py).
"""
from __future__ import annotations

import json
import os
from typing import Any, Iterator, Mapping, Sequence, cast

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from etils import epath

from albert_jax import config as config_lib
from albert_jax import files
from albert_jax.convert.huggingface import FinetunedHead
from albert_jax.data.input import pipeline
from albert_jax.data.tokenizers import TextSettings, Tokenizer, read_record
from albert_jax.errors import ConfigError
from albert_jax.finetune.core import pretrained as pretrained_lib
from albert_jax.finetune.core.pretrained import Pretrained
from albert_jax.model import ModelConfig, example_inputs, presets
from albert_jax.train import flops, loop, validation
from albert_jax.train import workdir as workdir_names
from albert_jax.train.task import Batch, HostBatch, Selection, Task


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


def real_rows(predictions: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The rows of real examples (padding has example_weight 0)."""
    keep = predictions["example_weight"] > 0
    return {key: value[keep] for key, value in predictions.items()}


class FinetuneTask(Task):
    """The setup, data and files every fine-tuning task shares (module docstring).

    A task family supplies: `build_model`, `train_features`, `eval_features`, `loss_sums`
    (the mean loss, its console line and `denominators` are shared; a family may add to
    `metrics_from_sums` and `console_line`), `predictions`, `eval_metrics`,
    `write_predictions`, `huggingface_head` and, for `albert-jax predict`, `read_inputs` /
    `input_features` / `prediction_records`.
    """

    name: str
    test_splits: tuple[str, ...] = ()
    # Whether the task reads a folder in its original layout (data.path) or TFDS (data.tfds_name):
    # `validate_config` then checks that one is given (`check_data_source`).
    reads_folder_or_tfds = False
    # The configs/ file (and its argument) that fine-tunes this task: `albert-jax finetune
    # --config=configs/<config_file>`; "" for a user's task, which brings its own.
    config_file: str = ""
    # [batch, seq] (multiple choice [batch, options, seq]): each batch runs at its length bucket
    # (train/buckets.py).
    sequence_fields: tuple[str, ...] = ("input_ids", "segment_ids", "input_mask")

    def __init__(self, config: ml_collections.ConfigDict, model_config: ModelConfig,
                 tokenizer: Tokenizer | None, pretrained: Pretrained | None,
                 run_dir: epath.Path | None = None) -> None:
        """`tokenizer` None: a task for shapes only (`albert-jax plan`), which reads no data.
        `run_dir`: the finished run this task is rebuilt from (evaluate, predict, export), whose
        files (labels.json) the task reads instead of its training data."""
        self.config = config
        self.model_config = model_config
        self.tokenizer = tokenizer
        self.pretrained = pretrained
        self.run_dir = run_dir
        if self.selection is None:  # else the class's own (a task of your own may set it)
            self.selection = Selection("dev", self.selection_metric(config))
        self._eval_sources: dict[str, ArraySource] = {}

    # --- Setup -----------------------------------------------------------------------------------
    @classmethod
    def validate_config(cls, config: ml_collections.ConfigDict) -> None:
        """Raises ConfigError (or FileNotFoundError), naming the key, for a config this task
        cannot run, before anything is read. Families add their data checks."""
        if cls.reads_folder_or_tfds:
            cls.check_data_source(config)
        validation.check_numbers(config)

    @classmethod
    def check_data_source(cls, config: ml_collections.ConfigDict) -> None:
        """For a task read from a folder in its original layout (data.path) or from TFDS
        (data.tfds_name): one of them is given, and the folder exists."""
        if not config.data.path and not config.data.tfds_name:
            raise ConfigError(f"config data.path is empty: give the {cls.name} data folder "
                              "(--config.data.path=DIR) or a TFDS name "
                              "(--config.data.tfds_name=...)")
        if config.data.path and not epath.Path(config.data.path).is_dir():
            raise FileNotFoundError(f"config data.path={config.data.path} is not a directory")

    # --- Dev metrics ------------------------------------------------------------------------------
    @classmethod
    def metric_names(cls, config: ml_collections.ConfigDict) -> tuple[str, ...]:
        """The dev metrics every evaluation of this task reports (`eval_metrics` keys; some
        tasks add more, e.g. per level or per subset)."""
        raise NotImplementedError

    @classmethod
    def selection_metric(cls, config: ml_collections.ConfigDict) -> str:
        """The dev metric whose largest value picks the best checkpoint (SPEC 8.1), one of
        `metric_names`. A task of your own may set the class attribute `selection` instead."""
        if cls.selection is None:
            raise NotImplementedError(f"{cls.__qualname__} names no selection metric: define "
                                      "selection_metric or the class attribute selection")
        return cls.selection.metric

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict) -> "FinetuneTask":
        """The task of a fine-tuning run: the tokenizer and architecture of `init_from` (or the
        preset `config.model` for a from-scratch run), the run's model config, the task's data."""
        cls.validate_config(config)
        pretrained = pretrained_lib.load(config.init_from) if config.init_from else None
        tokenizer_path = config.tokenizer or (pretrained.tokenizer if pretrained else None)
        if not tokenizer_path:
            where = (f"init_from={config.init_from} carries no tokenizer (no spiece.model, "
                     "30k-clean.model, vocab.txt or config naming one)" if pretrained
                     else "a from-scratch run (empty init_from) has no tokenizer")
            raise ConfigError(f"config {where}; give one with --config.tokenizer=PATH/TO/"
                              "spiece.model (or a WordPiece vocab.txt)")
        if config.tokenizer:  # the user's own tokenizer: the settings recorded beside it, if any
            known, source = read_record(config.tokenizer) or {}, f"the record of {config.tokenizer}"
        else:
            assert pretrained is not None  # the tokenizer came with it
            known, source = pretrained.text, f"the init_from {pretrained.kind} checkpoint"
        tokenizer = Tokenizer.load(tokenizer_path,
                                   pretrained_lib.text_settings(config.data, known, source))
        # The run's config.json records the settings it tokenizes with (as its tokenizer copy
        # does), so evaluate, predict and export read them back.
        for key, value in tokenizer.settings.as_dict().items():
            if key in config.data:
                config.data[key] = value
        base = (pretrained.model_config if pretrained
                else presets.get_config(config.model, vocab_size=tokenizer.vocab_size))
        model_config = config_lib.model_config(config, base)
        if tokenizer.vocab_size != model_config.vocab_size:
            raise ConfigError(
                f"tokenizer {tokenizer_path} has {tokenizer.vocab_size} pieces but the model "
                f"embedding has vocab_size={model_config.vocab_size}; use the tokenizer the "
                "checkpoint was trained with (--config.tokenizer)")
        return cls(config, model_config, tokenizer, pretrained)

    @classmethod
    def for_shapes(cls, config: ml_collections.ConfigDict) -> "FinetuneTask":
        """The task with config.model's architecture and no tokenizer, checkpoint or data: what
        `albert-jax plan` compiles."""
        return cls(config, config_lib.model_config(config, presets.get_config(config.model)),
                   None, None)

    @classmethod
    def checkpoint_to_predict(cls, run_dir: epath.Path, step: int | None
                              ) -> tuple[epath.Path, int, str]:
        """The best dev checkpoint of `run_dir` (its folder, its step, and how to name it in
        messages): what evaluate, predict and export use."""
        if step is not None:
            raise ConfigError(f"--step={step}: a fine-tuning run predicts with its best dev "
                              "checkpoint (--step picks a pretraining run's checkpoint)")
        best = loop.read_best(run_dir)
        return (run_dir / workdir_names.BEST_SUBDIR, best["step"],
                f"the best dev checkpoint of {run_dir} (step {best['step']}, {best['metric']} "
                f"{best['value']:.4f})")

    @classmethod
    def from_run(cls, config: ml_collections.ConfigDict, run_dir: epath.Path,
                 model_config: ModelConfig, **options: Any) -> "FinetuneTask":
        """The task of the finished run in `run_dir` (its config, tokenizer and files)."""
        if options:
            raise ConfigError(f"--{', --'.join(options)}: not an option of a fine-tuning run's "
                              "predict (--top_k is fill-mask's, on a pretraining workdir)")
        path = workdir_names.tokenizer_path(run_dir)
        if path is None:
            raise FileNotFoundError(f"run {run_dir} has no tokenizer copy ("
                                    f"{' or '.join(workdir_names.TOKENIZER_FILES.values())})")
        tokenizer = Tokenizer.load(os.fspath(path), TextSettings.recorded(
            os.fspath(path), TextSettings.from_config(config.data)))
        return cls(config, model_config, tokenizer, None, run_dir=run_dir)

    # --- What each family supplies ---------------------------------------------------------------
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

    def huggingface_head(self) -> FinetunedHead:
        """The transformers class (and labels) this task's model exports as."""
        raise NotImplementedError

    # --- `albert-jax predict` and predictions.jsonl ----------------------------------------------
    def split_examples(self, split: str) -> list[Any]:
        """The examples of eval set `split`, in the order of its features."""
        raise NotImplementedError

    def read_inputs(self, path: str, chunk_rows: int) -> Iterator[Sequence[Any]]:
        """The examples of a file to predict, in file order, in lists of at most `chunk_rows`
        (a file of any size runs in bounded memory)."""
        raise NotImplementedError

    def input_features(self, examples: list[Any]) -> dict[str, np.ndarray]:
        """The model inputs of `examples` (labels, if any, are not needed)."""
        raise NotImplementedError

    def prediction_records(self, examples: list[Any],
                           predictions: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        """One JSON object per example of `examples` (with an `id` and a `prediction`), from
        the predictions of `input_features(examples)`, padding rows dropped."""
        raise NotImplementedError

    def split_records(self, split: str, predictions: dict[str, np.ndarray]
                      ) -> list[dict[str, Any]]:
        """The predictions.jsonl records of eval set `split` (as `albert-jax predict` writes
        them for the same examples)."""
        return self.prediction_records(self.split_examples(split), real_rows(predictions))

    # --- Files -----------------------------------------------------------------------------------
    def write_dev_metrics(self, split_metrics: dict[str, dict[str, float]], step: int,
                          directory: str) -> list[str]:
        """Writes `directory`/metrics.json: the dev metrics of the checkpoint at `step`, the
        selection split's at the top level, other dev sets (MNLI mismatched) nested."""
        report: dict[str, Any] = dict(split_metrics.get("dev", {}))
        report.update({name: values for name, values in split_metrics.items() if name != "dev"})
        report["step"] = step
        path = os.path.join(directory, workdir_names.SCORES_FILE)
        files.write_atomically(path, json.dumps(report, indent=2, sort_keys=True))
        return [path]

    def prediction_splits(self, split: str) -> tuple[str, ...]:
        """The eval sets `albert-jax evaluate --split=<split>` predicts ("dev" or "test")."""
        return self.eval_splits if split == "dev" else self.test_splits

    def workdir_files(self) -> dict[str, bytes]:
        # The tokenizer travels with the weights: evaluate, export and init_from find it there
        # (with its SPEC 2.3 digit-comma rule), as spiece.model or vocab.txt.
        assert self.tokenizer is not None  # only a task for shapes (plan) has none
        return self.tokenizer.files(workdir_names.TOKENIZER_FILES[self.tokenizer.kind])

    # --- Data ------------------------------------------------------------------------------------
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
        """input_ids, segment_ids, input_mask [batch, seq] (multiple choice: [batch, options,
        seq]), int32; example_weight [batch] float32; labels [batch] int32."""
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

    def batches_of(self, arrays: dict[str, np.ndarray]) -> Iterator[HostBatch]:
        """This host's rows of `arrays` [examples, ...] in padded global eval batches (predict)."""
        return iter(self._dataset(ArraySource(padded(arrays, self.config.eval_batch_size)),
                                  self.config.eval_batch_size, train=False))

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
        # cast: without mutable=, `apply` returns the output alone (flax types it either way)
        return cast(jax.Array, self.model.apply(
            {"params": params}, batch["input_ids"], batch["segment_ids"], batch["input_mask"],
            deterministic=not train, rngs=rngs))

    def denominators(self, batch: Batch) -> dict[str, jax.Array]:
        return {"examples": jnp.maximum(jnp.sum(batch["example_weight"].astype(jnp.float32)), 1.0)}

    def loss(self, sums: dict[str, jax.Array], denominators: dict[str, jax.Array]) -> jax.Array:
        return sums["loss_sum"] / denominators["examples"]  # SPEC 8.2: the batch mean

    def metrics_from_sums(self, sums: dict[str, jax.Array]) -> dict[str, jax.Array]:
        """The mean loss over the examples (`loss_sum`, `example_count` of `loss_sums`); a
        classifier adds its accuracy."""
        return {"loss": sums["loss_sum"] / jnp.maximum(sums["example_count"], 1.0)}

    def console_line(self, metrics: Mapping[str, float]) -> list[str]:
        return [f"loss {metrics['loss']:.4f}"]

    def flops_per_example(self, seq_len: int) -> float:
        # The backbone read at [CLS] alone, no masked-LM head.
        return flops.forward_flops_per_sequence(self.model_config, seq_len, 0,
                                                output_positions=1)

    def final_report(self, eval_metrics: dict[str, dict[str, float]]) -> None:
        for split, split_metrics in eval_metrics.items():
            print(f"{self.name} {split} at the last step: " + ", ".join(
                f"{key} {value:.4f}" for key, value in split_metrics.items()), flush=True)
