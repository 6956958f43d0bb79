"""A stand-in for the few TensorFlow 1.x APIs that google-research/albert's
create_pretraining_data.py and tokenization.py use, so their own code runs without TensorFlow
(benchmarks/bench_data_build.py puts this folder first on the reference's sys.path).

Only `tensorflow.compat.v1` exists (`import tensorflow.compat.v1 as tf`, as the reference
imports it); see compat/v1.py.
"""
