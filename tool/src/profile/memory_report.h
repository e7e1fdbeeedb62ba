// A report of memory records alone: what `memprofile exec --backend none`
// leaves (the control library without a heap profiler), or records whose
// dumps are gone. For each process, its records over time and where its
// memory grew (the allocator, anonymous memory outside it, file-backed and
// shared memory, the cgroup): whether a heap profile is the tool at all.
// No image is needed: nothing is symbolised.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "profile/memory_record.h"
#include "profile/processes.h"
#include "profile/sites.h"

namespace memprofile {

struct MemorySeries {
  ProcessInfo info;
  std::vector<std::pair<std::string, MemoryRecord>> records;  // by name, oldest first
  double rss_growth() const;
};

// The records grouped by their process (named by its record, when there is
// one), each oldest first; ordered by pid.
std::vector<MemorySeries> memory_series(const std::map<std::string, MemoryRecord>& memory,
                                        const std::map<uint64_t, ProcessInfo>& records);

// The text report: a table of the processes, then for each that has two
// records or more, its change and where it grew.
void print_memory_report(std::ostream& out, const std::vector<MemorySeries>& series,
                         const std::vector<std::string>& notes);
nlohmann::json memory_report_json(const std::vector<MemorySeries>& series, const std::vector<std::string>& notes);

// One process's records as lines over time: RSS as the total, and its
// anonymous, file-backed + shmem, allocator-resident and allocated bytes
// (the last two when the records have the allocator's view).
SiteTable memory_trend_table(const MemorySeries& s);

// A memory line ("RSS", "allocator resident") as a trend's site.
Site memory_line(const std::string& name, std::vector<double> bytes);

}  // namespace memprofile
