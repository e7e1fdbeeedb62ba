#!/usr/bin/env python3
"""Writes hand-built hostile seed inputs for the fuzz targets.

usage: fuzz/make-seeds.py OUT_DIR

Creates OUT_DIR/{elf,ld_cache,tar,config,archive}/, one directory per fuzz
target, each holding only inputs that target parses. Every seed is at most
256 KiB (run.sh's -max_len); larger payloads are zstd- or gzip-compressed,
which the layer and archive readers undo. Each seed is small and valid enough
to reach the code it aims at, and crafted so that honest bounds on work and
memory decide how long it takes: chains that loop, tables that all point at
one string, names that nest, manifests that repeat and indexes that fan out.
Generated at run time (fuzz/run.sh), never committed.
"""

import gzip
import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import threading

MAX_LEN = 256 * 1024

# ---- ELF -------------------------------------------------------------------

EM_X86_64 = 62
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_STRSZ, DT_SYMENT = 0, 4, 5, 6, 10, 11
DT_GNU_HASH = 0x6FFFFEF5
STB_GLOBAL, STT_FUNC = 1, 2


def gnu_hash(name):
    h = 5381
    for c in name.encode():
        h = (h * 33 + c) & 0xFFFFFFFF
    return h


def elf(hash_kind, cycle=None, chain_word=0, pad_to=0, nchain=0xFFFFFFFF):
    """A 64-bit little-endian x86-64 ET_DYN with one PT_LOAD over the whole
    file and a PT_DYNAMIC holding DT_HASH or DT_GNU_HASH, DT_SYMTAB, DT_STRTAB,
    so that the lookup of "malloc" and "free" walks a hash chain.

    sysv: nbucket 1, nchain `nchain` (0xffffffff: no bound from the table),
          bucket[0] = 1 and chain[i] = cycle[i] (a loop back onto itself).
    gnu:  nbuckets 1, symoffset 1, an all-ones bloom word, bucket[0] = 1 and
          chain words `chain_word` that never carry the end bit, so the walk
          runs on to the end of the segment.
    Symbols 1..7 are global functions named "xmalloc": close, never equal.
    """
    nsyms = 8
    phoff, phnum = 64, 2
    dyn_off = phoff + 56 * phnum            # 176
    ndyn = 6
    str_off = dyn_off + 16 * ndyn           # 272
    strtab = b"\0malloc\0free\0xmalloc\0".ljust(32, b"\0")
    sym_off = str_off + len(strtab)          # 304
    hash_off = sym_off + 24 * nsyms          # 496
    if hash_kind == "sysv":
        chain = [0] * nsyms
        for i, nxt in (cycle or {1: 1}).items():
            chain[i] = nxt
        table = struct.pack("<II", 1, nchain) + struct.pack("<I", 1) + struct.pack(f"<{nsyms}I", *chain)
    else:
        bloom = struct.pack("<Q", 0xFFFFFFFFFFFFFFFF)
        table = struct.pack("<IIII", 1, 1, 1, 6) + bloom + struct.pack("<I", 1)
        table += struct.pack("<I", chain_word) * (nsyms - 1)
    size = max(hash_off + len(table), pad_to)

    dyn = b""
    for tag, val in ((DT_HASH if hash_kind == "sysv" else DT_GNU_HASH, hash_off), (DT_STRTAB, str_off),
                     (DT_STRSZ, len(strtab)), (DT_SYMTAB, sym_off), (DT_SYMENT, 24), (DT_NULL, 0)):
        dyn += struct.pack("<qQ", tag, val)
    syms = b"\0" * 24
    for _ in range(1, nsyms):
        syms += struct.pack("<IBBHQQ", 13, (STB_GLOBAL << 4) | STT_FUNC, 0, 1, 0x1000, 16)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
    ehdr = ident + struct.pack("<HHIQQQIHHHHHH", 3, EM_X86_64, 1, 0, phoff, 0, 0, 64, 56, phnum, 64, 0, 0)
    phdrs = struct.pack("<IIQQQQQQ", PT_LOAD, 4, 0, 0, 0, size, size, 0x1000)
    phdrs += struct.pack("<IIQQQQQQ", PT_DYNAMIC, 4, dyn_off, dyn_off, dyn_off, len(dyn), len(dyn), 8)
    body = ehdr + phdrs + dyn + strtab + syms + table
    assert len(ehdr) == 64 and len(body) == hash_off + len(table)
    return body.ljust(size, b"\0")


def elf_seeds():
    malloc_even = gnu_hash("malloc") & ~1
    return {
        # chain[1] = 1 in a 540-byte file: the shape of the reported 2^32-step walk.
        "sysv-self-loop.elf": elf("sysv"),
        # 1 -> 2 -> ... -> 7 -> 1: a longer loop, every step a symbol compare.
        "sysv-cycle7.elf": elf("sysv", cycle={i: i % 7 + 1 for i in range(1, 8)}),
        # A loop whose honest nchain (8) should stop it.
        "sysv-cycle-nchain8.elf": elf("sysv", cycle={i: i % 7 + 1 for i in range(1, 8)}, nchain=8),
        # The same loop in a 200 KB file: a bound of "file size / 4" steps.
        "sysv-cycle7-200k.elf": elf("sysv", cycle={i: i % 7 + 1 for i in range(1, 8)}, pad_to=200_000),
        # GNU chains without an end bit: zero words (no compares), and words
        # that match malloc's hash so every step compares a symbol.
        "gnu-no-end.elf": elf("gnu"),
        "gnu-no-end-200k.elf": elf("gnu", pad_to=200_000),
        "gnu-match-no-end.elf": elf("gnu", chain_word=malloc_even),
    }


# ---- ld.so.cache -------------------------------------------------------------

NEW_MAGIC = b"glibc-ld.so.cache1.1"


def ld_cache(entries, strings, old_prefix=None):
    """New-format cache: header, `entries` (flags, key, value), then strings.
    Offsets are relative to the start of the new header (its own strings)."""
    hdr_len, ent_len = 48, 24
    table = b""
    for flags, key, value in entries:
        table += struct.pack("<iIIIQ", flags, key, value, 0, 0)
    hdr = NEW_MAGIC + struct.pack("<II", len(entries), len(strings)) + b"\0" * 20
    assert len(hdr) == hdr_len and len(table) == ent_len * len(entries)
    new = hdr + table + strings
    if old_prefix is None:
        return new
    return old_prefix + new


def ld_cache_seeds():
    x86_64_libc6 = 0x0303
    out = {}
    # Thousands of entries, all pointing at one long string with its NUL at
    # the very end: copying each costs entries x length.
    for n, length in ((8000, 60_000), (10_000, 4095), (2000, 200_000)):
        strings_at = 48 + 24 * n
        if strings_at + length + 1 > MAX_LEN:
            n = (MAX_LEN - length - 1 - 48) // 24
            strings_at = 48 + 24 * n
        s = b"/" + b"l" * (length - 1) + b"\0"
        out[f"one-string-{n}x{length}.cache"] = ld_cache([(x86_64_libc6, strings_at, strings_at)] * n, s)
    # The same with no NUL at all: every scan runs to the end of the file.
    n = 8000
    strings_at = 48 + 24 * n
    out["one-string-unterminated.cache"] = ld_cache([(x86_64_libc6, strings_at, strings_at)] * n,
                                                    b"k" * (MAX_LEN - strings_at))
    # A small honest cache, for the fuzzer to mutate from.
    names = [(b"libc.so.6", b"/lib/x86_64-linux-gnu/libc.so.6"), (b"libm.so.6", b"/lib/x86_64-linux-gnu/libm.so.6"),
             (b"ld-linux-x86-64.so.2", b"/lib64/ld-linux-x86-64.so.2")]
    strings, entries, base = b"", [], 48 + 24 * len(names)
    for k, v in names:
        ko = base + len(strings)
        strings += k + b"\0"
        vo = base + len(strings)
        strings += v + b"\0"
        entries.append((x86_64_libc6, ko, vo))
    out["small-valid.cache"] = ld_cache(entries, strings)
    # Old-format header with 0 entries in front of the new table (combined),
    # and one claiming 2^32-1 old entries.
    out["combined-old-new.cache"] = ld_cache(entries, strings, old_prefix=b"ld.so-1.7.0" + struct.pack("<I", 0) + b"\0")
    out["old-huge-nlibs.cache"] = b"ld.so-1.7.0" + struct.pack("<I", 0xFFFFFFFF) + b"\0" * 64
    # nlibs far larger than the file.
    out["new-huge-nlibs.cache"] = NEW_MAGIC + struct.pack("<II", 0xFFFFFFFF, 0) + b"\0" * 20 + b"\0" * 48
    return out


# ---- tar ----------------------------------------------------------------------


def tar_header(name, size=0, typeflag=b"0", linkname=b"", mode=0o644, ustar=True, prefix=b""):
    h = bytearray(512)
    h[0:100] = name[:100].ljust(100, b"\0")
    h[100:108] = b"%07o\0" % mode
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"00000000000\0"
    h[148:156] = b" " * 8
    h[156:157] = typeflag
    h[157:257] = linkname[:100].ljust(100, b"\0")
    if ustar:
        h[257:265] = b"ustar\x0000"
        h[345:500] = prefix[:155].ljust(155, b"\0")
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def pad(data):
    return data + b"\0" * ((512 - len(data) % 512) % 512)


def entry(name, data=b"", typeflag=b"0", linkname=b"", mode=0o644):
    return tar_header(name, len(data), typeflag, linkname, mode) + pad(data)


def gnu_long(kind, value):
    """A GNU 'L' (long name) or 'K' (long link) pseudo-entry."""
    data = value + b"\0"
    return tar_header(b"././@LongLink", len(data), kind) + pad(data)


def pax(records):
    """A PAX 'x' header; each record's length field counts its own digits."""
    body = bytearray()
    for k, v in records:
        rest = b" " + k + b"=" + v + b"\n"
        n = len(rest) + 1
        while len(str(n)) + len(rest) != n:
            n += 1
        body += str(n).encode() + rest
    return tar_header(b"PaxHeaders/x", len(body), b"x") + pad(body)


def end():
    return b"\0" * 1024


def zstd(data):
    return subprocess.run(["zstd", "-q", "-6", "-c"], input=data, stdout=subprocess.PIPE, check=True).stdout


def gz(data):
    return gzip.compress(data, 9, mtime=0)


def zeros_tail_zstd(prefix, total):
    """zstd of `prefix` followed by zeros up to `total` bytes, streamed so the
    zeros are never held in memory here."""
    p = subprocess.Popen(["zstd", "-q", "-6", "-c"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    out = io.BytesIO()
    t = threading.Thread(target=lambda: out.write(p.stdout.read()))
    t.start()
    p.stdin.write(prefix)
    left = total - len(prefix)
    chunk = b"\0" * (1 << 20)
    while left > 0:
        p.stdin.write(chunk[: min(left, len(chunk))])
        left -= min(left, len(chunk))
    p.stdin.close()
    t.join()
    p.wait()
    return out.getvalue()


def tar_seeds(elves):
    out = {}
    # Many tiny entries with very long names: GNU 'L' records and PAX paths.
    body = bytearray()
    i = 0
    while len(body) < MAX_LEN - 4096:
        name = (b"d%05d/" % i) + b"n" * 600
        body += gnu_long(b"L", name) + entry(b"short", b"x")
        i += 1
    out["many-gnu-long-names.tar"] = body + end()
    body = bytearray()
    i = 0
    while len(body) < MAX_LEN - 4096:
        name = (b"p%05d/" % i) + b"q" * 600
        body += pax([(b"path", name)]) + entry(b"short", b"y")
        i += 1
    out["many-pax-paths.tar"] = body + end()
    # 100 KB names that nest 50 000 directories deep ("a/a/a/..."): every
    # parent directory of the entry is a path of its own.
    deep = b"a/" * 50_000 + b"f"
    out["deep-gnu-long-name.tar"] = gnu_long(b"L", deep) + entry(b"short", b"z") + end()
    out["deep-pax-path.tar"] = pax([(b"path", deep)]) + entry(b"short", b"z") + end()
    # A 1 MiB-1 nested name (the reader's cap), compressed.
    deeper = b"a/" * ((1 << 20) // 2 - 1)
    out["deep-1m-name.tar.zst"] = zstd(gnu_long(b"L", deeper) + entry(b"short", b"z") + end())
    # Names no longer than PATH_MAX (4096) still nest 2 000 deep: 40 of them
    # under distinct top directories make 80 000 directories of ~2 KB paths.
    body = bytearray()
    for i in range(40):
        body += pax([(b"path", (b"x%02d/" % i) + b"a/" * 2040 + b"f")]) + entry(b"short", b"v")
    out["many-deep-4k-names.tar"] = bytes(body + end())
    # 1 MiB PAX names on 40 entries with the same name (duplicates noted).
    same = b"s" * ((1 << 20) - 64)
    out["dup-1m-names.tar.zst"] = zstd((pax([(b"path", same)]) + entry(b"short", b"w")) * 40 + end())
    # 64 consecutive extended headers (the reader's cap) before each entry.
    body = bytearray()
    for i in range(40):
        body += gnu_long(b"L", b"x" * 900) * 30 + pax([(b"path", b"y" * 900)]) * 33 + entry(b"e%d" % i, b"")
    out["stacked-ext-headers.tar"] = body[:MAX_LEN - 1024] if len(body) > MAX_LEN - 1024 else body + end()
    # Hard-link and symlink chains, loops, self links and links that climb.
    def links(n):
        body = bytearray(entry(b"l0", b"content", mode=0o755))
        for i in range(1, n):
            body += entry(b"l%d" % i, typeflag=b"1", linkname=b"l%d" % (i - 1))
        for i in range(1, n):
            body += entry(b"s%d" % i, typeflag=b"2", linkname=b"s%d" % (i - 1))
        body += entry(b"loop-a", typeflag=b"2", linkname=b"loop-b")
        body += entry(b"loop-b", typeflag=b"2", linkname=b"loop-a")
        body += entry(b"self-hard", typeflag=b"1", linkname=b"self-hard")
        body += entry(b"up", typeflag=b"1", linkname=b"../../etc/passwd")
        body += gnu_long(b"K", b"x/" * 2000) + entry(b"long-link", typeflag=b"2", linkname=b"")
        return bytes(body + end())

    out["link-chains.tar"] = links(200)
    out["link-chains-20k.tar.zst"] = zstd(links(20_000))
    # Its benign twin, the same number of entries as plain files: what a
    # layer that size costs, the baseline its time is judged against.
    body = bytearray(entry(b"l0", b"content", mode=0o755))
    for i in range(1, 20_000):
        body += entry(b"l%d" % i, b"")
    for i in range(1, 20_000):
        body += entry(b"s%d" % i, b"")
    TWINS["tar"]["link-chains-20k.tar.zst"] = zstd(bytes(body + end()))
    # Whiteouts and opaque markers over deep trees.
    body = bytearray()
    for i in range(200):
        body += entry(b"w/" + b"d/" * 40 + b"f%d" % i, b"")
    body += entry(b"w/.wh..wh..opq") + entry(b".wh.w") + entry(b"w/d/.wh.d")
    out["whiteouts.tar"] = body + end()
    # The hostile ELF files as layer content (read through the sparse capture).
    body = bytearray()
    for name, data in elves.items():
        if len(data) < 1024:
            body += entry(b"usr/lib/" + name.encode(), data, mode=0o755)
    out["hostile-elves.tar"] = body + end()
    out["hostile-elves.tar.gz"] = gz(body + end())
    # A 60 MB ELF whose tables are in its first page: the sysv loop and the
    # endless GNU chain may then walk "file size / 4" words.
    for kind, name in (("sysv", "sysv-loop"), ("gnu", "gnu-no-end")):
        data = elf(kind, cycle={i: i % 7 + 1 for i in range(1, 8)}) if kind == "sysv" else elf("gnu")
        size = 60 << 20
        # Rewrite PT_LOAD's sizes to cover the padded file.
        data = bytearray(data)
        struct.pack_into("<QQ", data, 64 + 32, size, size)
        hdr = tar_header(b"usr/lib/" + name.encode() + b"-60m.so", size, mode=0o755)
        out[f"{name}-60m-elf.tar.zst"] = zeros_tail_zstd(hdr + bytes(data), 512 + size + 1024)
    # A decompression bomb at the fuzz harness's 64 MiB limit and past it.
    out["zeros-63m.tar.zst"] = zeros_tail_zstd(entry(b"a", b"a"), 63 << 20)
    out["zeros-65m.tar.zst"] = zeros_tail_zstd(tar_header(b"big", 65 << 20), (65 << 20) + 512)
    # PAX size override far past the data; GNU base-256 size.
    out["pax-huge-size.tar"] = pax([(b"size", b"99999999999999999999")]) + entry(b"f", b"") + end()
    out["pax-size-past-end.tar"] = pax([(b"size", b"18446744073709551615")]) + entry(b"f", b"") + end()
    h = bytearray(tar_header(b"b256", 0))
    h[124:136] = b"\x80" + b"\0" * 3 + b"\xff" * 8
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    out["base256-size.tar"] = bytes(h) + end()
    return out


# ---- image configs ----------------------------------------------------------------


def config_seeds():
    base = {"architecture": "arm64", "os": "linux", "variant": "v8",
            "config": {"Entrypoint": ["/app"], "Cmd": ["-x"], "Env": ["PATH=/bin", "LD_PRELOAD=/l.so"],
                       "User": "nobody:nogroup", "WorkingDir": "/w"},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:00"]}}
    out = {"config.json": json.dumps(base).encode()}
    many = dict(base, config=dict(base["config"], Env=["PATH=" + "/x" * 10] * 12_000))
    out["many-env.json"] = json.dumps(many, separators=(",", ":")).encode()[:MAX_LEN]
    out["deep-arrays.json"] = b"[" * 100_000 + b"]" * 100_000
    out["deep-objects.json"] = b'{"a":' * 40_000 + b"1" + b"}" * 40_000
    out["deep-in-config.json"] = b'{"config":{"Env":' + b"[" * 50_000 + b"]" * 50_000 + b"}}"
    out["long-escapes.json"] = b'{"os":"' + b"\\u0000" * 40_000 + b'"}'
    out["many-diff-ids.json"] = json.dumps({"rootfs": {"diff_ids": ["sha256:" + "0" * 64] * 3000}}).encode()
    out["bad-types.json"] = b'{"config":{"Env":[1,2],"Cmd":"x"},"rootfs":{"diff_ids":{}}}'
    return out


def registries_conf_seeds():
    q3 = b'"' * 3
    out = {
        "mirrors.conf": b'[[registry]]\nprefix = "example.com/foo"\nlocation = "internal.example.net/bar"\n'
                        b'[[registry.mirror]]\nlocation = "m.local/foo"\ninsecure = true\npull-from-mirror = "digest-only"\n'
                        b'[[registry]]\nprefix = "*.corp.example"\nblocked = true\n',
        "v1.conf": b"[registries.search]\nregistries = ['a.io']\n[registries.insecure]\nregistries = ['b.io']\n"
                   b"[registries.block]\nregistries = ['c.io']\n",
        # What an adversarial pass found: a string closed by extra quotes
        # hiding the nesting after it, a long line of values, dotted keys.
        "extra-quotes.conf": b"a = [" + q3 + b"x" + q3 + b'", ' + b"[" * 20_000 + b"]" * 20_000 + b" ]\n",
        "long-line.conf": b"a = [" + b"1," * 100_000 + b"]\n",
        "dotted.conf": b"a" + b".a" * 50_000 + b" = 1\n",
        "inline-tables.conf": b"registry = [" + b",".join(b'{location="r%d.io"}' % i for i in range(5000)) + b"]\n",
        # toml11 3.7 read past its buffer on this (an unterminated literal
        # string of invalid UTF-8): refused before it parses now.
        "invalid-utf8.conf": b"[registries.search]\nregistries = ['a.i" + b"\xde" * 200,
    }
    return out


# ---- image archives -------------------------------------------------------------------


def sha(data):
    return hashlib.sha256(data).hexdigest()


def archive(files):
    """A plain tar of (name, bytes) or (name, None, type, link) tuples."""
    body = bytearray()
    for f in files:
        if len(f) == 2:
            body += entry(f[0].encode(), f[1])
        else:
            body += entry(f[0].encode(), b"", f[2], f[3].encode())
    return bytes(body + end())


def small_layer():
    return archive([("etc/hostname", b"x\n")])


def archive_seeds(elves):
    out = {}
    layer = small_layer()
    elf_layer = b""
    for name, data in elves.items():
        if len(data) < 1024:
            elf_layer += entry(b"usr/lib/" + name.encode(), data, mode=0o755)
    elf_layer += end()
    cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Entrypoint": ["/usr/lib/sysv-self-loop.elf"]},
                      "rootfs": {"type": "layers", "diff_ids": ["sha256:" + sha(elf_layer)]}}).encode()
    # A valid legacy docker-save archive whose layer holds the hostile ELFs.
    manifest = json.dumps([{"Config": "config.json", "RepoTags": ["hostile:1"], "Layers": ["layer.tar"]}]).encode()
    out["docker-legacy-hostile-elves.tar"] = archive([("manifest.json", manifest), ("config.json", cfg),
                                                      ("layer.tar", elf_layer)])
    # The same layer listed thousands of times (no diff_ids to count them).
    cfg_nodiff = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers"}}).encode()
    n = 40_000
    manifest = json.dumps([{"Config": "c", "Layers": ["l"] * n}], separators=(",", ":")).encode()
    out["docker-repeated-layer.tar"] = archive([("manifest.json", manifest), ("c", cfg_nodiff), ("l", layer)])
    # Streamed (gzip) form: the reader keeps small entries and re-reads them.
    n = 400_000
    manifest = json.dumps([{"Config": "c", "Layers": ["l"] * n}], separators=(",", ":")).encode()
    out["docker-repeated-layer-400k.tar.gz"] = gz(archive([("manifest.json", manifest), ("c", cfg_nodiff),
                                                           ("l", layer)]))
    # Many images in one manifest.json (just under the 4096 the reader takes),
    # all the same config and layer: --all-platforms loads every one.
    imgs = [{"Config": "c", "Layers": ["l"]}] * 4000
    out["docker-many-images.tar"] = archive([("manifest.json", json.dumps(imgs, separators=(",", ":")).encode()),
                                             ("c", cfg_nodiff), ("l", layer)])
    # manifest.json and blobs reached through symlink / hard-link chains.
    files = [("m0", json.dumps([{"Config": "c0", "Layers": ["l0"]}]).encode()), ("c0", cfg_nodiff), ("l0", layer)]
    for i in range(1, 40):
        files += [(f"m{i}", None, b"2", f"m{i - 1}"), (f"c{i}", None, b"1", f"c{i - 1}"),
                  (f"l{i}", None, b"2", f"./l{i - 1}")]
    files += [("manifest.json", None, b"2", "m39"), ("x", None, b"2", "y"), ("y", None, b"2", "x")]
    out["docker-link-chain.tar"] = archive(files)
    files = [("manifest.json", None, b"2", "manifest.json")]
    out["docker-self-link.tar"] = archive(files)

    # OCI: an index that nests, each level listing the next one many times.
    def blob(data):
        return (f"blobs/sha256/{sha(data)}", data)

    cfg_blob = blob(cfg_nodiff)
    layer_blob = blob(layer)
    leaf = json.dumps({"schemaVersion": 2, "config": {"digest": "sha256:" + sha(cfg_nodiff)},
                       "layers": [{"digest": "sha256:" + sha(layer)}]}).encode()
    leaf_blob = blob(leaf)

    def index(child, fanout):
        d = {"digest": "sha256:" + sha(child)}
        return json.dumps({"schemaVersion": 2, "manifests": [d] * fanout}, separators=(",", ":")).encode()

    files, child = [cfg_blob, layer_blob, leaf_blob], leaf
    fan = 500
    for level in range(4):
        idx = index(child, fan)
        files.append(blob(idx))
        child = idx
    files.append(("index.json", index(child, fan)))
    files.append(("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'))
    out["oci-nested-fanout.tar"] = archive(files)
    # Fan-out 1 but nested past the reader's depth limit, and within it.
    for depth, name in ((4, "oci-nested-4.tar"), (8, "oci-nested-8.tar")):
        files, child = [cfg_blob, layer_blob, leaf_blob], leaf
        for level in range(depth):
            idx = index(child, 1)
            files.append(blob(idx))
            child = idx
        files.append(("index.json", index(child, 1)))
        files.append(("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'))
        out[name] = archive(files)
    # The leaf listing the same layer blob thousands of times.
    leaf_many = json.dumps({"schemaVersion": 2, "config": {"digest": "sha256:" + sha(cfg_nodiff)},
                            "layers": [{"digest": "sha256:" + sha(layer)}] * 2000}, separators=(",", ":")).encode()
    out["oci-repeated-layer.tar"] = archive([cfg_blob, layer_blob, blob(leaf_many),
                                             ("index.json", index(leaf_many, 1))])
    # Docker >= 25: both index.json and manifest.json, layers named by digest.
    manifest = json.dumps([{"Config": cfg_blob[0], "Layers": [layer_blob[0]]}]).encode()
    out["docker25-both.tar"] = archive([cfg_blob, layer_blob, leaf_blob, ("index.json", index(leaf, 1)),
                                        ("manifest.json", manifest)])
    # A PAX size that makes "offset + size" wrap to 0 (the outer archive) or
    # to the layer's first byte: a reader that skips by seeking reads the same
    # entries again, forever. The entry's content starts at 1536 (PAX header,
    # its record block, the entry's header); a first entry's content at 512.
    wrap = pax([(b"size", str((1 << 64) - 1536).encode())]) + tar_header(b"manifest.json", 0)
    out["pax-size-wraps.tar"] = wrap + end()
    layer_wrap = pax([(b"size", str((1 << 64) - 1536).encode())]) + tar_header(b"f", 0) + end()
    manifest = json.dumps([{"Config": "c", "Layers": ["l"]}]).encode()
    out["docker-layer-pax-size-wraps.tar"] = archive([("l", layer_wrap), ("manifest.json", manifest),
                                                      ("c", cfg_nodiff)])
    return out


def profile_seeds():
    """Heap profiles: the first byte picks the reader (modulo 3: jemalloc,
    heaptrack, bytehound). Valid ones to start from, and hostile ones: a
    stack of thousands of frames, numbers past 64 bits, a dump that ends
    inside its maps, a trace with a long module line, many snapshots, frees
    of blocks never allocated, a zstd-compressed trace; bytehound files in
    stored and LZ4 chunks, an LZ4 block that expands a thousandfold, empty
    chunks by the thousand, lengths past the file."""
    maps = b"MAPPED_LIBRARIES:\n555500000000-555500002000 r-xp 00000000 fe:00 42 /app\n"
    dump = (b"heap_v2/524288\n  t*: 2: 2048 [0: 0]\n  t0: 2: 2048 [0: 0]\n"
            b"@ 0x555500001000 0x555500001100\n  t*: 2: 2048 [0: 0]\n  t0: 2: 2048 [0: 0]\n\n" + maps)
    trace = (b"v 10400 3\nx 4 /app\nX /app\nI 1000 10\nm 1 -\nm 1 x 555500000000 0 2000\n"
             b"t 555500001000 0\nt 555500001100 1\n+ 400 2 aa0\nc a\nR 10\n- aa0\n+ 10 1 bb0\nc 20\n")
    seeds = {
        "jemalloc-valid": b"\0" + dump,
        "jemalloc-deep-stack": b"\0heap_v2/1\n  t*: 1: 1 [0: 0]\n@" + b" 0x1" * 5000 + b"\n  t*: 1: 1 [0: 0]\n" + maps,
        "jemalloc-huge-numbers": b"\0heap_v2/99999999999999999999999\n  t*: 1: 1 [0: 0]\n" + maps,
        "jemalloc-cut-in-maps": b"\0" + dump[:-7],
        "jemalloc-zero-objects": b"\0heap_v2/1\n  t*: 0: 99 [0: 0]\n@ 0x1\n  t*: 0: 99 [0: 0]\n" + maps,
        "heaptrack-valid": b"\1" + trace,
        "heaptrack-many-snapshots": b"\1v 10400 3\nt 1 0\n" + b"".join(b"+ 10 1 %x\nc %x\n" % (i, i) for i in range(3000)),
        "heaptrack-long-module": b"\1v 10400 3\nm 4 /lib " + b"0 " * 30000 + b"0\n",
        "heaptrack-unknown-frees": b"\1v 10400 3\n" + b"".join(b"- %x\n" % i for i in range(5000)),
        "heaptrack-sized-string-overrun": b"\1v 10400 3\nx ffffffff /a\n",
    }
    seeds.update(bytehound_seeds())
    seeds.update(memray_seeds())
    try:
        p = subprocess.run(["zstd", "-q", "-c"], input=trace, capture_output=True, check=True)
        seeds["heaptrack-zstd"] = b"\1" + p.stdout
    except (OSError, subprocess.CalledProcessError):
        pass
    return seeds


def memray_seeds():
    """memray captures (first byte 3): the real ones of tests/fixtures/memray
    (LZ4-framed, raw, native, killed), and records of each kind
    (tests/unit/test_memray_capture.cpp)."""
    out = {}
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "memray")
    for name in ("plain.bin", "raw.bin", "native.bin", "killed.bin"):
        with open(os.path.join(here, name), "rb") as f:
            out["memray-" + name[:-4]] = b"\3" + f.read()

    def varint(v):
        b = b""
        while v >= 0x80:
            b += bytes([(v & 0x7f) | 0x80])
            v >>= 7
        return b + bytes([v])

    def zz(v):
        return varint(((v << 1) ^ (v >> 63)) & (2**64 - 1))

    head = b"memray\0" + struct.pack("<iBBQQqq", 11, 1, 0, 0, 0, 1000, 2000) + b"python3 app.py\0"
    head += struct.pack("<iQQBB", 4242, 1, 0, 1, 0)
    rec = b"\x06\x07/usr/bin/python3\0" + varint(1) + struct.pack("<Q", 0x400000) + b"\x08" + struct.pack("<Q", 0x1000)
    rec += varint(0x10000) + b"\x0b" + varint(1 << 20) + varint(0)
    rec += b"\x03" + zz(0) + b"<module>\0app.py\0" + zz(3) + b"\x0c" + struct.pack("<Q", 1) + b"\x04" + zz(0)
    rec += b"\x05" + zz(0x401500) + zz(0) + b"\x12" + zz(0x9000) + varint(4096) + zz(1)
    rec += b"\xa1" + zz(0x100000 - 0x9000) + varint(0x10000) + b"\xb1" + zz(0x4000) + varint(0x4000)
    rec += b"\x21" + zz(0x9000 - 0x104000) + b"\x0b" + varint(1 << 20) + varint(5000) + b"\x19"
    out["memray-records"] = b"\3" + head + rec + b"\x10"
    out["memray-killed-padding"] = b"\3" + head + rec + b"\0" * 64
    return out


def bytehound_seeds():
    """bytehound .dat files (first byte 2): chunks of kind 1 (an LZ4 block)
    or 2 (stored) around speedy-encoded events (tests/unit/test_bytehound_dat.cpp)."""
    u32 = lambda v: struct.pack("<I", v)
    u64 = lambda v: struct.pack("<Q", v)
    s = lambda b: u32(len(b)) + b
    header = u32(0) + u64(1) + u64(2) + u64(10**6) * 2 + u64(1700000000) + u64(0) + u32(42)
    header += s(b"app\0") + s(b"/app") + s(b"x86_64") + u64(1) + b"\x08"
    maps = b"555500000000-555500002000 r-xp 00000000 fe:00 42 /app\n"
    body = lambda ptr, size, bt: u64(ptr) + u64(size) + u64(bt) + u32(7) + u32(0) + u32(0) + u64(0)
    events = header + u32(23) + u64(2 * 10**6) + s(b"/proc/self/maps") + u64(len(maps)) + maps
    events += u32(5) + u64(1) + u32(2) + u64(0x555500001000) + u64(0x555500001100)
    for i in range(1, 20):
        events += u32(20) + u64(1) + u64(i) + u64(i * 10**6) + body(0xa000 + 16 * i, 1024, 1)
    events += u32(22) + u64(1) + u64(3) + u64(30 * 10**6) + u64(0xa030) + u64(0) + u32(7)
    events += u32(21) + u64(1) + u64(4) + u64(31 * 10**6) + u64(0xa040) + body(0xf000, 9999, 1)
    stored = lambda b: b"\x02" + u32(len(b)) + b

    def literals(b):  # one LZ4 block of literals alone
        n = len(b)
        token = b"\xf0" + b"\xff" * ((n - 15) // 255) + bytes([(n - 15) % 255]) if n >= 15 else bytes([n << 4])
        block = token + b
        return b"\x01" + u32(len(block)) + block

    # "a" then one match of 255 * 4000 bytes at offset 1: 1 MB out of 4 KB.
    bomb = b"\x1f" + b"a" + u16le(1) + b"\xff" * 4000 + b"\x00"
    return {
        "bytehound-stored": b"\x02" + stored(events),
        "bytehound-lz4": b"\x02" + literals(events),
        "bytehound-small-chunks": b"\x02" + b"".join(stored(events[i:i + 13]) for i in range(0, len(events), 13)),
        "bytehound-lz4-bomb": b"\x02" + stored(header) + b"\x01" + u32(len(bomb)) + bomb,
        "bytehound-empty-chunks": b"\x02" + stored(header) + stored(b"") * 5000 + stored(events[len(header):]),
        "bytehound-huge-lengths": b"\x02" + stored(header + u32(23) + u64(1) + s(b"/x") + u64(1 << 63)),
        "bytehound-deep-backtrace": b"\x02" + stored(header + u32(5) + u64(1) + u32(0xffffffff) + u64(1) * 3000),
    }


def u16le(v):
    return struct.pack("<H", v)


# Benign twins of hostile seeds that are large by design, by kind and the
# hostile seed's name: fuzz/run.sh judges the hostile seed's CPU time
# against its twin's, measured in the same run.
TWINS = {"tar": {}}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    if os.path.isdir(root):
        shutil.rmtree(root)
    elves = elf_seeds()
    tars = tar_seeds(elves)
    sets = {
        "elf": elves,
        "ld_cache": ld_cache_seeds(),
        "tar": tars,
        "config": config_seeds(),
        "archive": archive_seeds(elves),
        "profile": profile_seeds(),
        "registries_conf": registries_conf_seeds(),
    }
    # Image archives are tars too, and hostile layers make hostile archives.
    deep_layer = tars["deep-gnu-long-name.tar"]
    links_layer = tars["link-chains.tar"]
    nodiff = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers"}}).encode()
    for name, layer in (("deep-name", deep_layer), ("link-chains", links_layer)):
        manifest = json.dumps([{"Config": "c", "Layers": ["l"]}]).encode()
        sets["archive"][f"docker-layer-{name}.tar"] = archive([("manifest.json", manifest), ("c", nodiff),
                                                                ("l", layer)])
    for kind, seeds in sets.items():
        d = os.path.join(root, kind)
        os.makedirs(d)
        for name, data in seeds.items():
            assert len(data) <= MAX_LEN, f"{kind}/{name} is {len(data)} bytes, over {MAX_LEN}"
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
    for kind, twins in TWINS.items():
        d = os.path.join(root, kind + ".benign")
        os.makedirs(d)
        for name, data in twins.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
    for kind in sets:
        print(f"make-seeds: {len(sets[kind])} {kind} seeds in {os.path.join(root, kind)}", file=sys.stderr)


if __name__ == "__main__":
    main()
