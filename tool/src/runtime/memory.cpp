#include "runtime/memory.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace memprofile {

namespace {

// A small kernel file, whole (they are a few KiB); "" when unreadable.
std::string read_small(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::string text;
  char buf[4096];
  while (text.size() < (1u << 20) && in.read(buf, sizeof buf).gcount() > 0) text.append(buf, static_cast<size_t>(in.gcount()));
  return text;
}

// "Key:   123 kB" lines of /proc/PID/status, in bytes.
uint64_t status_kib(const std::string& text, const char* key, bool& found) {
  std::string k = std::string("\n") + key + ":";
  size_t at = ("\n" + text).find(k);
  if (at == std::string::npos) return 0;
  found = true;
  return std::strtoull(text.c_str() + at + k.size() - 1, nullptr, 10) * 1024;
}

// "key value" lines of memory.stat.
uint64_t stat_value(const std::string& text, const char* key) {
  std::istringstream in(text);
  std::string k;
  uint64_t v;
  while (in >> k >> v)
    if (k == key) return v;
  return 0;
}

uint64_t first_number(const std::string& text) { return std::strtoull(text.c_str(), nullptr, 10); }

}  // namespace

ProcessMemory read_process_memory(long pid, const std::string& proc) {
  ProcessMemory m;
  std::string text = read_small(proc + "/" + std::to_string(pid) + "/status");
  if (text.empty()) return m;
  bool found = false;
  m.anon = status_kib(text, "RssAnon", found);
  m.file = status_kib(text, "RssFile", found);
  m.shmem = status_kib(text, "RssShmem", found);
  m.swap = status_kib(text, "VmSwap", found);
  m.rss = status_kib(text, "VmRSS", found);
  m.known = found;
  return m;
}

CgroupMemory read_cgroup_memory(long pid, const std::string& proc, const std::string& root) {
  CgroupMemory c;
  std::string text = read_small(proc + "/" + std::to_string(pid) + "/cgroup");
  if (text.empty()) {
    c.why = "/proc/" + std::to_string(pid) + "/cgroup cannot be read";
    return c;
  }
  std::istringstream lines(text);
  std::string line, v1_path, v2_path;
  bool v2 = false;
  while (std::getline(lines, line)) {
    // "ID:CONTROLLERS:PATH": v2 is "0::PATH"; v1's memory line names it.
    size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      v2 = true;
      v2_path = path;
    }
    std::istringstream cs(controllers);
    for (std::string one; std::getline(cs, one, ',');)
      if (one == "memory") v1_path = path;
  }
  // The same files under each version's names; v1 where its memory
  // controller is mounted, else v2's unified tree.
  struct Layout {
    const char* version;
    std::string path, dir;
    const char *usage, *anon, *file;
  };
  std::vector<Layout> layouts;
  if (!v1_path.empty())
    layouts.push_back({"v1", v1_path, root + "/memory" + (v1_path == "/" ? "" : v1_path), "memory.usage_in_bytes", "rss", "cache"});
  if (v2) layouts.push_back({"v2", v2_path, root + (v2_path == "/" ? "" : v2_path), "memory.current", "anon", "file"});
  // In a container without a cgroup namespace /proc names the host's path
  // (/docker/ID), while the container's own cgroup is mounted at the root:
  // the root is read when the path is not there.
  for (size_t i = 0, n = layouts.size(); i < n; ++i)
    if (layouts[i].path != "/") {
      Layout mounted = layouts[i];
      mounted.dir = root + (std::string(mounted.version) == "v1" ? "/memory" : "");
      layouts.push_back(mounted);
    }
  for (const auto& l : layouts) {
    std::string usage = read_small(l.dir + "/" + l.usage);
    if (usage.empty() && c.why.empty()) {
      c.why = l.path == "/" ? std::string("the root cgroup (no ") + l.usage + "): not in a container's cgroup"
                            : l.dir + "/" + l.usage + " cannot be read (cgroup " + l.version + " not mounted there?)";
      continue;
    }
    if (usage.empty()) continue;
    std::string stat = read_small(l.dir + "/memory.stat");
    c.known = true;
    c.why.clear();
    c.version = l.version;
    c.path = l.path;
    c.current = first_number(usage);
    // v1's usage is hierarchical, its plain counters are not: total_*
    // where the kernel gives them.
    auto v1_total = [&](const std::string& key) {
      std::string total = "total_" + key;
      return stat_value(stat, (c.version == "v1" && stat.find("\n" + total + " ") != std::string::npos ? total : key).c_str());
    };
    c.anon = v1_total(l.anon);
    c.file = v1_total(l.file);
    c.shmem = v1_total("shmem");
    if (c.version == "v2") {
      c.kernel = stat_value(stat, "kernel");
      if (!c.kernel) c.kernel = stat_value(stat, "kernel_stack") + stat_value(stat, "slab") + stat_value(stat, "pagetables");
    }
    return c;
  }
  if (!c.why.empty()) return c;
  c.why = "no memory cgroup in /proc/" + std::to_string(pid) + "/cgroup";
  return c;
}

std::vector<GapItem> memory_gap(const ProcessMemory& m, const AllocatorView& a) {
  std::vector<GapItem> out;
  if (!m.known || !a.known) return out;
  auto minus = [](uint64_t x, uint64_t y) { return x > y ? x - y : 0; };
  out.push_back({"allocator overhead and fragmentation", "allocator_overhead", minus(a.resident, a.allocated),
                 a.name == "jemalloc" ? "stats.resident - stats.allocated" : "arena + mmapped - in use"});
  out.push_back({"anonymous memory outside the allocator", "outside_allocator", minus(m.anon, a.resident),
                 "RssAnon - the allocator's resident: mmap'd by the app, thread stacks, JIT, another allocator"});
  out.push_back({"file-backed and shmem memory", "file_and_shmem", m.file + m.shmem,
                 "RssFile + RssShmem: mapped files, tmpfs and memory-medium emptyDirs, shared memory"});
  return out;
}

}  // namespace memprofile
