"""Pretraining data, by job: `tokenizers/` (text -> ids), `corpus/` (documents from every
published format), `building/` (corpus + tokenizer -> masked SOP examples as TFDS shards) and
`input/` (what training reads of them), imported one way (ARCHITECTURE.md); `inspection.py`
is `albert-jax data inspect`, which looks at all four.
"""
