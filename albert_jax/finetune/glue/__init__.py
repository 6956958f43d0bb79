"""GLUE (SPEC 8.2): its TSV readers and one row of facts per task (data.py `SPECS`), the nine
registered tasks (task.py)."""
