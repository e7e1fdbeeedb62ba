# Makes a DWARF zlib bomb of an ELF file: its .debug_info replaced by a
# SHF_COMPRESSED section whose header declares SIZE bytes, all zeros, which
# zlib holds in about SIZE/1000 bytes (tests/e2e/report_bad_input.sh).
# usage: debug_bomb.py ELF OUT SIZE
import struct, sys, zlib, subprocess, shutil
src, out, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
# A zlib stream that inflates to `size` zero bytes, built in pieces.
c = zlib.compressobj(9)
chunk = bytes(1 << 20)
parts = [c.compress(chunk) for _ in range(size >> 20)]
parts.append(c.flush())
body = b"".join(parts)
chdr = struct.pack("<IIQQ", 1, 0, size, 1)  # ELFCOMPRESS_ZLIB, ch_size, ch_addralign
open(out + ".sec", "wb").write(chdr + body)
subprocess.run(["objcopy", "--remove-section=.debug_info", "--add-section", ".debug_info=" + out + ".sec", src, out], check=True)
# Mark it SHF_COMPRESSED (0x800): objcopy cannot.
b = bytearray(open(out, "rb").read())
shoff, = struct.unpack_from("<Q", b, 0x28)
shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3a)
stroff, = struct.unpack_from("<Q", b, shoff + shstrndx * shentsize + 0x18)
for i in range(shnum):
    h = shoff + i * shentsize
    name, = struct.unpack_from("<I", b, h)
    end = b.index(b"\0", stroff + name)
    if bytes(b[stroff + name:end]) == b".debug_info":
        flags, = struct.unpack_from("<Q", b, h + 8)
        struct.pack_into("<Q", b, h + 8, flags | 0x800)
open(out, "wb").write(b)
