#include "profile/memory_report.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

namespace memprofile {

namespace {

double as_double(uint64_t v) { return static_cast<double>(v); }

std::string signed_bytes(double v) { return (v >= 0 ? "+" : "") + human_bytes(v); }

nlohmann::json record_json(const std::string& name, const MemoryRecord& r) {
  nlohmann::json j = {{"record", name}, {"time", r.time}, {"rss", r.rss}, {"anon", r.anon},
                      {"file", r.file}, {"shmem", r.shmem}, {"swap", r.swap}};
  if (r.has_allocator) j["allocator"] = {{"name", r.allocator}, {"allocated", r.allocated}, {"resident", r.resident}};
  if (r.has_cgroup) j["cgroup"] = r.cgroup;
  if (r.has_cgroup_split) j["cgroup_split"] = {{"shmem", r.cgroup_shmem}, {"file", r.cgroup_file}};
  return j;
}

// "over 12 s", when the records say when they were taken.
std::string span(const MemorySeries& s) {
  int64_t a = s.records.front().second.time, b = s.records.back().second.time;
  return a > 0 && b >= a ? " over " + std::to_string(b - a) + " s" : "";
}

}  // namespace

double MemorySeries::rss_growth() const {
  return records.size() < 2 ? 0 : as_double(records.back().second.rss) - as_double(records.front().second.rss);
}

std::vector<MemorySeries> memory_series(const std::map<std::string, MemoryRecord>& memory,
                                        const std::map<uint64_t, ProcessInfo>& records) {
  std::map<uint64_t, MemorySeries> by_pid;
  for (const auto& [name, r] : memory) {
    const uint64_t key = r.process ? r.process : r.pid;
    MemorySeries& s = by_pid[key];
    s.info.pid = r.pid;
    s.info.key = key;
    s.info.origin = r.origin;
    if (auto it = records.find(key); it != records.end()) s.info = it->second;
    s.records.push_back({name, r});
  }
  std::vector<MemorySeries> out;
  for (auto& [pid, s] : by_pid) {
    // Taken in this order: by time, then by the sequence in the name (a
    // shorter number is a smaller one).
    std::sort(s.records.begin(), s.records.end(), [](const auto& x, const auto& y) {
      return std::make_tuple(x.second.time, x.first.size(), x.first) < std::make_tuple(y.second.time, y.first.size(), y.first);
    });
    out.push_back(std::move(s));
  }
  return out;
}

void print_memory_report(std::ostream& out, const std::vector<MemorySeries>& series,
                         const std::vector<std::string>& notes) {
  out << "memprofile report: memory records of " << series.size() << " process" << (series.size() == 1 ? "" : "es")
      << ", no heap profile (memprofile exec --backend none, or the dumps are gone)\n";
  out << "      pid   parent  records          RSS   RSS growth  program\n";
  for (const auto& s : series) {
    char line[96];
    std::snprintf(line, sizeof line, "  %7llu  %7s  %7zu  %11s  %11s  ", static_cast<unsigned long long>(s.info.pid),
                  s.info.parent ? std::to_string(s.info.parent).c_str() : "-", s.records.size(),
                  human_bytes(as_double(s.records.back().second.rss)).c_str(),
                  s.records.size() < 2 ? "-" : signed_bytes(s.rss_growth()).c_str());
    out << line << (s.info.program.empty() ? "?" : s.info.program) << "\n";
  }
  for (const auto& n : notes) out << "note: " << n << "\n";
  for (const auto& s : series) {
    if (s.records.size() < 2) {
      out << "memory of pid " << s.info.pid << ": one record; a second (memprofile snapshot, or --snapshot-every) "
          << "shows what grows\n";
      continue;
    }
    const MemoryRecord &a = s.records.front().second, &b = s.records.back().second;
    out << "memory of pid " << s.info.pid << ", first record to last (" << s.records.size() << span(s)
        << "): " << memory_change(a, b) << "\n";
    out << "  where it grew: " << memory_verdict(a, b, 0, false) << "\n";
  }
}

nlohmann::json memory_report_json(const std::vector<MemorySeries>& series, const std::vector<std::string>& notes) {
  nlohmann::json j = {{"backend", "none"}, {"processes", nlohmann::json::array()}, {"notes", notes}};
  for (const auto& s : series) {
    nlohmann::json p = {{"pid", s.info.pid}, {"parent", s.info.parent}, {"program", s.info.program},
                        {"records", nlohmann::json::array()}, {"rss_growth", s.rss_growth()}};
    // The record's own name: the key is its path, for two pods' of one name.
    for (const auto& [name, r] : s.records) p["records"].push_back(record_json(name.substr(name.find_last_of("/:") + 1), r));
    if (!s.info.origin.empty()) p["origin"] = s.info.origin;
    if (s.records.size() > 1) p["verdict"] = memory_verdict(s.records.front().second, s.records.back().second, 0, false);
    j["processes"].push_back(std::move(p));
  }
  return j;
}

Site memory_line(const std::string& name, std::vector<double> bytes) {
  Site s;
  s.frame.function = name;
  s.objects.assign(bytes.size(), 0);
  s.bytes = std::move(bytes);
  return s;
}

SiteTable memory_trend_table(const MemorySeries& s) {
  SiteTable t;
  std::vector<double> anon, shared, resident, allocated;
  bool allocator = true;
  for (const auto& [name, r] : s.records) {
    t.snapshots.push_back(name);
    t.totals.push_back(as_double(r.rss));
    anon.push_back(as_double(r.anon));
    shared.push_back(as_double(r.file + r.shmem));
    resident.push_back(as_double(r.resident));
    allocated.push_back(as_double(r.allocated));
    allocator = allocator && r.has_allocator;
  }
  t.sites.push_back(memory_line("anonymous", std::move(anon)));
  t.sites.push_back(memory_line("file-backed + shmem", std::move(shared)));
  if (allocator) {
    t.sites.push_back(memory_line("allocator resident", std::move(resident)));
    t.sites.push_back(memory_line("allocated (the heap)", std::move(allocated)));
  }
  return t;
}

}  // namespace memprofile
