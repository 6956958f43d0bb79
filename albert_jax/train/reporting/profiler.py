"""config.profile: a jax.profiler trace of chosen train steps, beside the TensorBoard logs.

Steps start_step .. start_step + num_steps - 1 are traced (each step is annotated as
StepTraceAnnotation("train", step_num=step), so the profile's step view splits them) into
<workdir>/tensorboard/plugins/profile/<run>/: <host>.xplane.pb (xprof, TensorBoard's profile
tab) and perfetto_trace.json.gz (ui.perfetto.dev). jax writes the Perfetto file through
pathlib, local paths only, so a gs:// workdir is traced into a local temporary folder and its
files uploaded when the trace stops. A run resumed at or past start_step does not trace.
"""
from __future__ import annotations

import shutil
import tempfile
from typing import Any, ContextManager

import jax
import ml_collections
from etils import epath

from albert_jax import files
from albert_jax.train import workdir as workdir_names


class StepProfiler:
    """Starts the trace before step `first`, stops it after step `last` (steps count from 1)."""

    def __init__(self, config: ml_collections.ConfigDict, workdir: epath.Path,
                 start_step: int) -> None:
        """start_step: the step the run starts from (a resumed run: its checkpoint's)."""
        profile = config.profile
        self.first = profile.start_step
        self.last = profile.start_step + profile.num_steps - 1
        self.enabled = (profile.num_steps > 0 and start_step < self.first
                        and (profile.all_processes or jax.process_index() == 0))
        self._workdir = workdir
        self._local = files.is_local(workdir)
        self._log_dir: epath.Path | None = None

    def annotate(self, step: int) -> ContextManager[Any]:
        """Around the dispatch of step `step`, every step (a trace taken some other way, e.g.
        from a profiler server, splits by step too; it costs under a microsecond): starts the
        trace at the window's first step."""
        if self.enabled and step == self.first:
            self._log_dir = (self._workdir / workdir_names.TENSORBOARD_SUBDIR if self._local
                             else epath.Path(tempfile.mkdtemp(prefix="albert_jax_profile_")))
            jax.profiler.start_trace(str(self._log_dir), create_perfetto_trace=True)
        return jax.profiler.StepTraceAnnotation("train", step_num=step)

    def step_done(self, step: int, state: Any) -> None:
        """After step `step`: at the window's last step, waits for it and stops the trace."""
        if self._log_dir is not None and step >= self.last:
            jax.block_until_ready(state)
            self.stop()

    def stop(self) -> None:
        """Stops a trace still running (also a run that ends inside the window) and says
        where it is."""
        if self._log_dir is None:
            return
        jax.profiler.stop_trace()
        run = max((self._log_dir / "plugins" / "profile").iterdir(), key=lambda path: path.name)
        target = self._workdir / workdir_names.PROFILE_SUBDIR / run.name
        if not self._local:
            for path in run.iterdir():
                files.write_atomically(target / path.name, path.read_bytes())
            shutil.rmtree(self._log_dir)  # our local temporary folder
        self._log_dir = None
        print(f"Profiled steps {self.first}-{self.last} into {target}: open it with "
              f"`xprof --logdir={self._workdir / workdir_names.TENSORBOARD_SUBDIR}` (or "
              "TensorBoard's profile tab), or load perfetto_trace.json.gz there at "
              "https://ui.perfetto.dev", flush=True)
