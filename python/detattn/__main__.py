"""``python -m detattn selftest [BACKEND]`` (exit status 1 unless it passed) and
``python -m detattn info``."""

import json
import sys

from . import info, selftest


def main(argv):
    cmd = argv[0] if argv else "selftest"
    if cmd == "selftest":
        report = selftest(argv[1] if len(argv) > 1 else "all", verbose=True)
        print(report)
        return 0 if report else 1
    if cmd == "info":
        print(json.dumps(info(), indent=2))
        return 0
    print("usage: python -m detattn [selftest [all|cpu|cuda|cuda:N] | info]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
