"""The failure helpers the tools' test scripts share: a failed check prints
one FAIL line and exits 1, which ctest reports with the script's output."""
import sys


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)
