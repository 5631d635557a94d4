#!/usr/bin/python3
"""The node image builds the shim against the CUDA release the tests build
against (ctest portable.docker_cuda_headers): the Dockerfile's CUDA_IMAGE tag
(major.minor) must match CUDA_VERSION of the headers CMake found.

Usage: dockerfile_cuda.py DOCKERFILE CUDA_VERSION   (e.g. 13000)
"""
import re
import sys


def main():
    dockerfile, version = sys.argv[1], int(sys.argv[2])
    want = (version // 1000, version % 1000 // 10)
    text = open(dockerfile).read()
    m = re.search(r"^ARG CUDA_IMAGE=\S+:(\d+)\.(\d+)\.\d+-\S+$", text, re.M)
    if not m:
        print(f"FAIL: no 'ARG CUDA_IMAGE=<image>:<major>.<minor>.<patch>-...' in {dockerfile}")
        return 1
    got = (int(m.group(1)), int(m.group(2)))
    print(f"Dockerfile CUDA_IMAGE {got[0]}.{got[1]}, test headers {want[0]}.{want[1]}")
    if got != want:
        print("FAIL: the image's shim would be built against other CUDA headers than the tested one")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
