"""The ALBERT model family (Lan et al., ICLR 2020) in Flax linen."""
from albert_jax.model.albert import (
    AlbertForMultipleChoice,
    AlbertForPreTraining,
    AlbertForQuestionAnswering,
    AlbertForQuestionAnsweringV2,
    AlbertForSequenceClassification,
    AlbertForTokenClassification,
    AlbertModel,
    abstract_backbone_params,
    example_inputs,
)
from albert_jax.model.presets import PRESETS, ModelConfig, from_dict, get_config

__all__ = ["AlbertModel", "AlbertForPreTraining", "AlbertForSequenceClassification",
           "AlbertForQuestionAnswering", "AlbertForQuestionAnsweringV2", "AlbertForMultipleChoice",
           "AlbertForTokenClassification",
           "ModelConfig", "PRESETS", "get_config", "from_dict", "example_inputs",
           "abstract_backbone_params"]
