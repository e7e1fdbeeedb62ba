// `memprofile report`'s pipeline, from profile files to the ranked sites
// of the processes that matter: read the profiles (profiles.h), choose the
// views (processes.h), read the image's files for symbols (symbolizer.h),
// fold each view's stacks into sites (sites.h), write the pictures asked
// for (pprof.h, charts.h). Then the report is printed, as text or JSON.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "profile/memory_record.h"
#include "profile/memory_report.h"
#include "profile/processes.h"
#include "profile/sites.h"
#include "source/kinds.h"

namespace memprofile {

struct ReportRequest {
  std::vector<std::string> profiles;
  std::string base;
  std::string rootfs;
  std::string debug_dir;  // the user's debug files, after the image's (Symbolizer)
  std::string image;     // any source preflight reads
  std::string platform;  // of a multi-platform image
  std::string pprof;     // write the last snapshot here (gzipped profile.proto)
  std::string flamegraph;  // an SVG of bytes in use (growth with --base)
  std::string trend;       // an SVG of bytes in use over the snapshots
  size_t top = 10;
  bool json = false;
  uint64_t pid = 0;    // one process of several
  bool merge = false;  // the processes of one program as one
  bool verbose = false;  // the text says where each missing debug file was looked for
  // --image docker://, docker-daemon:: the network kinds of this binary (source/kinds.h).
  const std::vector<SourceKind>* network = nullptr;
};

// One view of the report, folded into sites.
struct Folded {
  const ProcessView* view;
  SiteTable table;
  // The snapshots a single process's header names (the first member's).
  const std::vector<HeapSnapshot>& snaps() const { return view->members.front()->snaps; }
  size_t count() const { return table.totals.size(); }
  bool over_time() const { return count() > 1; }
};

// A file some sampled addresses of which have no name: the one line the
// text shows where a site shown depends on it, and the whole story (the
// debug files looked for, how to get one) for --verbose and the JSON.
struct MissingSymbols {
  std::string path;
  std::string line, full;
};

struct Report {
  std::vector<ProcessSeries> processes;
  std::vector<MissingSymbols> missing_symbols;
  ViewChoice choice;          // its views point into `processes`
  std::vector<Folded> views;  // one per chosen view, pointing into `choice`
  std::vector<std::string> notes;                              // the report's
  std::map<uint64_t, std::vector<std::string>> process_notes;  // each process's
  std::map<std::string, MemoryRecord> memory;                  // beside the dumps, by dump name
  // No heap profile, memory records alone (memprofile exec --backend
  // none): `views` is empty and these are the report.
  std::vector<MemorySeries> memory_only;
  Report() = default;
  Report(const Report&) = delete;
  Report& operator=(const Report&) = delete;
};

// Reads, chooses, symbolises, folds and writes the pictures. Throws Error
// or FileError naming the file.
std::unique_ptr<Report> make_report(const ReportRequest& req);

// The report as text (a table of processes when there are several, then
// each view) or as one JSON object with the same content.
void print_report(std::ostream& out, const Report& r, const ReportRequest& req);
// The same as bytes, for a sink (base/sink.h).
std::string report_text(const Report& r, const ReportRequest& req);
nlohmann::json report_json(const Report& r, const ReportRequest& req);

}  // namespace memprofile
