#!/usr/bin/env python3
"""Checks that a shared library exports exactly the names its X-macro tables list.

Usage: check_exports.py LIBRARY --table FILE[:MACRO] ... [--extra NAME ...]

Each --table names an .inc file; every line `MACRO(name, ...)` in it is an
expected export (MACRO defaults to any GS_*_HOOK / GS_*_EXPORT). --extra adds
names exported outside the tables (e.g. dlsym). Versions (name@VER) are
ignored; each name must appear at least once. Exit 1 with the difference.
"""
import argparse
import re
import subprocess
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("library")
    parser.add_argument("--table", action="append", default=[])
    parser.add_argument("--extra", action="append", default=[])
    args = parser.parse_args()

    expected = set(args.extra)
    for spec in args.table:
        path, _, macro = spec.partition(":")
        pattern = re.compile(r"^(%s)\(\s*([A-Za-z0-9_]+)" % (re.escape(macro) if macro else r"GS_\w+_(?:HOOK|EXPORT)"))
        with open(path) as f:
            for line in f:
                m = pattern.match(line)
                if m:
                    expected.add(m.group(2))

    out = subprocess.check_output(["nm", "-D", "--defined-only", args.library], text=True)
    exported = set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[1] in "TWiV":
            exported.add(fields[2].split("@")[0])

    missing = sorted(expected - exported)
    unexpected = sorted(exported - expected)
    for name in missing:
        print(f"{args.library}: does not export {name}", file=sys.stderr)
    for name in unexpected:
        print(f"{args.library}: exports {name}, which no table lists", file=sys.stderr)
    if not expected:
        print("no expected names: check the --table arguments", file=sys.stderr)
        return 1
    return 1 if missing or unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
