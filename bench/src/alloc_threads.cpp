// An allocation-heavy multi-threaded workload for bench/profiler_overhead.sh:
// THREADS threads, each running ITERATIONS steps that replace one slot of a
// private ring of 8192 with a new block of a mixed size (mostly small, some
// up to 64 KiB), fills it (programs write what they allocate: a block never
// written costs an allocator nothing but bookkeeping, and would make the
// rate of bytes allocated, which sampling profilers pay for, unrealistically
// high), and now and then builds a std::string and a std::vector (the C++
// allocation paths). Deterministic for a given input.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

uint64_t next(uint64_t& x) {
  x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift
  return x;
}

size_t mixed_size(uint64_t r) {
  switch (r % 16) {
    case 0: return 4096 + (r >> 8) % 61440;  // 1 in 16: 4..64 KiB
    case 1: case 2: return 512 + (r >> 8) % 3584;
    default: return 16 + (r >> 8) % 240;       // most: 16..256 bytes
  }
}

void worker(int id, long iterations, size_t* checksum) {
  std::vector<void*> ring(8192, nullptr);
  uint64_t x = 88172645463325252ull + static_cast<uint64_t>(id) * 7919;
  size_t sum = 0;
  for (long i = 0; i < iterations; ++i) {
    uint64_t r = next(x);
    size_t slot = r % ring.size();
    free(ring[slot]);
    size_t size = mixed_size(r >> 13);
    auto* p = static_cast<unsigned char*>(malloc(size));
    memset(p, static_cast<int>(i), size);
    ring[slot] = p;
    if (i % 64 == 0) {
      std::string s(32 + r % 200, 'x');
      std::vector<int> v(8 + r % 100, id);
      sum += s.size() + v.size();
    }
    sum += size;
  }
  for (void* p : ring) free(p);
  *checksum = sum;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 4;
  long iterations = argc > 2 ? atol(argv[2]) : 2000000;
  std::vector<std::thread> pool;
  std::vector<size_t> sums(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t, iterations, &sums[static_cast<size_t>(t)]);
  for (auto& t : pool) t.join();
  size_t total = 0;
  for (size_t s : sums) total += s;
  return total == 0;  // never: keeps the work from being optimised away
}
