"""What training reads of a built dataset: `pipeline.py` (grain over the TFDS shards: host
shard, shuffle, mask, batch; a checkpointable iterator) and `shard_copy.py` (a bucket's shards
copied to each host's disk). It reads the build's masking and dataset settings, never the
builder.
"""
