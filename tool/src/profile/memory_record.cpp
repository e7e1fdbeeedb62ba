#include "profile/memory_record.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/error.h"
#include "base/json_text.h"
#include "profile/sites.h"

namespace memprofile {

namespace {

constexpr size_t kMaxRecord = 64 << 10;
constexpr double kGrew = 1 << 20;  // a bucket "grew" by at least 1 MiB

double delta(uint64_t a, uint64_t b) { return static_cast<double>(b) - static_cast<double>(a); }

std::string signed_bytes(double v) { return (v >= 0 ? "+" : "") + human_bytes(v); }

uint64_t field(const nlohmann::json& j, const char* key, const std::string& name) {
  auto it = j.find(key);
  if (it == j.end()) return 0;
  if (!it->is_number_unsigned()) throw FileError(name, std::string("\"") + key + "\" is not a byte count");
  return it->get<uint64_t>();
}

}  // namespace

const MemoryRecord* record_beside(const std::map<std::string, MemoryRecord>& memory, const std::string& dump_file) {
  auto it = memory.find(dump_file);
  return it == memory.end() ? nullptr : &it->second;
}

MemoryRecord parse_memory_record(const std::string& text, const std::string& name) {
  if (text.size() > kMaxRecord) throw FileError(name, "larger than 64 KiB; not a memory record");
  nlohmann::json j = parse_json_bounded(text, name);
  if (!j.is_object()) throw FileError(name, "not a memory record (a JSON object)");
  MemoryRecord r;
  r.pid = field(j, "pid", name);
  if (auto t = j.find("time"); t != j.end() && t->is_number_integer()) r.time = t->get<int64_t>();
  r.rss = field(j, "rss", name);
  r.anon = field(j, "anon", name);
  r.file = field(j, "file", name);
  r.shmem = field(j, "shmem", name);
  r.swap = field(j, "swap", name);
  if (j.contains("allocator") && j["allocator"].is_string()) {
    r.has_allocator = true;
    r.allocator = j["allocator"].get<std::string>();
    r.allocated = field(j, "allocated", name);
    r.resident = field(j, "allocator_resident", name);
  }
  if (j.contains("cgroup")) {
    r.has_cgroup = true;
    r.cgroup = field(j, "cgroup", name);
  }
  if (j.contains("cgroup_shmem") && j.contains("cgroup_file")) {
    r.has_cgroup_split = true;
    r.cgroup_shmem = field(j, "cgroup_shmem", name);
    r.cgroup_file = field(j, "cgroup_file", name);
  }
  return r;
}

std::string memory_verdict(const MemoryRecord& a, const MemoryRecord& b, double profile_growth, bool with_sites) {
  double rss = delta(a.rss, b.rss);
  double heap = a.has_allocator && b.has_allocator ? delta(a.allocated, b.allocated) : profile_growth;
  auto outside = [](const MemoryRecord& r) {
    return static_cast<double>(r.anon) - static_cast<double>(r.has_allocator ? r.resident : 0);
  };
  double anon_outside = a.has_allocator && b.has_allocator ? outside(b) - outside(a) : delta(a.anon, b.anon) - heap;
  double shared = delta(a.file + a.shmem, b.file + b.shmem);
  auto overhead = [](const MemoryRecord& r) { return static_cast<double>(r.resident) - static_cast<double>(r.allocated); };
  double kept = a.has_allocator && b.has_allocator ? overhead(b) - overhead(a) : 0;
  std::string tune = b.allocator == "jemalloc" ? "MALLOC_CONF=dirty_decay_ms:1000,muzzy_decay_ms:0 returns pages sooner"
                                               : "MALLOC_ARENA_MAX=2 or MALLOC_TRIM_THRESHOLD_ bounds glibc's arenas";
  double beyond = a.has_cgroup && b.has_cgroup ? delta(a.cgroup, b.cgroup) - rss : 0;
  // The cgroup's shmem beyond the process's own: files written to a tmpfs
  // (a memory-medium emptyDir, /dev/shm) stay in memory and count against
  // the pod, though no process maps them.
  double cg_shmem = a.has_cgroup_split && b.has_cgroup_split
                        ? delta(a.cgroup_shmem, b.cgroup_shmem) - delta(a.shmem, b.shmem)
                        : 0;
  struct Bucket {
    double bytes;
    std::string says;
  };
  // The process's own buckets; the cgroup (which may hold other processes
  // too: a pod's, a CI job's) is said beside them, never instead.
  std::vector<Bucket> grew = {
      {heap, "the heap grew by " + human_bytes(heap) +
                 (with_sites ? ": see the sites below"
                             : ": a heap profile names the sites (memprofile exec --backend jemalloc or heaptrack)")},
      {kept, "the allocator holds " + human_bytes(kept) +
                 " more than the app uses (resident - allocated): fragmentation or retention; " + tune},
      {anon_outside, "RSS grew by " + human_bytes(anon_outside) +
                         " outside the allocator: anonymous mappings (the app's own mmap, thread stacks, a JIT, "
                         "another allocator), which no heap profile shows"},
      {shared, "RSS grew by " + human_bytes(shared) +
                   " in file-backed or shared memory (tmpfs, memory-medium emptyDirs, mapped files, shm)"},
  };
  std::string cgroup =
      cg_shmem >= kGrew
          ? "the cgroup's shmem grew by " + human_bytes(cg_shmem) +
                " that no process maps: files written to a tmpfs or a memory-medium emptyDir (/dev/shm too) stay in "
                "memory and count against the pod (what the OOM killer counts); delete them, or give the volume a "
                "sizeLimit"
      : beyond >= kGrew ? "the cgroup's charge grew by " + human_bytes(beyond) +
                              " beyond the processes' RSS: page cache, tmpfs or kernel memory, or other processes of "
                              "the cgroup (what the OOM killer counts)"
                        : "";
  auto top = std::max_element(grew.begin(), grew.end(), [](const Bucket& x, const Bucket& y) { return x.bytes < y.bytes; });
  if (top->bytes < kGrew)
    return cgroup.empty() ? "nothing grew by 1 MiB or more (RSS " + signed_bytes(rss) + ")"
                          : "the process's memory is flat (RSS " + signed_bytes(rss) + "); " + cgroup;
  std::string said = top == grew.begin() ? top->says
                                         : (heap <= -kGrew ? "the heap shrank by " + human_bytes(-heap) + ", but "
                                            : heap < kGrew  ? "the heap is flat (" + signed_bytes(heap) + "); "
                                                         : "the heap grew by " + human_bytes(heap) + ", but ") +
                                               top->says;
  return cgroup.empty() ? said : said + "; besides, " + cgroup;
}

std::string memory_change(const MemoryRecord& a, const MemoryRecord& b) {
  std::string s = "RSS " + human_bytes(static_cast<double>(a.rss)) + " -> " + human_bytes(static_cast<double>(b.rss)) + " (" +
                  signed_bytes(delta(a.rss, b.rss)) + "): anonymous " + signed_bytes(delta(a.anon, b.anon)) + ", file " +
                  signed_bytes(delta(a.file, b.file)) + ", shmem " + signed_bytes(delta(a.shmem, b.shmem));
  if (a.has_allocator && b.has_allocator)
    s += "; " + b.allocator + " allocated " + signed_bytes(delta(a.allocated, b.allocated));
  if (a.has_cgroup && b.has_cgroup) s += "; cgroup " + signed_bytes(delta(a.cgroup, b.cgroup));
  if (a.has_cgroup_split && b.has_cgroup_split)
    s += " (shmem " + signed_bytes(delta(a.cgroup_shmem, b.cgroup_shmem)) + ", file " +
         signed_bytes(delta(a.cgroup_file, b.cgroup_file)) + ")";
  return s;
}

}  // namespace memprofile
