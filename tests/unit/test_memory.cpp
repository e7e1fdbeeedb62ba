// Where a process's memory is (runtime/memory.h): /proc/PID/status's split,
// the memory cgroup of cgroup v2 and v1, and the gap by cause, on fake /proc
// and /sys/fs/cgroup trees.
#include <catch2/catch.hpp>

#include <string>

#include "base/error.h"
#include "profile/memory_record.h"
#include "runtime/memory.h"
#include "support.h"

using namespace memprofile;
using testing::Scratch;

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
