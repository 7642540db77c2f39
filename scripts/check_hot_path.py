#!/usr/bin/env python3
"""Checks that the limiter's allocation path sits together in .text.hot.

Usage: check_hot_path.py LIB SYMBOL...

Each SYMBOL (a C name, or a substring of a demangled C++ name) must be
defined in LIB inside the .text.hot section, and that section must span at
most --max-pages pages (default 3). The linker merges .text.hot into .text
unless asked to keep it (lld: -z keep-text-section-prefix); then the path's
functions are scattered over the library and a TLB flush in the driver
between two calls costs a page walk for each (common/hot.h).
"""
import argparse
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("symbols", nargs="+")
    ap.add_argument("--max-pages", type=int, default=2)
    args = ap.parse_args()
    sections = subprocess.run(["readelf", "-SW", args.lib], check=True, capture_output=True,
                              text=True).stdout
    hot = None
    for line in sections.splitlines():
        fields = line.replace("[ ", "[").split()
        if len(fields) > 5 and fields[1] == ".text.hot":
            hot = (int(fields[3], 16), int(fields[5], 16))
    if hot is None:
        sys.exit(f"{args.lib}: no .text.hot section (the linker merged it into .text)")
    start, size = hot
    pages = (start + size - 1) // 4096 - start // 4096 + 1
    if pages > args.max_pages:
        sys.exit(f"{args.lib}: .text.hot spans {pages} pages (at most {args.max_pages})")
    syms = subprocess.run(["nm", "-C", args.lib], check=True, capture_output=True,
                          text=True).stdout.splitlines()
    bad = []
    for want in args.symbols:
        found = [line for line in syms if len(line.split(" ", 2)) == 3
                 and line.split(" ", 2)[1] in "tT"
                 and (line.split(" ", 2)[2].split("@")[0] == want
                      or ("::" in want and want in line.split(" ", 2)[2]))]
        if not found:
            bad.append(f"{want}: not in the library")
            continue
        addr = int(found[0].split()[0], 16)
        if not start <= addr < start + size:
            bad.append(f"{want}: at {addr:#x}, outside .text.hot [{start:#x}, {start + size:#x})")
    if bad:
        sys.exit("\n".join(bad))
    print(f".text.hot: {size} bytes, {pages} pages; {len(args.symbols)} symbols inside")


if __name__ == "__main__":
    main()
