"""Every file and folder name of a workdir, defined once.

  <workdir>/config.json          the run config (+ nothing else; checkpoints carry the model config)
  <workdir>/spiece.model         the run's tokenizer (HuggingFace's name), so the workdir alone is
                                 enough to fine-tune from, evaluate, predict or export
  <workdir>/vocab.txt            ... instead, when it is a WordPiece vocabulary (SPEC 2.5)
  <workdir>/labels.json          a classification task's label list, in class-index order
  <workdir>/data_summary.json    GLUE: examples and skipped lines of each split read
  <workdir>/checkpoints/<step>/  the train checkpoints (Orbax: state, data iterator, config)
  <workdir>/best/<step>/         the best dev checkpoint (fine-tuning)
  <workdir>/best.json            its step and dev metrics
  <workdir>/seeds.json           config.seeds > 1: every seed's best and the medians
  <workdir>/seed_<s>/            config.seeds > 1: one run per seed
  <workdir>/metrics.jsonl        one record per logged step and evaluation
  <workdir>/.append-<crc32>      gs:// only: the lines being added to metrics.jsonl (files.append;
                                 the next append removes one a killed run left; in tensorboard/ too)
  <workdir>/tensorboard/         TensorBoard event files, one per run started (reporting/metrics.py)
  <workdir>/tensorboard/plugins/profile/<run>/  config.profile: the jax.profiler trace
                                 (<host>.xplane.pb, perfetto_trace.json.gz; reporting/profiler.py)
  <workdir>/mlflow_run_id        report_to=mlflow: the MLflow run a resumed run continues
  <workdir>/wandb_run_id         report_to=wandb: the W&B run id a resumed run continues
  <workdir>/wandb/               report_to=wandb, local workdir: W&B's run folders
  <workdir>/predictions/<split>/ `albert-jax evaluate`: prediction files and metrics.json
  <workdir>/run.lock             held while a run uses the workdir (train/workdir_lock.py)
  <workdir>/best_trial.json      `albert-jax sweep`: the best configuration and the folder of its
                                 best run (trials/<n>/), which evaluate, predict and export use
"""
from __future__ import annotations

from etils import epath

CONFIG_FILE = "config.json"
TOKENIZER_FILE = "spiece.model"
VOCAB_FILE = "vocab.txt"
TOKENIZER_FILES = {"sentencepiece": TOKENIZER_FILE, "wordpiece": VOCAB_FILE}  # by Tokenizer.kind
LABELS_FILE = "labels.json"
DATA_SUMMARY_FILE = "data_summary.json"
CHECKPOINTS_SUBDIR = "checkpoints"
BEST_SUBDIR = "best"
BEST_FILE = "best.json"
SEEDS_FILE = "seeds.json"
METRICS_LOG_FILE = "metrics.jsonl"  # one JSON record a line: train and eval metrics by step
TENSORBOARD_SUBDIR = "tensorboard"
PROFILE_SUBDIR = "tensorboard/plugins/profile"  # jax.profiler's layout under a log dir
MLFLOW_RUN_FILE = "mlflow_run_id"
WANDB_RUN_FILE = "wandb_run_id"
WANDB_SUBDIR = "wandb"
PREDICTIONS_SUBDIR = "predictions"
SCORES_FILE = "metrics.json"  # in predictions/<split>/: the scores of one evaluate or predict
LOCK_FILE = "run.lock"
BEST_TRIAL_FILE = "best_trial.json"


def seed_dir(workdir: str | epath.Path, seed: int) -> epath.Path:
    """The run of one seed of a multi-seed fine-tuning workdir."""
    return epath.Path(workdir) / f"seed_{seed}"


def predictions_dir(workdir: str | epath.Path, split: str) -> epath.Path:
    """Where `albert-jax evaluate --split=<split>` writes."""
    return epath.Path(workdir) / PREDICTIONS_SUBDIR / split


def tokenizer_path(run_dir: str | epath.Path) -> epath.Path | None:
    """The run's copy of its tokenizer (spiece.model or vocab.txt), None when it has neither."""
    for name in TOKENIZER_FILES.values():
        if (epath.Path(run_dir) / name).exists():
            return epath.Path(run_dir) / name
    return None
