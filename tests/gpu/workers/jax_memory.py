"""Check 2: JAX with its default preallocation (75 % of what the device
reports as total) must size its pool from the quota, start, compute, and
report RESOURCE_EXHAUSTED when the pool is full."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _proto import emit, fill, wait_for  # noqa: E402

MiB = 1 << 20


def main():
    import jax
    import jax.numpy as jnp

    dev = jax.devices()[0]
    x = jnp.ones((1024, 1024), dtype=jnp.float32)
    value = float((x @ x).sum().block_until_ready())
    stats = {}
    try:
        stats = dev.memory_stats() or {}
    except Exception:
        pass
    emit("ready", platform=dev.platform, device=str(dev), jax=jax.__version__,
         bytes_limit=stats.get("bytes_limit"))

    def alloc(n):
        a = jnp.zeros((n,), dtype=jnp.uint8)
        a.block_until_ready()
        return a

    errors = (Exception,)  # XlaRuntimeError moved between jaxlib modules over releases
    blocks, held, err = fill(alloc, errors, [256 * MiB, 32 * MiB, 4 * MiB])
    try:
        stats = dev.memory_stats() or stats
    except Exception:
        pass
    emit("allocated", held=held, computed=value == 1024.0 * 1024 * 1024, platform=dev.platform,
         bytes_limit=stats.get("bytes_limit"), reserved=None,
         oom_type=None if err is None else type(err).__name__,
         expected_oom="XlaRuntimeError",
         oom_message=None if err is None else str(err).splitlines()[0][:300],
         mem_get_info_total=None)
    wait_for("release")
    del blocks
    emit("freed")


if __name__ == "__main__":
    main()
