"""Every command keeps XLA's programs in ~/.cache/albert_jax/jax_cache by default; a run whose
config says `compilation_cache=""` keeps none (cli.py `_use_compilation_cache`)."""
import json
import os
import shutil

import pytest

from cli_fixtures import cli, one_device_environment


def _environment(home) -> dict[str, str]:
    """One CPU device, HOME in the test's folder, no cache named by the environment, and every
    program cached however fast it compiled (JAX's default skips those under a second)."""
    environment = {key: value for key, value in one_device_environment().items()
                   if key != "JAX_COMPILATION_CACHE_DIR"}
    return dict(environment, HOME=str(home), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")


@pytest.mark.slow
def test_predict_caches_by_default_and_not_when_the_run_says_off(pretrained_tiny, tmp_path):
    texts = tmp_path / "masked.txt"
    texts.write_text("the [MASK] sat on the mat\n")
    result = cli("predict", f"--workdir={pretrained_tiny}", f"--input={texts}",
                 f"--output={tmp_path / 'on.jsonl'}", environment=_environment(tmp_path / "on"))
    assert result.returncode == 0, result.stderr[-3000:]
    cache = tmp_path / "on" / ".cache" / "albert_jax" / "jax_cache"
    assert cache.is_dir() and os.listdir(cache)

    workdir = tmp_path / "run"  # the shared run is read-only: a copy whose config turns it off
    shutil.copytree(pretrained_tiny, workdir)
    config = json.loads((workdir / "config.json").read_text())
    (workdir / "config.json").write_text(json.dumps(dict(config, compilation_cache="")))
    result = cli("predict", f"--workdir={workdir}", f"--input={texts}",
                 f"--output={tmp_path / 'off.jsonl'}", environment=_environment(tmp_path / "off"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert not (tmp_path / "off" / ".cache").exists()
    assert (tmp_path / "off.jsonl").read_text() == (tmp_path / "on.jsonl").read_text()
