#!/usr/bin/env python3
"""Runs the GPU acceptance suite's orchestrator (see run.sh, which builds
first and enforces the overall time limit)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cushare_gpu.main import main  # noqa: E402

sys.exit(main())
