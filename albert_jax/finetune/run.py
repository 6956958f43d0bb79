"""`albert-jax finetune`, `evaluate`, `predict` and the fine-tuned HuggingFace export, for every
registered task (core/registry.py); nothing here names a task.

  finetune: config -> the task class of `config.task` -> its checks, tokenizer, architecture
            and backbone from `init_from` -> the training loop (best dev checkpoint kept in
            <workdir>/best/, best.json). `config.seeds=N` runs seeds seed .. seed+N-1 in
            <workdir>/seed_<s>/ and writes <workdir>/seeds.json with each seed's best dev
            metrics and their medians (the paper's protocol: medians over 5 runs, SPEC 8.1).
  evaluate: the best dev checkpoint of a workdir (of the best seed) -> predictions of every
            dev or test set -> <workdir>/predictions/<split>/: predictions.jsonl (one record
            per example, as `predict` writes), the task's own files (GLUE server / RACE files;
            SQuAD's predictions.json & co.) and, for dev, metrics.json.
  predict:  the same checkpoint on a file of new examples -> one JSON line per example, in
            input order, streamed in chunks. On a pretraining workdir (its config names no
            task): fill-mask with the run's latest (or --step) checkpoint (fill_mask.py).
            With --embeddings=cls|mean, on either kind of run: one vector per row
            (embeddings.py), as JSON Lines or one .npy array.
  export_huggingface (`albert-jax convert --from=orbax --path=<workdir> --to=huggingface`): the
            same best checkpoint as the transformers class of its task, labels included.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import statistics
import sys
import time
from typing import Any, Iterator

import jax
import ml_collections
import numpy as np
from etils import epath

from albert_jax import files
from albert_jax.convert import tokenizer_files
from albert_jax.convert.huggingface import save_huggingface
from albert_jax.errors import ConfigError
from albert_jax.finetune import embeddings as embeddings_lib
from albert_jax.finetune import fill_mask
from albert_jax.finetune.core import registry
from albert_jax.finetune.core.task import FinetuneTask, real_rows
from albert_jax.finetune.core.text_files import open_text
from albert_jax.train import buckets, checkpoint, loop, sharding
from albert_jax.train import step as step_lib
from albert_jax.train import workdir as workdir_names

PREDICT_CHUNK_ROWS = 4096  # rows read, featurised and predicted at once: bounds predict's memory


def build_task(config: ml_collections.ConfigDict) -> FinetuneTask:
    """The task of a fine-tuning config, ready to train (module docstring)."""
    return registry.get(config.task).from_config(config)


def finetune(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
    """Fine-tunes (every seed); returns the best dev record, or for several seeds the
    seeds.json record."""
    if config.seeds == 1:
        loop.train_and_evaluate(config, workdir, build_task(config))
        best = loop.read_best(workdir)
        print(f"Best dev {best['metric']} {best['value']:.4f} at step {best['step']} "
              f"(kept in {epath.Path(workdir) / workdir_names.BEST_SUBDIR}).", flush=True)
        return best
    runs = []
    for seed in range(config.seed, config.seed + config.seeds):
        seed_config = config.copy_and_resolve_references()
        seed_config.seed = seed
        seed_workdir = os.fspath(workdir_names.seed_dir(workdir, seed))
        print(f"--- seed {seed} ({seed - config.seed + 1} of {config.seeds}) in {seed_workdir}",
              flush=True)
        loop.train_and_evaluate(seed_config, seed_workdir, build_task(seed_config))
        runs.append(dict(seed=seed, workdir=seed_workdir, **loop.read_best(seed_workdir)))
    dev_metrics = {key for run in runs for key in run["metrics"]["dev"]}
    record = {"runs": runs, "selection": runs[0]["metric"],
              "median": {key: statistics.median(run["metrics"]["dev"][key] for run in runs)
                         for key in sorted(dev_metrics)}}
    if jax.process_index() == 0:
        path = epath.Path(workdir) / workdir_names.SEEDS_FILE
        path.write_text(json.dumps(record, indent=2))
        for run in runs:
            print(f"seed {run['seed']}: " + ", ".join(
                f"{key} {value:.4f}" for key, value in run["metrics"]["dev"].items()), flush=True)
        print(f"median over {len(runs)} seeds: " + ", ".join(
            f"{key} {value:.4f}" for key, value in record["median"].items()), flush=True)
    return record


# --- A finished run: its task and best checkpoint -----------------------------------------------

@dataclasses.dataclass
class FinishedRun:
    """The checkpoint a workdir predicts with (a fine-tuning run's best dev checkpoint, of its
    best seed; a pretraining run's latest), ready to predict.

    run_dir: the run (the workdir, or the best seed's); step: the checkpoint's step (None: the
    latest); description: which checkpoint, for messages; task: the task rebuilt from the run's
    config.json, tokenizer and files; params: the checkpoint's params, placed on `mesh`;
    eval_step: jitted for `mesh` (train/step.py)."""

    run_dir: epath.Path
    step: int | None
    description: str
    task: FinetuneTask
    params: Any
    mesh: jax.sharding.Mesh
    eval_step: Any

    def prediction_records(self, examples: list[Any]) -> list[dict[str, Any]]:
        """The predict records of one chunk of `task.read_inputs`, in input order.

        The chunk's rows run shortest first, so that a batch holds rows of nearly one length and
        runs at predict's fine lengths (buckets.predict_lengths_of) instead of at the bucket of
        the one long row a batch in input order usually holds; the predictions are put back in
        input order. A row's prediction does not depend on its batch (padding keys get the
        -10000 bias, SPEC 3.2.6), so this changes nothing but the time (and floating-point
        rounding)."""
        features = self.task.input_features(examples)
        order = _shortest_first(features, self.task.sequence_fields)
        _, predictions = self.predict(
            self.task.batches_of({name: value[order] for name, value in features.items()}),
            buckets.predict_lengths_of(self.task.config))
        input_order = np.argsort(order)  # the inverse permutation
        return self.task.prediction_records(
            examples, {name: value[input_order] for name, value in real_rows(predictions).items()})

    def predict(self, host_batches: Iterator[dict[str, np.ndarray]],
                lengths: tuple[int, ...] | None = None
                ) -> tuple[dict[str, np.ndarray] | None, dict[str, np.ndarray]]:
        """The summed loss sums and per-example predictions of `host_batches`, each batch at its
        length among `lengths` (default: the run's length buckets, train/buckets.py)."""
        return loop.predict_batches(self.eval_step, self.params, sharding.batch_sharding(self.mesh),
                                    host_batches, self.task.sequence_fields,
                                    lengths or buckets.lengths_of(self.task.config))


def _shortest_first(features: dict[str, np.ndarray],
                    sequence_fields: tuple[str, ...]) -> np.ndarray:
    """The order of the rows of `features` by their length (positions up to the last real
    token; of a multiple-choice row, its longest option's), stable; input order for a task
    whose batches are not cut to length buckets (SQuAD)."""
    mask = features["input_mask"]
    rows = mask.shape[0]
    if not sequence_fields:
        return np.arange(rows)
    lengths = mask.reshape(rows, -1, mask.shape[-1]).sum(axis=-1).max(axis=-1)
    return np.argsort(lengths, kind="stable")


def is_finetuning_workdir(path: str) -> bool:
    """Whether `path` is a workdir of `albert-jax finetune` (its config.json names a task), or
    of `albert-jax sweep` (best_trial.json names its best run)."""
    if (epath.Path(path) / workdir_names.BEST_TRIAL_FILE).exists():
        return True
    config_path = epath.Path(path) / workdir_names.CONFIG_FILE
    return config_path.exists() and bool(json.loads(config_path.read_bytes()).get("task"))


def _run_dir(workdir: epath.Path) -> epath.Path:
    """The run to use: the workdir, or with several seeds the seed with the best dev score;
    of a sweep's workdir, the best run of its best configuration (best_trial.json)."""
    best_trial = workdir / workdir_names.BEST_TRIAL_FILE
    if best_trial.exists():
        return _run_dir(workdir / json.loads(best_trial.read_bytes())["folder"])
    if not (workdir / workdir_names.CONFIG_FILE).exists():
        raise FileNotFoundError(
            f"{workdir / workdir_names.CONFIG_FILE} does not exist: --workdir must be a "
            "fine-tuning workdir (`albert-jax finetune --workdir=...`)")
    seeds = workdir / workdir_names.SEEDS_FILE
    if not seeds.exists():
        return workdir
    runs = json.loads(seeds.read_bytes())["runs"]
    return epath.Path(max(runs, key=lambda run: run["value"])["workdir"])


def _saved_config(run_dir: epath.Path) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        json.loads((run_dir / workdir_names.CONFIG_FILE).read_bytes()))


def _task_class(config: ml_collections.ConfigDict) -> type:
    """The task of a run's config.json: its fine-tuning task, or fill-mask for a pretraining
    run (whose config names no task)."""
    return registry.get(config.task) if config.get("task") else fill_mask.FillMaskTask


def load_finished_run(workdir: str, *, step: int | None = None,
                      **options: Any) -> FinishedRun:
    """The checkpoint `workdir` predicts with and its task, on this job's devices: the task
    class says which checkpoint (`checkpoint_to_predict`, `step` where it takes one) and takes
    the `options` of its predict (fill-mask: top_k)."""
    run_dir = _run_dir(epath.Path(workdir))
    config = _saved_config(run_dir)
    task_class = _task_class(config)
    directory, step, description = task_class.checkpoint_to_predict(run_dir, step)
    mesh = sharding.make_mesh(config.mesh)
    model_config, params = checkpoint.load(os.fspath(directory), step, mesh=mesh)
    task = task_class.from_run(config, run_dir, model_config, **options)
    eval_step = step_lib.jit_eval_step(task, mesh, jax.tree.map(lambda leaf: leaf.sharding, params))
    return FinishedRun(run_dir, step, description, task, params, mesh, eval_step)


# --- albert-jax evaluate ------------------------------------------------------------------------

def evaluate(workdir: str, split: str) -> list[str]:
    """`albert-jax evaluate`: predictions of the best dev checkpoint on every `split` set
    ("dev" or "test") into <workdir>/predictions/<split>/; returns the files written."""
    if split not in ("dev", "test"):
        raise ConfigError(f"--split={split!r}: use dev or test")
    run = load_finished_run(workdir)
    task = run.task
    directory = workdir_names.predictions_dir(workdir, split)
    is_main = jax.process_index() == 0
    if is_main:
        directory.mkdir(parents=True, exist_ok=True)
    written, split_metrics = [], {}
    for eval_split in task.prediction_splits(split):
        sums, predictions = run.predict(task.eval_batches(eval_split))
        if split == "dev" and sums is not None:
            split_metrics[eval_split] = task.eval_metrics(eval_split, sums, predictions)
        if is_main:
            written.append(_write_records(
                os.fspath(directory / _records_file(split, eval_split)),
                task.split_records(eval_split, predictions)))
            written += task.write_predictions(eval_split, predictions, os.fspath(directory))
    if split == "dev" and is_main:
        written += task.write_dev_metrics(split_metrics, run.step, os.fspath(directory))
    for path in written:
        print(f"wrote {path}", flush=True)
    return written


def _records_file(split: str, eval_split: str) -> str:
    """predictions.jsonl for the set named like the split; predictions-<set>.jsonl for the
    others (MNLI's dev_mismatched, test_mismatched and ax)."""
    return "predictions.jsonl" if eval_split == split else f"predictions-{eval_split}.jsonl"


def _write_records(path: str, records: list[dict[str, Any]]) -> str:
    files.write_atomically(path, "".join(json.dumps(record, ensure_ascii=False) + "\n"
                                         for record in records))
    return path


# --- albert-jax predict -------------------------------------------------------------------------

def with_embeddings(run: FinishedRun, pooling: str) -> FinishedRun:
    """`run` predicting the pooled vectors of its backbone (embeddings.py) instead of its task's
    outputs."""
    task = embeddings_lib.Embeddings(run.task, pooling)
    eval_step = step_lib.jit_eval_step(task, run.mesh,
                                       jax.tree.map(lambda leaf: leaf.sharding, run.params))
    return dataclasses.replace(run, task=task, eval_step=eval_step)


def predict(workdir: str, input_path: str, output: str | None = None, *,
            step: int | None = None, embeddings: str | None = None, **options: Any) -> str:
    """`albert-jax predict`: the checkpoint of `workdir` (`load_finished_run`: a fine-tuning
    run's best dev one; a pretraining run's `step` or latest, with fill-mask `options`) on the
    examples of `input_path`, one JSON object per line in input order, into `output` (default
    <workdir>/predictions/<input name>.jsonl; "-": standard output). `embeddings` ("cls" or
    "mean"): one vector per row instead (`with_embeddings`), as JSON Lines, or as one float32
    .npy array [rows, hidden] for an `output` ending .npy. A file is written under a temporary
    name and renamed when complete, so a killed predict leaves no half file. Returns where the
    predictions went."""
    if not epath.Path(input_path).exists():
        raise FileNotFoundError(f"--input={input_path} does not exist")
    if embeddings is not None and embeddings not in embeddings_lib.POOLINGS:
        raise ValueError(f"--embeddings={embeddings!r}: choose one of "
                         f"{', '.join(embeddings_lib.POOLINGS)}")
    if output is None:  # (os.path's lexical functions read a gs:// path as well)
        name = os.path.splitext(os.path.basename(os.path.normpath(input_path)))[0]
        output = os.fspath(epath.Path(workdir) / workdir_names.PREDICTIONS_SUBDIR / f"{name}.jsonl")
    to_stdout = output == "-"
    as_array = embeddings is not None and output.endswith(".npy")
    is_main = jax.process_index() == 0
    # With --output=-, standard output carries the predictions alone; every message goes to
    # standard error.
    with contextlib.redirect_stdout(sys.stderr) if to_stdout else contextlib.nullcontext():
        run = load_finished_run(workdir, step=step, **options)
        if embeddings is not None:
            run = with_embeddings(run, embeddings)
        print(f"Predicting with {run.description}.", flush=True)
        total = sum(len(examples) for examples in run.task.read_inputs(input_path,
                                                                        PREDICT_CHUNK_ROWS))
        with _output_file(output, is_main, binary=as_array) as write:
            if as_array:  # the .npy header first: the row count is known
                write(_npy_header((total, run.task.model_config.hidden_size)))
            rows, started = 0, time.perf_counter()
            for examples in run.task.read_inputs(input_path, PREDICT_CHUNK_ROWS):
                for record in run.prediction_records(examples):
                    write(_serialized(record, as_array))
                rows += len(examples)
                rate = rows / max(time.perf_counter() - started, 1e-9)
                print(f"predict: {rows}/{total} rows, {rate:.1f} rows/s, ETA "
                      f"{(total - rows) / rate:.0f} s", flush=True)
            if rows == 0:  # before the output is renamed into place
                raise ValueError(f"--input={input_path} holds no example")
    if not to_stdout:
        print(f"wrote {rows} predictions to {output}", flush=True)
    return output


def _serialized(record: dict[str, Any], as_array: bool) -> str | bytes:
    """A record as its JSON line; an embedding record's vector alone as float32 bytes (.npy)."""
    if as_array:
        return np.asarray(record["embedding"], "<f4").tobytes()
    if isinstance(record.get("embedding"), np.ndarray):
        record = dict(record, embedding=record["embedding"].tolist())
    return json.dumps(record, ensure_ascii=False) + "\n"


def _npy_header(shape: tuple[int, int]) -> bytes:
    """The header of a .npy file of float32 [rows, width], C order (NumPy's format 1.0)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return header.getvalue()


@contextlib.contextmanager
def _output_file(output: str, is_main: bool, binary: bool = False) -> Iterator[Any]:
    """write(text) (`binary`: write(bytes)) to `output` ("-": standard output), under a
    temporary name renamed at the end; an exception removes the temporary file and leaves
    `output` as it was. Other processes than the first write nothing."""
    if not is_main:
        yield lambda line: None
        return
    if output == "-":
        yield sys.__stdout__.write
        sys.__stdout__.flush()
        return
    # In a bucket too: an object that is closed is uploaded, even half written, so the partial
    # object is renamed (copied) only when complete.
    epath.Path(output).parent.mkdir(parents=True, exist_ok=True)
    partial = epath.Path(f"{output}.partial-{os.getpid()}")
    try:
        with partial.open("wb") if binary else open_text(partial, "w") as file:
            yield file.write
        partial.replace(output)
    finally:
        partial.unlink(missing_ok=True)


# --- albert-jax convert --from=orbax --to=huggingface of a fine-tuned workdir -------------------

def export_huggingface(workdir: str, output: str) -> None:
    """Writes the best dev checkpoint of fine-tuning `workdir` (of its best seed) to `output` as
    a transformers model of its task's class (config.json with the labels, model.safetensors)
    with the run's tokenizer beside it (`tokenizer_files.write_huggingface_tokenizer`), so
    `from_pretrained(output)`
    gives model and tokenizer."""
    run_dir = _run_dir(epath.Path(workdir))
    config = _saved_config(run_dir)
    best = loop.read_best(run_dir)
    model_config, params = checkpoint.load(os.fspath(run_dir / workdir_names.BEST_SUBDIR),
                                           best["step"])
    task = registry.get(config.task).from_run(config, run_dir, model_config)
    head = task.huggingface_head()
    save_huggingface(model_config, jax.tree.map(np.asarray, params), output, head=head)
    tokenizer_files.write_huggingface_tokenizer(task.tokenizer, output,
                                                model_config.max_position_embeddings)
    print(f"wrote the best dev checkpoint of {run_dir} (step {best['step']}, {best['metric']} "
          f"{best['value']:.4f}) as transformers.{head.architecture} to {output}", flush=True)
