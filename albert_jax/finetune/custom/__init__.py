"""The user's own files (configs/custom.py): tables for classification, regression and multiple
choice (data.py, task.py), tagged sentences for token classification (tagging_data.py,
tagging_task.py)."""
