// Where a process's memory is (runtime/memory.h): /proc/PID/status's split,
// the memory cgroup of cgroup v2 and v1, and the gap by cause, on fake /proc
// and /sys/fs/cgroup trees.
#include <catch2/catch.hpp>

#include <map>
#include <sstream>
#include <string>

#include "base/error.h"
#include "profile/memory_record.h"
#include "profile/memory_report.h"
#include "runtime/memory.h"
#include "support.h"

using namespace memprofile;
using testing::Scratch;

namespace {
memprofile::ProcessInfo process_info(uint64_t pid, uint64_t parent, const std::string& program) {
  memprofile::ProcessInfo p;
  p.pid = p.key = pid;
  p.parent = parent;
  p.program = program;
  return p;
}
}  // namespace

TEST_CASE("process memory: RSS split as /proc/PID/status says, in bytes") {
  Scratch proc;
  testing::make_dirs(proc / "7");
  testing::write_file(proc / "7/status", "Name:\tapp\nVmRSS:\t  1000 kB\nRssAnon:\t   700 kB\nRssFile:\t   200 kB\n"
                                         "RssShmem:\t   100 kB\nVmSwap:\t     5 kB\n");
  ProcessMemory m = read_process_memory(7, proc.path());
  CHECK(m.known);
  CHECK(m.rss == 1000 * 1024);
  CHECK(m.anon == 700 * 1024);
  CHECK(m.file == 200 * 1024);
  CHECK(m.shmem == 100 * 1024);
  CHECK(m.swap == 5 * 1024);
  CHECK_FALSE(read_process_memory(8, proc.path()).known);
}

TEST_CASE("cgroup memory: v2's memory.current and memory.stat, v1's usage, the root said") {
  Scratch proc, sys;
  testing::make_dirs(proc / "7");
  testing::make_dirs(proc / "8");
  testing::make_dirs(proc / "9");
  testing::write_file(proc / "7/cgroup", "0::/kubepods/pod1/c1\n");
  testing::make_dirs(sys / "kubepods/pod1/c1");
  testing::write_file(sys / "kubepods/pod1/c1/memory.current", "4096000\n");
  testing::write_file(sys / "kubepods/pod1/c1/memory.stat", "anon 3000000\nfile 1000000\nkernel 96000\nshmem 5000\n");
  CgroupMemory v2 = read_cgroup_memory(7, proc.path(), sys.path());
  REQUIRE(v2.known);
  CHECK(v2.version == "v2");
  CHECK(v2.path == "/kubepods/pod1/c1");
  CHECK(v2.current == 4096000);
  CHECK(v2.anon == 3000000);
  CHECK(v2.file == 1000000);
  CHECK(v2.shmem == 5000);
  CHECK(v2.kernel == 96000);

  testing::write_file(proc / "8/cgroup", "12:cpu,cpuacct:/x\n5:memory:/docker/abc\n0::/\n");
  testing::make_dirs(sys / "memory/docker/abc");
  testing::write_file(sys / "memory/docker/abc/memory.usage_in_bytes", "2000\n");
  testing::write_file(sys / "memory/docker/abc/memory.stat", "cache 500\nrss 1400\nshmem 7\n");
  CgroupMemory v1 = read_cgroup_memory(8, proc.path(), sys.path());
  REQUIRE(v1.known);
  CHECK(v1.version == "v1");
  CHECK(v1.current == 2000);
  CHECK(v1.anon == 1400);
  CHECK(v1.file == 500);

  testing::write_file(proc / "9/cgroup", "0::/\n");
  CgroupMemory root = read_cgroup_memory(9, proc.path(), sys.path());
  CHECK_FALSE(root.known);
  CHECK_THAT(root.why, Catch::Contains("the root cgroup"));
  CHECK_FALSE(read_cgroup_memory(10, proc.path(), sys.path()).known);
}

TEST_CASE("the gap between RSS and the allocator, named by cause, never negative") {
  ProcessMemory m;
  m.known = true;
  m.anon = 100;
  m.file = 30;
  m.shmem = 5;
  AllocatorView a;
  a.known = true;
  a.name = "jemalloc";
  a.allocated = 50;
  a.resident = 60;
  std::vector<GapItem> g = memory_gap(m, a);
  REQUIRE(g.size() == 3);
  CHECK(g[0].what == "allocator overhead and fragmentation");
  CHECK(g[0].bytes == 10);
  CHECK(g[1].what == "anonymous memory outside the allocator");
  CHECK(g[1].bytes == 40);
  CHECK(g[2].bytes == 35);
  a.resident = 500;  // untouched pages the allocator counts: no negative gap
  CHECK(memory_gap(m, a)[1].bytes == 0);
  a.known = false;
  CHECK(memory_gap(m, a).empty());
}

TEST_CASE("memory records beside snapshots: which bucket grew, in one line") {
  std::string a = R"({"pid":7,"dump":"jeprof.7.0.m0.heap","rss":10485760,"anon":8388608,"file":2097152,"shmem":0,"swap":0,)"
                  R"("allocator":"jemalloc","allocated":6291456,"allocator_resident":7340032,"cgroup":20971520})";
  MemoryRecord first = parse_memory_record(a, "a.mem.json");
  CHECK(first.has_allocator);
  CHECK(first.allocated == 6291456);
  CHECK(first.has_cgroup);
  MemoryRecord heap = first, offheap = first, shm = first, cache = first, flat = first;
  heap.rss += 64 << 20, heap.anon += 64 << 20, heap.allocated += 63 << 20, heap.resident += 64 << 20, heap.cgroup += 64 << 20;
  CHECK_THAT(memory_verdict(first, heap, 0), Catch::StartsWith("the heap grew by 63.0 MiB: see the sites below"));
  offheap.rss += 64 << 20, offheap.anon += 64 << 20, offheap.cgroup += 64 << 20;
  CHECK_THAT(memory_verdict(first, offheap, 0),
             Catch::StartsWith("the heap is flat (+0 B); RSS grew by 64.0 MiB outside the allocator: anonymous mappings"));
  shm.rss += 32 << 20, shm.shmem += 32 << 20, shm.cgroup += 32 << 20;
  CHECK_THAT(memory_verdict(first, shm, 0), Catch::Contains("in file-backed or shared memory"));
  cache.cgroup += 500 << 20;
  CHECK_THAT(memory_verdict(first, cache, 0), Catch::Contains("the cgroup's charge grew by 500.0 MiB beyond the processes' RSS"));
  CHECK_THAT(memory_verdict(first, flat, 0), Catch::StartsWith("nothing grew by 1 MiB or more"));
  MemoryRecord fragmented = first;  // many blocks freed, their pages kept
  fragmented.rss += 40 << 20, fragmented.anon += 40 << 20, fragmented.resident += 40 << 20, fragmented.cgroup += 40 << 20;
  CHECK_THAT(memory_verdict(first, fragmented, 0),
             Catch::Contains("the allocator holds 40.0 MiB more than the app uses (resident - allocated): fragmentation or retention"));
  CHECK_THROWS_WITH(parse_memory_record(R"({"rss":-1})", "b.mem.json"), Catch::Contains("b.mem.json: \"rss\" is not a byte count"));
  CHECK_THROWS_WITH(parse_memory_record("[1]", "c.mem.json"), Catch::Contains("not a memory record"));
}

TEST_CASE("memory records alone (--backend none): grouped by process, in the order taken, the heap pointing at a profiler") {
  auto record = [](int pid, int64_t time, uint64_t rss, uint64_t allocated) {
    return parse_memory_record("{\"pid\":" + std::to_string(pid) + ",\"time\":" + std::to_string(time) +
                                   ",\"rss\":" + std::to_string(rss) + ",\"anon\":" + std::to_string(rss) +
                                   ",\"allocator\":\"glibc\",\"allocated\":" + std::to_string(allocated) +
                                   ",\"allocator_resident\":" + std::to_string(allocated) + "}",
                               "r.mem.json");
  };
  std::map<std::string, MemoryRecord> memory = {
      {"memprofile-mem.9.10", record(9, 100, 90 << 20, 80 << 20)},  // the same second as .9: by sequence
      {"memprofile-mem.9.9", record(9, 100, 50 << 20, 40 << 20)},
      {"memprofile-mem.9.1", record(9, 90, 10 << 20, 2 << 20)},
      {"memprofile-mem.4.1", record(4, 95, 5 << 20, 1 << 20)},
  };
  std::map<uint64_t, ProcessInfo> procs = {{9, process_info(9, 4, "/usr/sbin/worker")}};
  std::vector<MemorySeries> s = memory_series(memory, procs);
  REQUIRE(s.size() == 2);
  CHECK(s[0].info.pid == 4);
  CHECK(s[0].records.size() == 1);
  CHECK(s[1].info.program == "/usr/sbin/worker");
  CHECK(s[1].info.parent == 4);
  REQUIRE(s[1].records.size() == 3);
  CHECK(s[1].records[0].first == "memprofile-mem.9.1");
  CHECK(s[1].records[2].first == "memprofile-mem.9.10");
  CHECK(s[1].rss_growth() == 80 << 20);
  std::ostringstream text;
  print_memory_report(text, s, {});
  CHECK_THAT(text.str(), Catch::Contains("memory of pid 9, first record to last (3 over 10 s): RSS 10.0 MiB -> 90.0 MiB"));
  CHECK_THAT(text.str(), Catch::Contains("the heap grew by 78.0 MiB: a heap profile names the sites (memprofile exec "
                                         "--backend jemalloc or heaptrack)"));
  CHECK_THAT(text.str(), Catch::Contains("memory of pid 4: one record"));
  nlohmann::json j = memory_report_json(s, {});
  CHECK(j["backend"] == "none");
  CHECK(j["processes"][1]["records"].size() == 3);
  CHECK(j["processes"][0].count("verdict") == 0);
  SiteTable t = memory_trend_table(s[1]);
  CHECK(t.totals == std::vector<double>{10 << 20, 50 << 20, 90 << 20});
  CHECK(t.sites.size() == 4);  // anonymous, file + shmem, allocator resident, allocated
}

TEST_CASE("memory records: a heap that shrank while the allocator kept its pages is said to shrink") {
  MemoryRecord a = parse_memory_record(R"({"rss":104857600,"anon":104857600,"allocator":"glibc","allocated":104857600,)"
                                       R"("allocator_resident":104857600})",
                                       "a.mem.json");
  MemoryRecord b = a;
  b.allocated = 2 << 20;
  CHECK_THAT(memory_verdict(a, b, 0), Catch::StartsWith("the heap shrank by 98.0 MiB, but the allocator holds 98.0 MiB more"));
}

TEST_CASE("memory records: the cgroup's shmem that no process maps is a tmpfs, said as the line when the process is flat") {
  MemoryRecord a = parse_memory_record(R"({"rss":4194304,"anon":4194304,"shmem":0,"allocator":"jemalloc","allocated":1048576,)"
                                       R"("allocator_resident":2097152,"cgroup":104857600,"cgroup_shmem":0,"cgroup_file":1048576})",
                                       "a.mem.json");
  REQUIRE(a.has_cgroup_split);
  MemoryRecord b = a;
  b.cgroup += 32 << 20, b.cgroup_shmem += 32 << 20, b.cgroup_file += 32 << 20;
  CHECK_THAT(memory_verdict(a, b, 0), Catch::StartsWith("the process's memory is flat (RSS +0 B); the cgroup's shmem grew "
                                                        "by 32.0 MiB that no process maps: files written to a tmpfs"));
  CHECK_THAT(memory_change(a, b), Catch::EndsWith("cgroup +32.0 MiB (shmem +32.0 MiB, file +32.0 MiB)"));
  MemoryRecord mapped = a;  // shmem the process maps is its own bucket, not the tmpfs line
  mapped.rss += 32 << 20, mapped.shmem += 32 << 20, mapped.cgroup += 32 << 20, mapped.cgroup_shmem += 32 << 20;
  CHECK_THAT(memory_verdict(a, mapped, 0), !Catch::Contains("no process maps"));
}
