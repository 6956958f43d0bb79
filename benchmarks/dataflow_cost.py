"""Hours and cost of `albert-jax data build` on Dataflow, from the measured speed per core.

  python benchmarks/dataflow_cost.py --instances_per_cpu_second=4400 --examples_per_mb=500

Prints the table of docs/launching.md "Building data on Dataflow": for each corpus size at one
dupe factor, the examples made, the CPU-hours at the given speed (instances per CPU-second of a
whole build process, as `benchmarks/bench_data_build.py` measures them on this machine's
vCPUs), the wall time on `--workers` workers of `--vcpus_per_worker` vCPUs (Dataflow runs one
Python process per vCPU; a build spreads over units, so the time divides while there are more
units than processes), and the cost at Dataflow's batch prices per vCPU-hour, GB-hour of memory
and GB-hour of persistent disk (us-central1 list prices; check the current ones for a region).
"""
from __future__ import annotations

import argparse

# Dataflow batch, us-central1, per hour (the price list's "Dataflow compute resources").
VCPU_HOUR = 0.056
MEMORY_GB_HOUR = 0.003557
DISK_GB_HOUR = 0.000054


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instances_per_cpu_second", type=float, required=True,
                        help="measured: examples per CPU-second of a whole build process")
    parser.add_argument("--examples_per_mb", type=float, required=True,
                        help="measured: examples per MB of corpus text per dupe pass")
    parser.add_argument("--dupe_factor", type=int, default=10)
    parser.add_argument("--corpus_gb", default="16,160,1600")
    parser.add_argument("--unit_mb", type=float, default=32.0, help="data.unit_bytes in MiB")
    parser.add_argument("--workers", type=int, default=50, help="max_num_workers")
    parser.add_argument("--vcpus_per_worker", type=int, default=4)
    parser.add_argument("--memory_gb_per_worker", type=float, default=15.0)  # n1-standard-4
    parser.add_argument("--disk_gb_per_worker", type=int, default=30)
    parser.add_argument("--startup_minutes", type=float, default=6.0,
                        help="workers started and the package installed")
    args = parser.parse_args()

    worker_hour = (args.vcpus_per_worker * VCPU_HOUR + args.memory_gb_per_worker * MEMORY_GB_HOUR
                   + args.disk_gb_per_worker * DISK_GB_HOUR)
    print(f"speed {args.instances_per_cpu_second:,.0f} examples per CPU-second, "
          f"{args.examples_per_mb:,.0f} examples per MB per pass, dupe {args.dupe_factor}; "
          f"a worker: {args.vcpus_per_worker} vCPU, {args.memory_gb_per_worker:g} GB, "
          f"{args.disk_gb_per_worker} GB disk = ${worker_hour:.3f}/hour\n")
    print("| corpus | units | examples | CPU-hours | workers x vCPU | wall hours | cost |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for corpus_gb in (float(size) for size in args.corpus_gb.split(",")):
        corpus_mb = corpus_gb * 1000
        examples = corpus_mb * args.examples_per_mb * args.dupe_factor
        cpu_hours = examples / args.instances_per_cpu_second / 3600
        units = max(1, int(corpus_mb / (args.unit_mb * 1.048576)))
        processes = min(args.workers * args.vcpus_per_worker, units)
        workers = -(-processes // args.vcpus_per_worker)
        # Whole units per process: the last round of units is as long as a full one.
        unit_hours = cpu_hours / units
        rounds = -(-units // processes)
        wall_hours = rounds * unit_hours + args.startup_minutes / 60
        cost = workers * wall_hours * worker_hour
        print(f"| {corpus_gb:,.0f} GB | {units:,} | {examples / 1e6:,.0f} M | {cpu_hours:,.1f} "
              f"| {workers} x {args.vcpus_per_worker} | {wall_hours:,.2f} | ${cost:,.2f} |")


if __name__ == "__main__":
    main()
