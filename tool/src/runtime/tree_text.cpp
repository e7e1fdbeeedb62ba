#include "runtime/tree_text.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "base/units.h"

namespace memprofile {

using nlohmann::json;

namespace {

void print_status(const json& r) {
  auto str = [&](const char* k) { return r.value(k, std::string()); };
  auto num = [&](const char* k) { return r.value(k, uint64_t{0}); };
  const bool none = str("backend") == "none";
  std::cout << "pid " << r.value("pid", 0) << ": "
            << (none ? std::string("no heap profiler (--backend none): its memory only")
                     : str("backend") + ", recording " + (r.value("recording", false) ? "on" : "off"));
  if (!str("stopped_reason").empty()) std::cout << " (stopped: " << str("stopped_reason") << ")";
  std::cout << "\n";
  // One line where nothing reaches the profiler: the rest of status would
  // read as if snapshot could.
  if (!str("unreachable").empty()) std::cout << "  " << str("unreachable") << "\n";
  if (r.value("parent", 0) > 0 || !str("program").empty())
    std::cout << "  " << (r.value("parent", 0) > 0 ? "forked from pid " + std::to_string(r.value("parent", 0)) + ", "
                                                   : std::string())
              << "program " << str("program") << "\n";
  if (num("snapshot_every_ms"))
    std::cout << "  a " << (none ? "memory record every " : "snapshot every ") << num("snapshot_every_ms") / 1000.0
              << (none ? " s (" : " s while recording (") << num("snapshots_scheduled") << " so far)\n";
  json snaps = r.value("snapshots", json::array());
  std::vector<json> list(snaps.begin(), snaps.end());
  std::sort(list.begin(), list.end(),
            [](const json& a, const json& b) { return a.value("seq", uint64_t{0}) < b.value("seq", uint64_t{0}); });
  std::cout << (none ? "memory records: " : "profiles: ") << r.value("own_files", static_cast<unsigned>(list.size())) << " of this process, " << mib(num("own_bytes")) << "; "
            << mib(num("disk_bytes")) << " in " << str("output_dir") << " of a "
            << (num("max_bytes") ? mib(num("max_bytes")) : std::string("unlimited")) << " budget; "
            << mib(num("free_bytes")) << " free (floor " << mib(num("min_free_bytes")) << ")\n";
  if (r.value("not_its_own", 0u))
    std::cout << "  (" << r.value("not_its_own", 0u) << " more under its names are not its own: another user's, or "
              << "not regular files; not shown)\n";
  if (list.size() < r.value("own_files", 0u)) std::cout << "  (the " << list.size() << " listed; all are in " << str("output_dir") << ")\n";
  for (const auto& s : list)
    std::cout << "  " << s.value("path", std::string()) << "  " << mib(s.value("bytes", uint64_t{0})) << "\n";
}

// Where one process's memory is: the kernel's split, the allocator's view,
// and the gap between them by cause.
void print_memory(const ProcessMemory& m, const json& reply) {
  if (!m.known) {
    std::cout << "  memory: /proc cannot say (the process is gone, or another user's)\n";
    return;
  }
  std::cout << "  memory: RSS " << mib(m.rss) << " (anonymous " << mib(m.anon) << ", file " << mib(m.file) << ", shmem "
            << mib(m.shmem) << "), swap " << mib(m.swap) << "\n";
  auto it = reply.find("allocator");
  if (it != reply.end() && it->is_object()) {
    const json& j = *it;
    auto n = [&](const char* k) { return mib(j.value(k, uint64_t{0})); };
    if (j.value("name", std::string()) == "jemalloc")
      std::cout << "  allocator (jemalloc): allocated " << n("allocated") << ", active " << n("active") << ", resident "
                << n("resident") << ", mapped " << n("mapped") << ", retained " << n("retained") << ", metadata "
                << n("metadata") << "\n";
    else
      std::cout << "  allocator (glibc malloc): arena " << n("arena") << ", in use " << n("in_use") << ", free " << n("free")
                << ", mmapped " << n("mmapped") << (j.value("wraps_past_2gib", false) ? " (glibc < 2.33: mallinfo, wraps past 2 GiB)" : "")
                << "\n";
  } else if (reply.is_object()) {
    std::cout << "  allocator: not reported by this process\n";
  }
  std::vector<GapItem> gap = memory_gap(m, allocator_view(reply));
  if (gap.empty()) return;
  std::cout << "  outside the allocator's allocations:";
  for (size_t i = 0; i < gap.size(); ++i) std::cout << (i ? ";" : "") << " " << gap[i].what << " " << mib(gap[i].bytes);
  std::cout << "\n";
  // Attached is not seeing: a heap profiler whose malloc holds a small part
  // of the process's anonymous memory will show that part only.
  const std::string backend = reply.value("backend", std::string());
  const uint64_t outside = gap.size() > 1 ? gap[1].bytes : 0;
  if (!backend.empty() && backend != "none" && outside >= (32ull << 20) && outside > m.anon / 2)
    std::cout << "  most of its memory is outside the malloc " << backend << " sees (" << mib(outside) << " of "
              << mib(m.anon) << " anonymous): an allocator of its own, pymalloc, or a managed heap; the profile will "
              << "not show it (memprofile check --preload LIB PROGRAM says which)\n";
}

std::string share(uint64_t part, uint64_t whole) {
  return whole ? std::to_string(static_cast<int>(100.0 * static_cast<double>(part) / static_cast<double>(whole) + 0.5)) + " %"
               : std::string("-");
}

// One line on stderr for the descendants no profiler reaches (under a
// child that exec'd another program), with the first of their pids.
void print_beyond(const ControlRequest& o, const std::vector<long>& beyond) {
  if (beyond.empty()) return;
  constexpr size_t kNamed = 8;
  std::string pids;
  for (size_t i = 0; i < beyond.size() && i < kNamed; ++i) pids += (i ? ", " : "") + std::to_string(beyond[i]);
  if (beyond.size() > kNamed) pids += " and " + std::to_string(beyond.size() - kNamed) + " more";
  std::cerr << "memprofile: " << o.action << ": " << beyond.size() << " more process" << (beyond.size() == 1 ? "" : "es")
            << " of the tree, under processes that are not profiled (their children never carry the profiler), "
               "not reached: pid"
            << (beyond.size() == 1 ? " " : "s ") << pids << "\n";
}


}  // namespace

// Each member's line (or block, for status); one on stderr for each that
// was not reached or refused.
void print_members(const ControlRequest& o, const TreeAnswer& t) {
  for (const auto& m : t.ms) {
    if (!m.reply.is_object()) {
      std::cerr << "memprofile: " << o.action << ": pid " << m.pid << (m.comm.empty() ? "" : " (" + m.comm + ")")
                << ": " << m.why << "\n";
      continue;
    }
    const json& r = m.reply;
    if (!r.value("ok", false)) {
      std::cerr << "memprofile: " << o.action << " " << m.pid << ": " << m.why << "\n";
    } else if (o.action == "snapshot" && r.contains("marks")) {
      // memray: the moment marked in the capture being written.
      char at[32];
      std::snprintf(at, sizeof at, "%.1f", static_cast<double>(r.value("mark_at_ms", uint64_t{0})) / 1000);
      std::cout << r.value("snapshot", std::string()) << " at " << at << " s (mark " << r.value("mark", 0u) << " in "
                << r.value("marks", std::string()) << "; memprofile report ends a span there)\n";
    } else if (o.action == "snapshot") {
      std::cout << r.value("snapshot", std::string()) << "\n";
    } else if (o.action == "status") {
      print_status(r);
      print_memory(m.memory, r);
      if (m.profile.known)
        std::cout << "  profile: " << mib(static_cast<uint64_t>(m.profile.bytes)) << " in use at the last snapshot ("
                  << m.profile.snapshot << "), scaled as memprofile report scales it\n";
      else if (!m.profile.why.empty())
        std::cout << "  profile: " << m.profile.why << "\n";
    } else {
      std::cout << "pid " << m.pid << ": " << r.value("backend", std::string()) << ", recording "
                << (r.value("recording", false) ? "on" : "off") << "\n";
    }
  }
  print_beyond(o, t.beyond);
}

void print_tree_memory(const TreeAnswer& t) {
  size_t all = t.ms.size() + t.beyond.size();
  if (all > 1)
    std::cout << "tree of pid " << t.ms.front().pid << ": " << all << " processes, " << t.served << " served"
              << (all > t.served ? ", " + std::to_string(all - t.served) + " not reached (said above)" : "")
              << "; RSS " << mib(t.rss_all) << ", " << share(t.rss_profiled, t.rss_all) << " of it in the profiled processes\n";
  const CgroupMemory& cg = t.cgroup;
  if (cg.known)
    std::cout << "cgroup " << cg.path << " (" << cg.version << "): " << mib(cg.current)
              << " charged (what the OOM killer counts): anon " << mib(cg.anon) << ", file " << mib(cg.file)
              << ", shmem " << mib(cg.shmem) << (cg.version == "v2" ? ", kernel " + mib(cg.kernel) : "")
              << "; the tree's RSS is " << share(t.rss_all, cg.current) << " of it\n";
  else
    std::cout << "cgroup: " << cg.why << "\n";
}

}  // namespace memprofile
