"""The pretraining data build: corpus + tokenizer -> SOP/NSP-paired, n-gram-masked examples as
TFDS shards, the same bytes from a local process pool or Apache Beam.

One module a job: `dataset_settings.py` (what a built dataset is, its folder), `builder.py` (the
TFDS builder: the plan of units, the local pool, finalizing), `build_unit.py` (one unit: files
in, shards and manifest out), `beam_build.py` (the units on Apache Beam), `instances.py`
(documents -> SOP/NSP pairs), `masking.py` (whole-word n-gram masking, 80/10/10),
`example_bytes.py` (tf.Example bytes written directly), `shard_writer.py` (a unit's shards).
"""
