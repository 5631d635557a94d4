"""cushare's real-GPU acceptance suite: orchestration, measurement and reports.

Standard library only, so it runs under Debian's /usr/bin/python3 on any
machine; framework workloads run as separate programs (tests/gpu/workers)
under whichever Python has the framework.
"""
