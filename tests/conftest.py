"""Eight fake CPU devices for every test, set before jax initialises its backend."""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
