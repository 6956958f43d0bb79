"""RACE (SPEC 8.4): its reader (data.py) and the registered task (task.py)."""
