#!/usr/bin/env python3
"""The manifest edits bytehound 0.11.0 needs to build offline from Debian's
crates and the vendored ones (each edit must match exactly as often as
stated, so a changed tree fails here, not later in cargo).

usage: offline_edits.py SRC   (a working copy of the tag's tree)
"""
import os
import re
import sys


def edit(path, old, new, regex=False, count=1):
    with open(path) as f:
        text = f.read()
    if regex:
        text, n = re.subn(old, new, text, flags=re.S | re.M)
    else:
        n = text.count(old)
        text = text.replace(old, new)
    if n != count:
        sys.exit(f'{path}: expected {count} match(es) of {old!r}, found {n}')
    with open(path, 'w') as f:
        f.write(text)


def main(src):
    os.chdir(src)
    # (a) The workspace is cut to the preload library and its path
    #     dependencies: cargo resolves every member, and cli, server-core,
    #     gather and the integration tests need some 150 crates (actix-web,
    #     rhai, ...) that Debian does not ship and the preload does not use.
    edit('Cargo.toml', r'^members = \[.*?\]$',
         'members = ["common", "lz4-compress", "jemallocator/jemalloc-sys", "preload", '
         '"mimalloc_rust", "fast_range_map"]', regex=True)
    # (b) fast_range_map's [dev-dependencies] (criterion, btree-range-map,
    #     oorandom, rangemap) and the [[bench]] using them go: cargo resolves
    #     them for a workspace member, and Debian has none of them.
    edit('fast_range_map/Cargo.toml', r'^\[dev-dependencies\].*\Z', '', regex=True)
    # (c) The three not-perf git dependencies (rev 911723c) become version
    #     requirements, met by the vendored nwind, perf_event_open and
    #     thread-local-reentrant, which are not-perf at the commit Cargo.lock
    #     pins. cargo cannot fetch git offline, and a replaced git source
    #     would make nwind's own path dependency on thread-local-reentrant a
    #     second, distinct package.
    edit('preload/Cargo.toml', 'git = "https://github.com/koute/not-perf.git"\nrev = "911723c"\n',
         'version = "0.1"\n', count=3)
    # (d) The optional `sc` dependency (raw syscalls, only behind the
    #     non-default `sc` feature) goes: Debian has no sc, and no upstream
    #     source of 0.2.7 is known.
    edit('preload/Cargo.toml', '\nsc = { version = "0.2", optional = true }\n', '\n')
    # (e) rust-toolchain pins nightly-2022-10-13 for rustup; a rustup proxy in
    #     PATH would try to download it. Debian's rustc ignores it.
    os.remove('rust-toolchain')


if __name__ == '__main__':
    main(sys.argv[1])
