"""SQuAD v1.1 / v2.0 (SPEC 8.3): reader and features (data.py), the registered task (task.py),
post-processing of the logits into answers (postprocess.py), the official evaluator
(official_eval.py, also `albert-jax squad-eval`)."""
