"""The units of a data build run on Apache Beam: Dataflow, Flink, Spark, or Beam's local runner.

  albert-jax data build --config=... \
      --beam_pipeline_options="runner=FnApiRunner,direct_running_mode=multi_processing,direct_num_workers=8"
  albert-jax data build --config=... --beam_pipeline_options="runner=DataflowRunner,project=P,\
region=R,temp_location=gs://B/tmp,setup_file=./pyproject.toml,max_num_workers=100"

The flag is TFDS's (`tfds build --beam_pipeline_options`), parsed the same way: comma-separated
`key=value` pairs (or a bare `key` for a switch), each one Beam pipeline option. The pipeline is
`Create(units) | Reshuffle | Map(build_unit)`: the units are a few file names each, so nothing
but file names moves between workers (no GroupByKey of text or examples, the step TFDS's Beam
writer needs and that runs out of memory at terabytes); a mixture's first pipeline counts each
unit's text the same way and gathers just the numbers. Each worker reads its units' files and
writes their shards and manifests straight to the dataset folder (gs:// on a cluster); the
launching process finalizes (`builder.py`). A unit the runner retries, or runs twice at once,
writes the same bytes (`build_unit.py`).

Never a silent download: a runner that would fetch something first (DirectRunner tries to
download Beam's Prism binary; Flink and Spark a job-server jar) is refused in one line saying
what to give instead.
"""
from __future__ import annotations

import json
from typing import Any

from etils import epath

from albert_jax import files
from albert_jax.data import corpus
from albert_jax.data.building import build_unit
from albert_jax.errors import ConfigError

LOCAL_EXAMPLE = "runner=FnApiRunner,direct_running_mode=multi_processing,direct_num_workers=N"
# What each runner needs so that nothing is downloaded on the way: one of these options.
_RUNNER_NEEDS = {
    "PrismRunner": ("prism_location",),
    "FlinkRunner": ("flink_job_server_jar", "job_endpoint"),
    "SparkRunner": ("spark_job_server_jar", "job_endpoint"),
    "PortableRunner": ("job_endpoint",),
}
_DATAFLOW_NEEDS = ("project", "region", "temp_location")


def _import_beam() -> Any:
    try:
        import apache_beam
    except ImportError:
        raise ConfigError("--beam_pipeline_options needs Apache Beam: pip install "
                          "'albert-jax[beam]' (or build without the flag, on this machine's "
                          "cores)") from None
    return apache_beam


def pipeline_options(text: str) -> Any:
    """`PipelineOptions` from "key=value,key=value,..."; one line for an unknown key, no runner,
    or a runner that would download something first."""
    beam = _import_beam()
    items = [item.strip() for item in text.split(",") if item.strip()]
    given = {item.split("=", 1)[0].lstrip("-"): (item.split("=", 1) + [None])[1] for item in items}
    flags = [f"--{item.lstrip('-')}" for item in items]
    if "default_sdk_harness_log_level" not in given:
        flags.append("--default_sdk_harness_log_level=WARNING")  # not every worker's INFO lines
    options = beam.options.pipeline_options.PipelineOptions(flags=flags)
    known = set(options.get_all_options(drop_default=False))
    unknown = sorted(key for key in given if key not in known)
    if unknown:
        raise ConfigError(f"--beam_pipeline_options: unknown Beam pipeline option(s) {unknown} "
                          f"(see `python -m apache_beam.examples.wordcount --help`)")
    runner = (given.get("runner") or "").rsplit(".", 1)[-1]
    if not runner:
        raise ConfigError(f"--beam_pipeline_options={text!r} names no runner: give runner=... "
                          f"(on this machine: {LOCAL_EXAMPLE})")
    if runner in ("DirectRunner", "SwitchingDirectRunner"):
        raise ConfigError(f"--beam_pipeline_options: runner={runner} first tries to download "
                          f"Beam's Prism runner; on this machine give {LOCAL_EXAMPLE}")
    needs = _RUNNER_NEEDS.get(runner, ())
    if needs and not any(given.get(key) for key in needs):
        raise ConfigError(f"--beam_pipeline_options: runner={runner} downloads its job server "
                          f"unless given one of {list(needs)}; add it (docs/launching.md)")
    if runner == "DataflowRunner":
        missing = [key for key in _DATAFLOW_NEEDS if not given.get(key)]
        if missing:
            raise ConfigError(f"--beam_pipeline_options: runner=DataflowRunner needs {missing} "
                              f"(docs/launching.md \"Building data on Dataflow\")")
    return options


def check_paths_reach_workers(options: Any, paths: dict[str, list[str]]) -> None:
    """On a runner whose workers are other machines, every path they read or write must be in
    a bucket: one line naming the first local one ({config key: paths})."""
    beam = _import_beam()
    runner = options.view_as(beam.options.pipeline_options.StandardOptions).runner or ""
    if runner.rsplit(".", 1)[-1] in beam.options.pipeline_options.StandardOptions.LOCAL_RUNNERS:
        return
    for key, values in paths.items():
        local = [path for path in values if "://" not in path]
        if local:
            raise ConfigError(f"config.{key}: {local[0]!r} is on this machine, which the "
                              f"{runner} workers cannot read or write; put it in a bucket "
                              f"(gs://...)")


def run(context: build_unit.BuildContext, units: list[build_unit.Unit], options: Any) -> None:
    """Builds `units` on the pipeline of `options`; returns when the runner has finished."""
    if not units:
        return
    beam = _import_beam()
    with beam.Pipeline(options=options) as pipeline:
        _ = (pipeline
             | "Units" >> beam.Create(units)
             | "Spread" >> beam.Reshuffle()
             | "Build" >> beam.Map(_build, context))


def count(units: list[build_unit.Unit], readings: dict[str, corpus.ReadSettings],
          output: epath.Path, options: Any) -> list[corpus.TextSize]:
    """Each unit's text (a mixture's, to weigh its groups), counted on the pipeline of
    `options`, in unit order. The workers' counts are gathered into one small file, `output`
    (the launching process cannot receive values from a remote runner), and read back."""
    beam = _import_beam()
    with beam.Pipeline(options=options) as pipeline:
        _ = (pipeline
             | "Units" >> beam.Create(units)
             | "Spread" >> beam.Reshuffle()
             | "Count" >> beam.Map(_count, readings)
             | "Gather" >> beam.combiners.ToList()
             | "Write" >> beam.Map(_write_counts, str(output)))
    counted = {index: corpus.TextSize(characters, sentences)
               for index, characters, sentences in json.loads(output.read_text())}
    return [counted[unit.index] for unit in units]


def _count(unit: build_unit.Unit, readings: dict[str, corpus.ReadSettings]) -> list[int]:
    size = corpus.count_sources(unit.sources, readings[unit.group])
    return [unit.index, size.characters, size.sentences]


def _write_counts(counts: list[list[int]], output: str) -> None:
    files.write_atomically(epath.Path(output), json.dumps(sorted(counts)))


def _build(unit: build_unit.Unit, context: build_unit.BuildContext) -> int:
    """One unit, on a Beam worker; counts its examples in the runner's metrics."""
    import apache_beam as beam
    manifest = build_unit.build_unit(context, unit)
    examples = build_unit.manifest_examples(manifest)
    beam.metrics.Metrics.counter("albert_jax", "examples").inc(examples)
    beam.metrics.Metrics.counter("albert_jax", "units").inc()
    return examples
