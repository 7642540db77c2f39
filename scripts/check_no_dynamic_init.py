#!/usr/bin/env python3
"""Checks that a preloaded library runs no dynamic initialiser of ours (STYLE.md).

Usage: check_no_dynamic_init.py LIBRARY --src DIR [--src DIR ...]

A translation unit with a global that needs constructing at load time gets a
`_GLOBAL__sub_I_<file>` function in the library. Those of files under the
--src directories (our sources) are errors: the library must be usable from
its first intercepted call, before or without any constructor of ours, and
must not run code at load. Those of the static C++ runtime (eh_alloc.cc,
system_error.cc, ...) are not ours and are allowed. Exit 1 listing the files.
"""
import argparse
import os
import re
import subprocess
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("library")
    parser.add_argument("--src", action="append", default=[])
    args = parser.parse_args()

    ours = set()
    for root in args.src:
        for dirpath, _, files in os.walk(root):
            ours.update(f for f in files if f.endswith((".cc", ".cpp", ".c")))

    out = subprocess.check_output(["nm", args.library], text=True)
    found = set()
    for line in out.splitlines():
        m = re.search(r"_GLOBAL__sub_I_(\S+?)(?:\.cold)?$", line)
        if m and m.group(1) in ours:
            found.add(m.group(1))
    if found:
        print("dynamic initialisers of our sources in %s (use constexpr/constinit "
              "globals or never-destroyed function-local statics):" % args.library)
        for f in sorted(found):
            print("  " + f)
        return 1
    print("no dynamic initialisers of our sources in %s" % args.library)
    return 0


if __name__ == "__main__":
    sys.exit(main())
