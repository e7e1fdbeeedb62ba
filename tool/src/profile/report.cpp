#include "profile/report.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <set>

#include "base/error.h"
#include "base/sink.h"
#include "image/debian.h"
#include "image/file_tree.h"
#include "profile/charts.h"
#include "profile/pprof.h"
#include "profile/profiles.h"
#include "profile/symbolizer.h"
#include "source/load.h"

namespace memprofile {

namespace {

// Most processes a report analyses one by one (the table lists them all).
constexpr size_t kMaxViews = 8;

// The image's files, for symbols: a root directory as it is, or an image
// read in one pass that keeps whole only the files the profiles map and the
// debug files (nothing extracted to disk).
std::shared_ptr<FileTree> open_files(const ReportRequest& o, const std::vector<HeapSnapshot>& snaps,
                                     std::vector<std::string>& notes) {
  if (!o.rootfs.empty()) return std::make_shared<HostTree>(o.rootfs);
  std::set<std::string> mapped;
  for (const auto& s : snaps)
    for (const auto& m : s.maps) mapped.insert(m.path);
  ImageLoadOptions lo;
  lo.platform = o.platform;
  lo.source.network = o.network;
  lo.source.limits.capture = std::make_shared<Capture>([mapped = std::move(mapped)](const std::string& p) {
    return mapped.count(p) || p.rfind("/usr/lib/debug/", 0) == 0 || p.find("/.debug/") != std::string::npos;
  });
  std::vector<LoadedImage> images = load_images(o.image, lo);
  if (images.size() != 1) throw Error(o.image + ": report reads one image; pick its platform with --platform");
  for (const auto& n : images[0].notes) notes.push_back(o.image + ": " + n);
  return images[0].tree;
}

Folded fold_view(const ProcessView& v, Symbolizer& symbolizer) {
  std::vector<SiteTable> tables;
  for (const auto* m : v.members) tables.push_back(fold_sites(m->snaps, symbolizer));
  return {&v, tables.size() == 1 ? std::move(tables[0]) : merge_site_tables(tables)};
}

// RSS and the allocator's resident bytes at each of a view's snapshots, as
// two more lines of its trend, when every snapshot has its memory record.
std::vector<Site> memory_lines_of(const Folded& f, const std::map<std::string, MemoryRecord>& records) {
  std::vector<double> rss, resident;
  bool allocator = true;
  const auto& snaps = f.snaps();
  for (size_t i = 0; i < snaps.size(); ++i) {
    // A dormant tree's start (profiles.cpp, start_from_zero) has no record
    // of its own: its line starts at the first snapshot's values.
    const HeapSnapshot& s = snaps[i].trigger == "start" && i + 1 < snaps.size() ? snaps[i + 1] : snaps[i];
    const MemoryRecord* r = record_beside(records, s.file);
    if (!r) return {};
    rss.push_back(static_cast<double>(r->rss));
    resident.push_back(static_cast<double>(r->resident));
    allocator = allocator && r->has_allocator;
  }
  if (rss.size() != f.count()) return {};
  std::vector<Site> out = {memory_line("RSS", std::move(rss))};
  if (allocator) out.push_back(memory_line("allocator resident", std::move(resident)));
  return out;
}

// One output of the report: its bytes, already encoded (pprof.cpp,
// charts.cpp), the sink they go to, and what the report says of it once
// they are there.
struct Output {
  std::string bytes;
  std::unique_ptr<Sink> sink;
  std::function<std::string(const std::string& where)> said;
};

// Each output to its sink, in order, then said: the first that cannot be
// written is the error, and nothing after it is written.
void deliver(std::vector<Output>& outputs, std::vector<std::string>& notes) {
  for (auto& out : outputs) {
    out.sink->write(out.bytes);
    notes.push_back(out.said(out.sink->name()));
  }
}

// --pprof: the last snapshot of every process shown, each sample labelled
// with its pid when there are several.
Output pprof_output(const std::vector<Folded>& views, Symbolizer& symbolizer, const std::string& path) {
  std::vector<LabeledSnapshot> snaps;
  std::set<uint64_t> seen;
  for (const auto& v : views)
    for (const auto* m : v.view->members)
      if (seen.insert(m->info.pid).second) snaps.push_back({&m->snaps.back(), m->info.pid, m->info.program});
  Output out;
  try {
    out.bytes = encode_pprof(snaps, symbolizer, PprofOptions());
  } catch (const FileError&) {
    throw;
  } catch (const Error& e) {
    throw FileError(path, e.what());
  }
  out.sink = std::make_unique<FileSink>(path);
  const bool whole = whole_run(views.front().snaps().back());
  const size_t n = snaps.size();
  out.said = [whole, n](const std::string& where) {
    return "pprof profile of the last " + std::string(whole ? "snapshot" : "dump") +
           (n > 1 ? " of " + std::to_string(n) + " processes, each sample labelled with its pid," : std::string()) +
           " written to " + where + " (go tool pprof -top " + where + ")";
  };
  return out;
}

// --flamegraph: the top view's bytes in use, or its growth with --base.
Output flamegraph_output(const Folded& top, bool grown, Symbolizer& symbolizer, const std::string& path) {
  const HeapSnapshot& last = top.snaps().back();
  std::vector<FoldedStack> stacks;
  for (const auto* m : top.view->members) {
    auto more = folded_stacks(m->snaps.back(), symbolizer);
    if (grown) more = grown_stacks(folded_stacks(m->snaps.front(), symbolizer), more);
    stacks.insert(stacks.end(), more.begin(), more.end());
  }
  std::string title = grown ? "Bytes gained since " + basename_of(top.snaps().front().file) : "Bytes in use";
  std::string sub = last.backend + " " + (top.view->merged ? top.view->label : basename_of(last.file) +
                    (last.pid ? ", pid " + std::to_string(last.pid) : "")) + ": click a frame to zoom, Ctrl-F to search";
  Output out;
  out.bytes = flamegraph_svg(stacks, title, sub);
  out.sink = std::make_unique<FileSink>(path);
  std::string what = "flame graph of the " + std::string(grown ? "growth" : "bytes in use") + " of " + top.view->label;
  out.said = [what](const std::string& where) { return what + " written to " + where; };
  return out;
}

// --trend: several processes, one line per process (and all of them); one,
// its top sites, with its RSS and allocator lines where records have them.
Output trend_output(const std::vector<ProcessSeries>& processes, const Folded& top, bool one_pid,
                    const std::map<std::string, MemoryRecord>& records, const std::string& path) {
  const bool per_process = processes.size() > 1 && !one_pid;
  SiteTable by_process = per_process ? process_trend_table(processes) : SiteTable();
  const SiteTable& table = per_process ? by_process : top.table;
  std::vector<const Site*> lines;
  for (const auto& s : table.sites) lines.push_back(&s);
  std::stable_sort(lines.begin(), lines.end(), [](const Site* a, const Site* b) { return a->bytes.back() > b->bytes.back(); });
  if (lines.size() > 8) lines.resize(8);
  std::vector<Site> memory = per_process || top.view->merged ? std::vector<Site>() : memory_lines_of(top, records);
  if (!memory.empty() && lines.size() > 8 - memory.size()) lines.resize(8 - memory.size());
  for (const auto& m : memory) lines.push_back(&m);
  std::vector<std::string> labels;
  if (per_process || top.view->merged) {
    for (size_t i = 0; i < table.totals.size(); ++i)
      labels.push_back("snapshot " + std::to_string(i + 1 - table.totals.size()));
  } else {
    for (const auto& s : top.snaps())
      labels.push_back(whole_run(s) ? std::to_string(s.time_ms) + " ms" : basename_of(s.file));
  }
  std::string title = per_process ? "Bytes in use per process over their last " + std::to_string(table.totals.size()) +
                                        " snapshots: all, and the largest processes"
                                  : "Bytes in use over " + std::to_string(table.totals.size()) +
                                        " snapshots: all, and the top sites" +
                                        (memory.empty() ? "" : "; RSS and the allocator's resident beside them");
  Output out;
  out.bytes = trend_svg(table, lines, labels, title);
  out.sink = std::make_unique<FileSink>(path);
  std::string what = per_process ? "trend of the processes" : "trend of the top sites";
  out.said = [what](const std::string& where) { return what + " written to " + where; };
  return out;
}

// --pprof, --flamegraph and --trend: the outputs asked for, encoded.
std::vector<Output> pictures(const ReportRequest& o, const std::vector<ProcessSeries>& processes,
                             const std::vector<Folded>& views, Symbolizer& symbolizer,
                             const std::map<std::string, MemoryRecord>& records) {
  std::vector<Output> outputs;
  if (!o.pprof.empty()) outputs.push_back(pprof_output(views, symbolizer, o.pprof));
  if (!o.flamegraph.empty()) outputs.push_back(flamegraph_output(views.front(), !o.base.empty(), symbolizer, o.flamegraph));
  if (!o.trend.empty()) outputs.push_back(trend_output(processes, views.front(), o.pid != 0, records, o.trend));
  return outputs;
}

// Memory records alone: the processes' series; --pid picks one, --trend
// draws one process's lines (the one whose RSS grew most). Nothing is
// symbolised, so no image is needed; a heap's pictures cannot be drawn.
void make_memory_report(const ReportRequest& o, LoadedProfiles& loaded, Report& r) {
  const std::string none = o.profiles[0] + " holds memory records only, no heap profile (memprofile exec --backend none)";
  if (!o.pprof.empty() || !o.flamegraph.empty()) throw Error(none + ": --pprof and --flamegraph need a heap profile");
  if (!o.base.empty()) throw Error(none + ": --base needs a heap profile");
  r.memory_only = memory_series(loaded.memory, loaded.records);
  if (o.pid) {
    std::string pids;
    for (const auto& s : r.memory_only) pids += (pids.empty() ? "" : ", ") + std::to_string(s.info.pid);
    r.memory_only.erase(std::remove_if(r.memory_only.begin(), r.memory_only.end(),
                                       [&](const MemorySeries& s) { return s.info.pid != o.pid; }),
                        r.memory_only.end());
    if (r.memory_only.empty()) throw Error("--pid " + std::to_string(o.pid) + ": no records of it (processes: " + pids + ")");
  }
  if (o.merge) r.notes.push_back("--merge sums heap sites; memory records are shown per process");
  if (o.trend.empty()) return;
  const MemorySeries* top = &r.memory_only.front();
  for (const auto& s : r.memory_only)
    if (s.rss_growth() > top->rss_growth()) top = &s;
  SiteTable table = memory_trend_table(*top);
  std::vector<const Site*> lines;
  for (const auto& s : table.sites) lines.push_back(&s);
  std::vector<Output> outputs(1);
  outputs[0].bytes = trend_svg(table, lines, {table.snapshots.front(), table.snapshots.back()},
                               "Memory of pid " + std::to_string(top->info.pid) + " over " +
                                   std::to_string(table.totals.size()) + " records",
                               "RSS");
  outputs[0].sink = std::make_unique<FileSink>(o.trend);
  const std::string what = "trend of pid " + std::to_string(top->info.pid) + "'s memory";
  outputs[0].said = [what](const std::string& where) { return what + " written to " + where; };
  deliver(outputs, r.notes);
}

// Once per file whose sampled addresses got no name: which file, where its
// debug file was looked for, and how to get one (the image's Debian package
// for it, -dbgsym; or --debug-dir).
void say_missing_symbols(const Symbolizer& symbolizer, const FileTree& tree, const std::string& debug_dir,
                         std::vector<MissingSymbols>& out) {
  for (const auto& u : symbolizer.unnamed()) {
    std::string looked;
    for (const auto& l : u.looked_for) looked += (looked.empty() ? "" : ", ") + l;
    const std::string package = debian_package_of(tree, u.path);
    MissingSymbols m;
    m.path = u.path;
    m.full = u.path + " has no symbol for some sampled addresses (shown as " + basename_of(u.path) +
             "+0xOFFSET; a site is named by the nearest caller that has one)" +
             (u.build_id.empty() ? std::string() : ", build-id " + u.build_id) + ": no debug file " +
             (looked.empty() ? std::string("named by a build-id or .gnu_debuglink") : "at " + looked) +
             "; install its debug symbols" +
             (package.empty() ? std::string(" in the image") : " (Debian: " + package + "-dbgsym, from the debian-debug archive)") +
             (debug_dir.empty() ? ", or give report --debug-dir DIR with them" : ", or put them in --debug-dir " + debug_dir);
    m.line = basename_of(u.path) + " has no symbols here: install " +
             (package.empty() ? std::string("its debug symbols") : package + "-dbgsym") + " or use --debug-dir (--verbose says where they were looked for)";
    out.push_back(std::move(m));
  }
}

}  // namespace

std::unique_ptr<Report> make_report(const ReportRequest& o) {
  auto report = std::make_unique<Report>();
  Report& r = *report;
  LoadedProfiles loaded = load_profiles(o.profiles, o.base);
  if (loaded.processes.empty() && !loaded.memory.empty()) {
    make_memory_report(o, loaded, r);
    return report;
  }
  if (o.rootfs.empty() == o.image.empty())
    throw Error("report needs the image's files for symbols: --image IMAGE (an archive, an OCI layout, - , docker://REF "
                "or docker-daemon:NAME, as for preflight) or --rootfs DIR (its root filesystem), one of them");
  r.processes = std::move(loaded.processes);
  r.process_notes = std::move(loaded.notes);
  r.memory = std::move(loaded.memory);
  std::vector<ProcessSeries>& processes = r.processes;
  std::vector<std::string>& notes = r.notes;
  std::map<uint64_t, std::vector<std::string>>& process_notes = r.process_notes;
  for (const auto& n : process_notes[0]) notes.push_back(n);  // of no one process: the files'
  process_notes.erase(0);
  if (processes.empty()) throw Error("no snapshot in " + o.profiles[0]);
  // --base names one process: the one it was put in front of.
  uint64_t pid = o.pid;
  if (!o.base.empty() && processes.size() > 1)
    for (const auto& p : processes)
      if (p.snaps.front().file == o.base) pid = p.info.pid;
  r.choice = choose_views(processes, pid, o.merge, kMaxViews);
  for (const auto& n : r.choice.notes) notes.push_back(n);
  std::vector<HeapSnapshot> all_snaps;  // for the files to keep from the image
  for (const auto& p : processes) all_snaps.insert(all_snaps.end(), p.snaps.begin(), p.snaps.end());
  std::shared_ptr<FileTree> tree = open_files(o, all_snaps, notes);
  all_snaps.clear();
  Symbolizer symbolizer(
      open_in_tree(tree),
      o.debug_dir);
  for (const auto& v : r.choice.views) r.views.push_back(fold_view(v, symbolizer));
  say_missing_symbols(symbolizer, *tree, o.debug_dir, r.missing_symbols);
  std::vector<Output> outputs = pictures(o, processes, r.views, symbolizer, r.memory);
  deliver(outputs, notes);
  return report;
}

}  // namespace memprofile
