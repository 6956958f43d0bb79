"""RACE (SPEC 8.4): 4-way multiple choice over reading-comprehension articles, from the download's
`train|dev|test/{middle,high}/*.txt` or TFDS; accuracy overall, on RACE-M and on RACE-H.

  albert-jax finetune --config=configs/race.py --config.data.path=RACE ...
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from albert_jax.finetune.core import registry, scores, tables
from albert_jax.finetune.core.examples import ChoiceQuestion
from albert_jax.finetune.core.task import real_rows
from albert_jax.finetune.kinds.multiple_choice import MultipleChoiceTask
from albert_jax.finetune.race import data as race
from albert_jax.train.task import Batch


@registry.register("race")
class RaceTask(MultipleChoiceTask):
    """RACE: the best checkpoint by dev accuracy; test predictions as RACE.tsv."""

    name = "race"
    config_file = "race.py"
    num_choices = len(race.ANSWER_LETTERS)
    eval_splits = ("dev",)
    test_splits = ("test",)
    reads_folder_or_tfds = True

    @classmethod
    def metric_names(cls, config: ml_collections.ConfigDict) -> tuple[str, ...]:
        return ("accuracy", *(f"accuracy_{level}" for level in race.LEVELS))

    @classmethod
    def selection_metric(cls, config: ml_collections.ConfigDict) -> str:
        return "accuracy"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._questions: dict[str, list[ChoiceQuestion]] = {}

    def split_examples(self, split: str) -> list[ChoiceQuestion]:
        if split not in self._questions:
            data = self.config.data
            self._questions[split] = (
                race.read_tfds_split(data.tfds_name, split, data.tfds_data_dir or None)
                if data.tfds_name else race.read_split(data.path, split))
        return self._questions[split]

    def features(self, questions: Sequence[ChoiceQuestion]) -> dict[str, np.ndarray]:
        arrays = super().features(questions)
        # -1: a question of a user's table (`albert-jax predict`), which has no RACE level.
        arrays["level"] = np.asarray([race.LEVELS.index(question.level)
                                      if question.level in race.LEVELS else -1
                                      for question in questions], np.int32)
        return arrays

    def train_features(self) -> dict[str, np.ndarray]:
        return self.features(self.split_examples("train"))

    def eval_features(self, split: str) -> dict[str, np.ndarray]:
        return self.features(self.split_examples(split))

    def read_inputs(self, path: str, chunk_rows: int) -> Iterator[Sequence[ChoiceQuestion]]:
        """`albert-jax predict` input: a RACE .txt file or a folder of them, else a
        CSV/TSV/JSONL/Parquet table with the columns `context`, `question`, `options` (a list
        of 4) and, if it has one, `id`."""
        questions = race.read_path(path)
        if questions is not None:
            yield from tables.in_chunks(questions, chunk_rows)
            return
        columns = tables.Columns(context="context", question="question", options=("options",),
                                 id="id" if "id" in tables.column_names(path) else "")
        yield from tables.iter_example_chunks(
            path, "multiple_choice", columns, labelled=False, num_choices=self.num_choices,
            chunk_rows=chunk_rows)

    def train_batch_spec(self, batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
        return dict(super().train_batch_spec(batch_size),
                    level=jax.ShapeDtypeStruct((batch_size,), jnp.int32))

    def predictions(self, outputs: jax.Array, batch: Batch) -> dict[str, jax.Array]:
        return dict(super().predictions(outputs, batch), level=batch["level"])

    def eval_metrics(self, split: str, sums: dict[str, np.ndarray],
                     predictions: dict[str, np.ndarray]) -> dict[str, float]:
        real = real_rows(predictions)
        levels = [race.LEVELS[level] for level in real["level"]]
        return scores.race_metrics(real["prediction"], real["labels"], levels,
                                   num_choices=self.num_choices, level_names=race.LEVELS)

    def write_predictions(self, split: str, predictions: dict[str, np.ndarray],
                          directory: str) -> list[str]:
        return [race.write_predictions(directory, self.split_examples(split),
                                       [int(value) for value in real_rows(predictions)["prediction"]])]
