"""What every fine-tuning task shares: the task base, the registry, the pretrained start, the
example types, table and text readers, features, scores and sliding windows. Imports no other
folder of finetune/."""
