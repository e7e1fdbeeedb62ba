#!/usr/bin/env bash
# The memory promise of docs/preflight.md (Limits), end to end: an image of
# 400,000 small entries — 200 MB of tar headers from a generator — stops at the run's memory budget with one line naming
# the layer, exit 2, under 64 MiB of peak RSS from a file and 128 MiB from
# standard input. An image of 150,000 files, more than real images hold, is
# judged within the same bounds.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

# Under AddressSanitizer, its shadow memory and quarantine are not
# memprofile's: the bounds hold for the real binary (77: skipped).
if sanitized "${MEMPROFILE}"; then
  echo "skip: ${MEMPROFILE} is built with AddressSanitizer"
  exit 77
fi

# A docker-archive of one layer of N empty files, streamed to stdout in one
# pass: the layer first (its size is known ahead: one header per file), then
# the config that names its digest, then the manifest.
archive() {  # N
  python3 - "$1" <<'PY'
import hashlib, json, sys

n = int(sys.argv[1])
out = sys.stdout.buffer


def header(name, size=0, mode=0o644):
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = b"%07o\0" % mode
    h[108:124] = b"0000000\0" * 2
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"00000000000\0"
    h[148:156] = b" " * 8
    h[156:157] = b"0"
    h[257:265] = b"ustar\x0000"
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def entry(name, data):
    out.write(header(name, len(data)) + data + bytes(-len(data) % 512))


layer_size = 512 * (n + 1) + 1024
digest = hashlib.sha256()
out.write(header(b"layer.tar", layer_size))
for i in range(n):
    h = header(b"usr/share/doc/package-%05d/changelog-%07d.gz" % (i // 50, i))
    digest.update(h)
    out.write(h)
tail = header(b"bin/sh", 0, 0o755) + bytes(1024)
digest.update(tail)
out.write(tail)
config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Entrypoint": ["/bin/sh"]},
                     "rootfs": {"type": "layers", "diff_ids": ["sha256:" + digest.hexdigest()]}}).encode()
entry(b"config.json", config)
entry(b"manifest.json", json.dumps([{"Config": "config.json", "Layers": ["layer.tar"]}]).encode())
out.write(bytes(1024))
PY
}

peak_of() { tail -n 1 "$1"; }  # GNU time -f %M writes the peak RSS (KiB) last

judge() {  # WHAT LIMIT_KIB WANT_EXIT PATTERN -- memprofile args... [< input]
  local what="$1" limit="$2" want="$3" pattern="$4" rc=0
  shift 5
  /usr/bin/time -f '%M' -o "${SCRATCH}/rss" "$@" > "${SCRATCH}/out" 2> "${SCRATCH}/err" || rc=$?
  [[ "${rc}" == "${want}" ]] || { cat "${SCRATCH}/err" >&2; fail "${what}: exit ${rc}, want ${want}"; }
  grep -q -e "${pattern}" "${SCRATCH}/err" "${SCRATCH}/out" ||
    { cat "${SCRATCH}/err" >&2; fail "${what}: no '${pattern}'"; }
  local peak
  peak="$(peak_of "${SCRATCH}/rss")"
  ((peak <= limit)) || fail "${what}: peak RSS ${peak} KiB over ${limit} KiB"
  pass "${what} (peak RSS $((peak / 1024)) MiB)"
}

archive 400000 > "${SCRATCH}/many.tar"
judge "400,000 entries from a file" $((64 * 1024)) 2 \
  "many.tar:.*need more than [0-9]* MiB of memory (memprofile's limit" -- \
  "${MEMPROFILE}" preflight "${SCRATCH}/many.tar"
(($(wc -l < "${SCRATCH}/err") == 1)) || fail "the error is not one line"
judge "400,000 entries from stdin" $((128 * 1024)) 2 "stdin:.*need more than [0-9]* MiB of memory" -- \
  "${MEMPROFILE}" preflight - < "${SCRATCH}/many.tar"
rm -f "${SCRATCH}/many.tar"

archive 150000 > "${SCRATCH}/large.tar"
judge "150,000 files from a file" $((64 * 1024)) 1 "NOT PROFILABLE\|READY" -- "${MEMPROFILE}" preflight "${SCRATCH}/large.tar"
gzip -1 -c "${SCRATCH}/large.tar" > "${SCRATCH}/large.tar.gz"
judge "150,000 files, gzip, from stdin" $((128 * 1024)) 1 "NOT PROFILABLE\|READY" -- \
  "${MEMPROFILE}" preflight - < "${SCRATCH}/large.tar.gz"
rm -f "${SCRATCH}/large.tar" "${SCRATCH}/large.tar.gz"

# Two zstd layers whose frames declare zstd's largest default window
# (--long=27: 128 MiB) take turns: one window at a time, not two.
for i in 1 2; do
  mkdir -p "${SCRATCH}/l${i}"
  head -c 150000000 /dev/urandom > "${SCRATCH}/l${i}/data${i}.bin"
  tar -C "${SCRATCH}/l${i}" -cf "${SCRATCH}/l${i}.tar" "data${i}.bin"
  rm -rf "${SCRATCH}/l${i}"
  zstd -q -1 --long=27 --rm "${SCRATCH}/l${i}.tar" -o "${SCRATCH}/l${i}.tar.zst"
done
python3 - "${SCRATCH}" <<'PY'
import hashlib, json, os, subprocess, sys

d = sys.argv[1]
os.makedirs(d + "/oci/blobs/sha256")


def blob(data):
    h = hashlib.sha256(data).hexdigest()
    with open(d + "/oci/blobs/sha256/" + h, "wb") as f:
        f.write(data)
    return {"digest": "sha256:" + h, "size": len(data)}


layers, diff_ids = [], []
for i in (1, 2):
    raw = subprocess.run(["zstd", "-dc", "--long=27", "%s/l%d.tar.zst" % (d, i)], check=True, capture_output=True).stdout
    diff_ids.append("sha256:" + hashlib.sha256(raw).hexdigest())
    with open("%s/l%d.tar.zst" % (d, i), "rb") as f:
        layers.append(dict(mediaType="application/vnd.oci.image.layer.v1.tar+zstd", **blob(f.read())))
config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Entrypoint": ["/data1.bin"]},
                     "rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "config": dict(mediaType="application/vnd.oci.image.config.v1+json", **blob(config)),
                       "layers": layers}).encode()
index = {"schemaVersion": 2, "manifests": [dict(mediaType="application/vnd.oci.image.manifest.v1+json",
                                                **blob(manifest))]}
with open(d + "/oci/index.json", "w") as f:
    json.dump(index, f)
with open(d + "/oci/oci-layout", "w") as f:
    f.write('{"imageLayoutVersion":"1.0.0"}')
PY
rm -f "${SCRATCH}"/l?.tar.zst
# One 128 MiB window, the rest of the run, and margin; two windows would
# pass 256 MiB.
judge "two zstd layers with 128 MiB windows, one at a time" $((200 * 1024)) 1 "NOT PROFILABLE" -- \
  "${MEMPROFILE}" preflight --jobs 2 "${SCRATCH}/oci"
