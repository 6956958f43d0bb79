"""Fine-tuning on GLUE, SQuAD and RACE: task readers, heads, metrics and evaluators."""
