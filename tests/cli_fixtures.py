"""The real `albert-jax` command line for tests: run it, and tiny pretraining data built with it.

  result = cli("finetune", "--config=...", f"--workdir={tmp_path}")    # a CompletedProcess
  flags = build_demo_pretraining_data(tmp_path, environment)          # --config=... flags
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from albert_jax.data import corpus

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "albert_jax.cli"]


def cli(*arguments: str, timeout: int = 600,
        environment: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`albert-jax ARGUMENTS` in a subprocess from the repository root, output captured."""
    return subprocess.run(CLI + list(arguments), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=environment or dict(os.environ))


def build_demo_pretraining_data(root: Path, environment: dict[str, str] | None = None
                                ) -> list[str]:
    """A tokenizer (400 pieces) and a dataset (seq 64) built in `root` by `albert-jax tokenizer
    train` and `albert-jax data build` from 400 demo documents; returns the config flags that
    name them (configs/pretrain.py:runlocal plus the data overrides)."""
    text = "\n\n".join("\n".join(document) for _, document in
                       zip(range(400), corpus.demo_documents()))
    (root / "corpus.txt").write_text(text + "\n")
    flags = ["--config=configs/pretrain.py:runlocal",
             f"--config.data.corpus={root / 'corpus.txt'}",
             f"--config.data.tokenizer={root / 'spm.model'}",
             f"--config.data.dir={root / 'data'}", "--config.data.vocab_size=400",
             "--config.seq_len=64", "--config.data.dupe_factor=2",
             "--config.data.eval_fraction=0.05"]
    for command in (["tokenizer", "train"], ["data", "build"]):
        result = cli(*command, *flags, environment=environment)
        assert result.returncode == 0, result.stderr[-3000:]
    return flags
