"""cushare's real-GPU acceptance suite: orchestration, measurement and reports.

Standard library only, so it runs under Debian's /usr/bin/python3 on any
machine; framework workloads run as separate programs (tests/gpu/workers)
under whichever Python has the framework.
"""

import os
import sys

# The test toolkit (tests/lib): the region reader and the daemon launcher
# every harness shares. The checkout travels with the build to a GPU machine.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
