"""The ALBERT model family (Lan et al., ICLR 2020) in Flax linen."""
from albert_jax.model.albert import (AlbertForMultipleChoice, AlbertForPreTraining,
                                     AlbertForQuestionAnswering,
                                     AlbertForQuestionAnsweringV2,
                                     AlbertForSequenceClassification, AlbertModel)
from albert_jax.model.presets import PRESETS, from_dict, get_config

__all__ = ["AlbertModel", "AlbertForPreTraining", "AlbertForSequenceClassification",
           "AlbertForQuestionAnswering", "AlbertForQuestionAnsweringV2", "AlbertForMultipleChoice",
           "get_config", "from_dict", "PRESETS"]
