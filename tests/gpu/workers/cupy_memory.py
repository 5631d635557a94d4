"""Check 2: fill a quota through CuPy's default memory pool until
cupy.cuda.memory.OutOfMemoryError."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _proto import emit, fill, wait_for  # noqa: E402

import cupy  # noqa: E402

MiB = 1 << 20


def main():
    free, total = cupy.cuda.runtime.memGetInfo()
    emit("ready", mem_get_info_total=total, mem_get_info_free=free, cupy=cupy.__version__)
    oom_type = cupy.cuda.memory.OutOfMemoryError

    def alloc(n):
        return cupy.empty(n, dtype=cupy.uint8)

    blocks, held, err = fill(alloc, (oom_type,), [256 * MiB, 32 * MiB, 4 * MiB])
    cupy.cuda.runtime.deviceSynchronize()
    pool = cupy.get_default_memory_pool()
    emit("allocated", held=held, reserved=pool.total_bytes(),
         oom_type=None if err is None else type(err).__name__,
         expected_oom=oom_type.__name__,
         oom_message=None if err is None else str(err).splitlines()[0][:300],
         mem_get_info_total=total)
    wait_for("release")
    del blocks
    pool.free_all_blocks()
    emit("freed", mem_get_info=list(cupy.cuda.runtime.memGetInfo()))


if __name__ == "__main__":
    main()
