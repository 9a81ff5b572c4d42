"""The checks of the tests/check_*.py scripts: each failed check is recorded and printed, the
script goes on to the next, and finish() ends it with exit 1 when any failed."""
import sys

failures = []


def check(cond, what):
    """Records a failed check (and prints it); the script goes on to the next one."""
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def finish(name):
    """Exits 1 when a check failed, else says all passed."""
    if failures:
        print(f"{name}: {len(failures)} check(s) failed")
        sys.exit(1)
    print(f"{name}: all checks passed")
