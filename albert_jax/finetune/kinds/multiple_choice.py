"""Multiple choice (SPEC 8.4): the head, loss and prediction records shared by RACE (race/task.py)
and a user's own multiple-choice files (custom/task.py).

Each example is `num_choices` rows `[CLS] context [SEP] question+option [SEP]`; the model scores
each row (AlbertForMultipleChoice) and the softmax over the options is trained with the
cross-entropy of ClassificationTask, whose `labels` are the option positions. Examples are
objects with `id`, `article`, `question`, `options` and `answer` (examples.ChoiceQuestion).
"""
from __future__ import annotations

from typing import Any, Sequence

import flax.linen as nn
import jax
import numpy as np

from albert_jax.convert.huggingface import FinetunedHead
from albert_jax.finetune.core import features
from albert_jax.finetune.kinds.classification import ClassificationTask
from albert_jax.model import AlbertForMultipleChoice, example_inputs


class MultipleChoiceTask(ClassificationTask):
    """A question with `num_choices` options -> the index of the right one (`predictions` is
    ClassificationTask's, its classes the options)."""

    num_choices: int

    @property
    def labels(self) -> tuple[str, ...]:  # type: ignore[override]  # read-only: the option indices
        return tuple(str(option) for option in range(self.num_choices))

    def build_model(self) -> nn.Module:
        return AlbertForMultipleChoice(self.model_config,
                                       classifier_dropout=self.config.classifier_dropout)

    def features(self, questions: Sequence[Any]) -> dict[str, np.ndarray]:
        """input_ids, segment_ids, input_mask [questions, num_choices, seq_len]; labels
        [questions] (the answer's position)."""
        assert self.tokenizer is not None  # only a task for shapes (plan) has none
        return features.multiple_choice_features(questions, self.tokenizer, self.config.seq_len,
                                                 self.config.max_qa_length,
                                                 num_choices=self.num_choices)

    def init_inputs(self) -> tuple[jax.Array, ...]:
        return example_inputs((1, self.num_choices, self.config.seq_len))

    def flops_per_example(self, seq_len: int) -> float:
        return self.num_choices * super().flops_per_example(seq_len)

    def prediction_records(self, questions: Sequence[Any],
                           predictions: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        """One JSON object per question: id, prediction (option index), option_probabilities
        (one per option, in option order)."""
        return [{"id": question.id, "prediction": int(prediction),
                 "option_probabilities": [float(p) for p in probabilities]}
                for question, prediction, probabilities in zip(
                    questions, predictions["prediction"], predictions["probabilities"])]

    def huggingface_head(self) -> FinetunedHead:
        return FinetunedHead("AlbertForMultipleChoice")
