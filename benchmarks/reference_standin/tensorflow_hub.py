"""Stand-in for `tensorflow_hub`: the reference's tokenization.py imports it at the top but only
`FullTokenizer.from_hub_module` uses it, which create_pretraining_data.py never calls."""
