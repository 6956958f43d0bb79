"""Tokenizers: text -> ids as ALBERT has it (SPEC 2), for SentencePiece models and WordPiece
vocabularies alike.

  tokenizer = Tokenizer.load(path, TextSettings.from_config(config.data))
  train(sentences, "spiece.model", vocab_size, settings=settings)      # or train_from_config

One module a job: `preprocessing.py` (SPEC 2.2 text preprocessing, the SPEC 2.3 digit-comma
pieces, the SPEC 1.4.2 word starts), `text_settings.py` (the one record of a tokenizer's text
settings, kept beside its model), `tokenizer.py` (load and encode, both kinds), `wordpiece.py`
(BERT's WordPiece algorithm and its transformers files), `hf_files.py` (a SentencePiece model as
transformers tokenizer files), `training.py` (a model or vocabulary trained on a corpus: the
only module here that reads one), `text_damage.py` (what the reference settings do to a text:
the warnings of `tokenizer train`, `data build` and `data inspect`).
"""
from albert_jax.data.tokenizers.preprocessing import (
    COMMA_RULES,
    DEFAULT_COMMA_RULE,
    SPIECE_UNDERLINE,
    is_start_piece,
    needs_comma_split,
    preprocess_text,
)
from albert_jax.data.tokenizers.text_settings import (
    KINDS,
    TextSettings,
    check_kind,
    config_keys,
    read_record,
)
from albert_jax.data.tokenizers.tokenizer import (
    CLS,
    HF_SPM_FILE,
    MASK,
    PAD,
    SEP,
    UNK,
    SentencePieceTokenizer,
    Tokenizer,
    WordPieceTokenizer,
    tokenizer_kind,
)
from albert_jax.data.tokenizers.training import (
    INPUT_SENTENCE_SIZE,
    train,
    train_from_config,
    train_wordpiece,
)

__all__ = ["CLS", "COMMA_RULES", "DEFAULT_COMMA_RULE", "HF_SPM_FILE", "INPUT_SENTENCE_SIZE",
           "KINDS", "MASK", "PAD", "SEP", "SPIECE_UNDERLINE", "SentencePieceTokenizer",
           "TextSettings", "Tokenizer", "UNK", "WordPieceTokenizer", "check_kind", "config_keys",
           "is_start_piece", "needs_comma_split", "preprocess_text", "read_record",
           "tokenizer_kind", "train", "train_from_config", "train_wordpiece"]
