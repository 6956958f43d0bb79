"""report_to=mlflow: one MLflow run per workdir, continued by a resumed run.

The run id is kept in <workdir>/mlflow_run_id. MLflow keeps every value logged for a step, and a
resumed run logs again the steps between its checkpoint and the kill, so this writer reads the
last step MLflow has of each metric when it opens the run and skips up to it: one value per
step; records of metrics.jsonl that MLflow lacks (a killed run's queued calls) are sent when
the run opens. Params are the flattened config (MLflow cuts neither keys nor values: we do, to its
limits); a param already in the run keeps its value (MLflow refuses to change one).
"""
from __future__ import annotations

import json
import math
import os
import time
from typing import Any, Mapping

import ml_collections
from etils import epath
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient
from mlflow.utils import validation

from albert_jax import files
from albert_jax.train import workdir as workdir_names
from albert_jax.train.reporting import metrics as metrics_lib

MAX_METRICS_PER_BATCH = 1000  # MLflow's log_batch limit
MAX_PARAMS_PER_BATCH = 100


def experiment_name(config: ml_collections.ConfigDict) -> str:
    """config.mlflow.experiment, else the config's task (pretraining has none: "pretrain")."""
    return config.mlflow.experiment or config.get("task") or "pretrain"


class MlflowWriter(metrics_lib.MetricWriter):

    def __init__(self, config: ml_collections.ConfigDict, workdir: epath.Path) -> None:
        uri = os.environ.get("MLFLOW_TRACKING_URI") or config.mlflow.tracking_uri or None
        self._client = MlflowClient(tracking_uri=uri)
        id_file = workdir / workdir_names.MLFLOW_RUN_FILE
        if id_file.exists():
            run = self._client.get_run(id_file.read_text().strip())
        else:
            name = experiment_name(config)
            experiment = self._client.get_experiment_by_name(name)
            experiment_id = (experiment.experiment_id if experiment is not None
                             else self._client.create_experiment(name))
            run = self._client.create_run(experiment_id, run_name=workdir.name)
            files.write_atomically(id_file, run.info.run_id)
        self.run_id = run.info.run_id
        self._params = dict(run.data.params)
        self._last_step = {key: max(metric.step for metric in
                                    self._client.get_metric_history(self.run_id, key))
                           for key in run.data.metrics}
        if run.info.status != "RUNNING":
            self._client.update_run(self.run_id, status="RUNNING")
        self._catch_up(workdir / workdir_names.METRICS_LOG_FILE)

    def _catch_up(self, metrics_file: epath.Path) -> None:
        """Logs the records of metrics.jsonl MLflow lacks: those a killed run still had queued
        (a resumed run does not train the steps before its checkpoint again)."""
        if not metrics_file.exists():
            return
        for line in metrics_file.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line being written
            step, split = record.pop("step"), record.pop("split", None)
            self.write_scalars(step, record, split)

    def write_scalars(self, step: int, scalars: Mapping[str, float],
                      split: str | None = None) -> None:
        now = int(time.time() * 1000)
        metrics = []
        for key, value in scalars.items():
            name = f"{split}/{key}" if split else key
            if math.isfinite(value) and step > self._last_step.get(name, -1):
                metrics.append(Metric(name, float(value), now, int(step)))
                self._last_step[name] = step
        for start in range(0, len(metrics), MAX_METRICS_PER_BATCH):
            self._client.log_batch(self.run_id,
                                   metrics=metrics[start:start + MAX_METRICS_PER_BATCH])

    def write_hparams(self, hparams: Mapping[str, Any]) -> None:
        params = [Param(key[:validation.MAX_ENTITY_KEY_LENGTH],
                        str(value)[:validation.MAX_PARAM_VAL_LENGTH])
                  for key, value in sorted(hparams.items())
                  if key[:validation.MAX_ENTITY_KEY_LENGTH] not in self._params]
        for start in range(0, len(params), MAX_PARAMS_PER_BATCH):
            self._client.log_batch(self.run_id, params=params[start:start + MAX_PARAMS_PER_BATCH])
        self._params.update((param.key, param.value) for param in params)

    def write_summary(self, step: int, summary: Mapping[str, float]) -> None:
        self.write_scalars(step, summary)
        self._client.set_terminated(self.run_id, status="FINISHED")
