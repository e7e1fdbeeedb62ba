// `memprofile report PROFILE... [--base EARLIER] (--image IMAGE | --rootfs DIR) [--top N] [--json]`:
// from heap profiles to the code that holds the memory, and to what grew.
// Reads the profiles (profile/heap_profile.h), symbolises their addresses
// with the files of the image they came from (profile/symbolizer.h), folds
// stacks into sites and ranks them (profile/sites.h).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <optional>
#include <set>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json_text.h"
#include "base/stream.h"
#include "base/unique_fd.h"
#include "cli/commands.h"
#include "image/file_tree.h"
#include "source/load.h"
#include "profile/heap_profile.h"
#include "profile/charts.h"
#include "collect/collected.h"
#include "profile/heaptrack_trace.h"
#include "profile/memory_record.h"
#include "profile/pprof.h"
#include "profile/processes.h"
#include "profile/sites.h"
#include "profile/symbolizer.h"
#include "runtime/backend.h"

namespace memprofile {

namespace {

struct ReportOptions {
  std::vector<std::string> profiles;
  std::string base;
  std::string rootfs;
  std::string image;     // any source preflight reads
  std::string platform;  // of a multi-platform image
  std::string pprof;     // write the last snapshot here (gzipped profile.proto)
  std::string flamegraph;  // an SVG of bytes in use (growth with --base)
  std::string trend;       // an SVG of bytes in use over the snapshots
  size_t top = 10;
  bool json = false;
  uint64_t pid = 0;    // one process of several
  bool merge = false;  // the processes of one program as one
};

// Most processes a report analyses one by one (the table lists them all).
constexpr size_t kMaxViews = 8;

// Most profile files one report reads (a day of dumps every minute).
constexpr size_t kMaxProfiles = 4096;

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string basename_of(const std::string& p) {
  size_t s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

// The profile files a PROFILE argument names: itself, or a directory's
// profiles (not recursive: collect writes them flat).
void gather(const std::string& arg, std::vector<std::string>& out) {
  struct stat st;
  if (stat(arg.c_str(), &st) != 0) throw FileError(arg, std::string("cannot open: ") + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) {
    out.push_back(arg);
    return;
  }
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir(arg.c_str()), closedir);
  if (!dir) throw FileError(arg, std::string("cannot list: ") + std::strerror(errno));
  std::vector<std::string> names;
  while (dirent* e = readdir(dir.get())) {
    std::string n = e->d_name;
    if (ends_with(n, ".heap") || n.rfind("heaptrack.", 0) == 0 || n.rfind("memory-profiling_", 0) == 0 ||
        ends_with(n, ".dat") || is_process_record(n) || is_memory_record(n))
      names.push_back(n);
    if (names.size() > kMaxProfiles)
      throw FileError(arg, "more than " + std::to_string(kMaxProfiles) + " profiles; name the ones to read");
  }
  if (names.empty()) throw FileError(arg, "holds no heap profile (jemalloc *.heap, heaptrack.*, bytehound *.dat)");
  std::sort(names.begin(), names.end());
  for (const auto& n : names) out.push_back(arg + "/" + n);
}

// Profiles of the backends report does not read yet: one line, the tool to use.
void refuse_other_backends(const std::string& where, const std::string& file, const std::string& head) {
  std::string name = basename_of(file);
  if (head.rfind("MEMORY_PROFILER", 0) == 0 || ends_with(name, ".dat"))
    throw FileError(where, "a bytehound profile: report does not read bytehound's format; use `bytehound server " +
                               name + "` (or bytehound's export to heaptrack)");
}

// A jemalloc dump's text, under the cap. What it is is known from its first
// bytes: anything else is refused there, before the rest is read (`yes |
// memprofile report /dev/stdin` reads 64 KiB, not 256 MiB).
std::string read_jemalloc_text(Reader& bytes, const std::string& name, const std::string& file) {
  std::string text;
  std::vector<char> buf(1 << 16);
  bool checked = false;
  for (size_t r; (r = bytes.read(buf.data(), buf.size())) > 0;) {
    text.append(buf.data(), r);
    if (!checked && text.size() >= 16) {
      checked = true;
      if (!is_jemalloc_heap(text.substr(0, 16))) break;
    }
    if (text.size() > kMaxProfileFile)
      throw FileError(name, "larger than " + std::to_string(kMaxProfileFile >> 20) + " MiB; not a heap profile memprofile reads");
  }
  if (!is_jemalloc_heap(text.substr(0, 16))) {
    refuse_other_backends(name, file, text.substr(0, 64));
    throw FileError(name, "not a heap profile memprofile reads (a jemalloc dump starts with \"heap_v2/\", a heaptrack "
                          "trace is named heaptrack.*)");
  }
  return text;
}

// One profile file, whole, under the cap (--base: a jemalloc dump).
std::string read_profile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
  FdReader in(fd.get(), path);
  return read_jemalloc_text(in, path, path);
}

// The snapshot at exit comes after the program's own teardown: containers
// freed by destructors would look like memory given back. jemalloc marks it
// (its prof_final dump, .f.heap): with other dumps to compare, it is left
// out. heaptrack's last timestamp looks the same at exit and in a trace
// copied while the process runs, so there the end is left out only when it
// holds less than half the peak (a teardown), and the report says so. A
// teardown can span a timestamp (one every 10 ms): the snapshots under half
// the peak within its last second all go.
void drop_exit_snapshot(std::vector<HeapSnapshot>& snaps, std::vector<std::string>& notes) {
  if (snaps.size() < 2) return;
  const HeapSnapshot& last = snaps.back();
  if (last.backend == "heaptrack") {
    double peak = 0;
    for (const auto& s : snaps) peak = std::max(peak, s.total_bytes);
    const uint64_t end_ms = last.time_ms;
    const double held = last.total_bytes;
    size_t dropped = 0;
    while (snaps.size() >= 2 && snaps.back().total_bytes < peak / 2 && end_ms - snaps.back().time_ms <= 1000) {
      snaps.pop_back();
      ++dropped;
    }
    if (dropped)
      notes.push_back("the trace's end is left out (" + std::to_string(dropped) +
                      (dropped == 1 ? " snapshot" : " snapshots") + "): it holds " + human_bytes(held) +
                      ", under half the peak (" + human_bytes(peak) + "), as a program tearing down does");
    return;
  }
  if (snaps.size() <= 2 || last.trigger != "f") return;
  notes.push_back("the exit dump " + basename_of(last.file) +
                  " is left out: it is taken after the program's teardown (name it alone to see it)");
  snaps.pop_back();
}

bool is_heaptrack_file(const std::string& path) {
  std::string name = basename_of(path);
  return name.rfind("heaptrack.", 0) == 0;
}

// A tar (what memprofile collect writes), by its ustar magic.
bool is_tar(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  char magic[5] = {};
  return fd && pread(fd.get(), magic, sizeof magic, 257) == 5 && std::memcmp(magic, "ustar", 5) == 0;
}

// The profiles the arguments name, read: jemalloc dumps, heaptrack traces,
// also from inside collect archives (checked against their manifests in
// the same pass).
struct Loaded {
  std::vector<HeapSnapshot> dumps;
  std::vector<std::vector<HeapSnapshot>> traces;
  std::vector<std::string> trace_names;
  std::map<uint64_t, ProcessInfo> records;  // memprofile-proc.PID.json
  StackInterner stacks;                      // every dump's, once: the run's budget
  std::map<std::string, MemoryRecord> memory;  // by dump name: NAME.mem.json beside it
};

// `name` in messages; `file` the file's own name (an archive entry's is
// after the archive's).
void load_one(const std::string& name, const std::string& file, Reader& bytes, Loaded& out) {
  if (is_memory_record(basename_of(file))) {
    std::string text;
    char buf[4096];
    for (size_t r; (r = bytes.read(buf, sizeof buf)) > 0 && text.size() <= 64 * 1024;) text.append(buf, r);
    std::string dump = basename_of(file);
    out.memory[dump.substr(0, dump.size() - std::strlen(".mem.json"))] = parse_memory_record(text, name);
    return;
  }
  if (is_process_record(basename_of(file))) {
    std::string text;
    char buf[4096];
    for (size_t r; (r = bytes.read(buf, sizeof buf)) > 0 && text.size() <= 64 * 1024;) text.append(buf, r);
    ProcessInfo p = parse_process_record(text, name);
    out.records[p.pid] = p;
    return;
  }
  if (is_heaptrack_file(file)) {
    out.traces.push_back(read_heaptrack_trace(bytes, name));
    out.trace_names.push_back(name);
    return;
  }
  out.dumps.push_back(parse_jemalloc_heap(read_jemalloc_text(bytes, name, file), name, &out.stacks));
}

void load_archive(const std::string& path, Loaded& out) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
  FdReader in(fd.get(), path);
  // A profile that does not parse is said after the manifest check: a
  // corrupt archive is the first thing to know.
  std::exception_ptr unreadable;
  CollectedArchive archive = read_collected(in, path, [&](const std::string& entry, Reader& bytes) {
    std::string base = basename_of(entry);
    if (unreadable || !(ends_with(base, ".heap") || is_heaptrack_file(base) || base.rfind("memory-profiling_", 0) == 0 ||
                        is_process_record(base) || is_memory_record(base)))
      return;
    try {
      load_one(path + ":" + entry, entry, bytes, out);
    } catch (const Error&) {
      unreadable = std::current_exception();
    }
  });
  if (!archive.problems.empty()) throw FileError(path, archive.problems.front() + " (memprofile collect --verify)");
  for (const auto& f : archive.files)
    if (!f.mismatch.empty())
      throw FileError(path, "entry '" + f.name + "': " + f.mismatch + "; the archive does not match its manifest");
  if (unreadable) std::rethrow_exception(unreadable);
}

// heaptrack.PID.raw's pid (0 when the name has none).
uint64_t trace_pid(const std::string& file) {
  std::string name = basename_of(file);
  size_t dot = name.find('.', 10);
  std::string digits = name.substr(10, dot == std::string::npos ? std::string::npos : dot - 10);
  return !digits.empty() && digits.size() <= 9 && digits.find_first_not_of("0123456789") == std::string::npos
             ? std::stoull(digits)
             : 0;
}

// The profiles the arguments name, as processes, each oldest first, its
// exit snapshot dropped (drop_exit_snapshot); notes per pid.
std::vector<ProcessSeries> load_processes(const ReportOptions& o,
                                          std::map<uint64_t, std::vector<std::string>>& process_notes,
                                          std::map<std::string, MemoryRecord>& memory) {
  std::vector<std::string> files;
  for (const auto& p : o.profiles) gather(p, files);
  if (files.size() > kMaxProfiles) throw Error("more than " + std::to_string(kMaxProfiles) + " profiles");
  Loaded loaded;
  std::vector<std::string> cut;  // dumps cut short, left out
  for (const auto& f : files) {
    if (is_tar(f)) {
      load_archive(f, loaded);
      continue;
    }
    UniqueFd fd(::open(f.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) throw FileError(f, std::string("cannot open: ") + std::strerror(errno));
    FdReader in(fd.get(), f);
    try {
      load_one(f, f, in, loaded);
    } catch (const FileError& e) {
      // Among several, a dump cut short (the disk filled, the process died
      // while it wrote) is left out and said; named alone, it is the error.
      std::string what = e.what();
      if (files.size() < 2 || what.find(": truncated: ") == std::string::npos) throw;
      cut.push_back(what);
    }
  }
  if (!cut.empty() && loaded.dumps.empty() && loaded.traces.empty()) throw Error(cut.front());
  memory = std::move(loaded.memory);
  for (const auto& c : cut) process_notes[0].push_back("left out, cut short: " + c);
  std::vector<ProcessSeries> processes;
  // heaptrack: one trace holds a whole process's run, snapshots included;
  // several traces are several processes.
  if (!loaded.traces.empty()) {
    if (!loaded.dumps.empty() || !o.base.empty())
      throw Error(loaded.trace_names[0] + ": a heaptrack trace holds the whole run; report reads traces alone (no "
                  "--base, no jemalloc dumps beside them)");
    for (size_t i = 0; i < loaded.traces.size(); ++i) {
      ProcessSeries p;
      p.info.pid = trace_pid(loaded.trace_names[i]);
      if (auto it = loaded.records.find(p.info.pid); it != loaded.records.end()) p.info = it->second;
      p.snaps = std::move(loaded.traces[i]);
      drop_exit_snapshot(p.snaps, process_notes[p.info.pid]);
      if (!p.snaps.empty()) processes.push_back(std::move(p));
    }
    return processes;
  }
  if (loaded.dumps.empty()) throw Error("no profile in " + o.profiles[0]);
  processes = group_by_process(std::move(loaded.dumps), loaded.records);
  for (auto& p : processes) drop_exit_snapshot(p.snaps, process_notes[p.info.pid]);
  if (!o.base.empty()) {
    std::string text = read_profile(o.base);
    HeapSnapshot base = parse_jemalloc_heap(text, o.base, &loaded.stacks);
    // The base belongs to its own process; one of another pid is still the
    // start of the only process there is.
    ProcessSeries* into = processes.size() == 1 ? &processes[0] : nullptr;
    for (auto& p : processes)
      if (p.info.pid == base.pid) into = &p;
    if (!into) throw Error(o.base + ": --base is a dump of pid " + std::to_string(base.pid) + ", and the profiles hold no "
                           "dumps of that process");
    into->snaps.insert(into->snaps.begin(), std::move(base));
  }
  return processes;
}

std::string short_file(const std::string& f) {
  // The last two components say enough in a table; --json has the path.
  size_t s = f.rfind('/');
  if (s == std::string::npos || s == 0) return f;
  size_t t = f.rfind('/', s - 1);
  return t == std::string::npos ? f : f.substr(t + 1);
}

std::string site_label(const Frame& f) {
  std::string s = f.function.empty() ? f.module + "+0x" + [&] {
    char b[20];
    std::snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(f.module_offset));
    return std::string(b);
  }() : f.function;
  if (!f.file.empty()) s += " (" + short_file(f.file) + (f.line ? ":" + std::to_string(f.line) : "") + ")";
  return s;  // control characters: escaped at the stream (base/terminal.h)
}

nlohmann::json frame_json(const Frame& f) {
  nlohmann::json j = {{"function", f.function}, {"file", f.file}, {"line", f.line}, {"module", f.module},
                      {"module_offset", f.module_offset}};
  if (f.inlined) j["inlined"] = true;
  return j;
}

// The image's files, for symbols: a root directory as it is, or an image
// read in one pass that keeps whole only the files the profiles map and the
// debug files (nothing extracted to disk).
std::shared_ptr<FileTree> open_files(const ReportOptions& o, const std::vector<HeapSnapshot>& snaps,
                                     std::vector<std::string>& notes) {
  if (!o.rootfs.empty()) return std::make_shared<HostTree>(o.rootfs);
  std::set<std::string> mapped;
  for (const auto& s : snaps)
    for (const auto& m : s.maps) mapped.insert(m.path);
  ImageLoadOptions lo;
  lo.platform = o.platform;
  lo.source.network = &network_sources();
  lo.source.limits.capture = std::make_shared<Capture>([mapped = std::move(mapped)](const std::string& p) {
    return mapped.count(p) || p.rfind("/usr/lib/debug/", 0) == 0 || p.find("/.debug/") != std::string::npos;
  });
  std::vector<LoadedImage> images = load_images(o.image, lo);
  if (images.size() != 1) throw Error(o.image + ": report reads one image; pick its platform with --platform");
  for (const auto& n : images[0].notes) notes.push_back(o.image + ": " + n);
  return images[0].tree;
}

// One view of the report, folded into sites.
struct Folded {
  const ProcessView* view;
  SiteTable table;
  // The snapshots a single process's header names (the first member's).
  const std::vector<HeapSnapshot>& snaps() const { return view->members.front()->snaps; }
  size_t count() const { return table.totals.size(); }
  bool over_time() const { return count() > 1; }
};

Folded fold_view(const ProcessView& v, Symbolizer& symbolizer) {
  std::vector<SiteTable> tables;
  for (const auto* m : v.members) tables.push_back(fold_sites(m->snaps, symbolizer));
  return {&v, tables.size() == 1 ? std::move(tables[0]) : merge_site_tables(tables)};
}

// --pprof, --flamegraph and --trend.
void write_pictures(const ReportOptions& o, const std::vector<ProcessSeries>& processes,
                    const std::vector<Folded>& views, Symbolizer& symbolizer, std::vector<std::string>& notes) {
  const Folded& top = views.front();
  const HeapSnapshot& last = top.snaps().back();
  if (!o.pprof.empty()) {
    std::vector<LabeledSnapshot> snaps;
    std::set<uint64_t> seen;
    for (const auto& v : views)
      for (const auto* m : v.view->members)
        if (seen.insert(m->info.pid).second) snaps.push_back({&m->snaps.back(), m->info.pid});
    write_pprof(snaps, symbolizer, o.pprof);
    notes.push_back("pprof profile of the last " + std::string(last.backend == "heaptrack" ? "snapshot" : "dump") +
                    (snaps.size() > 1 ? " of " + std::to_string(snaps.size()) + " processes, each sample labelled "
                                        "with its pid," : std::string()) +
                    " written to " + o.pprof + " (go tool pprof -top " + o.pprof + ")");
  }
  const bool grown = !o.base.empty();
  if (!o.flamegraph.empty()) {
    std::vector<FoldedStack> stacks;
    for (const auto* m : top.view->members) {
      auto more = folded_stacks(m->snaps.back(), symbolizer);
      if (grown) more = grown_stacks(folded_stacks(m->snaps.front(), symbolizer), more);
      stacks.insert(stacks.end(), more.begin(), more.end());
    }
    std::string title = grown ? "Bytes gained since " + basename_of(top.snaps().front().file) : "Bytes in use";
    std::string sub = last.backend + " " + (top.view->merged ? top.view->label : basename_of(last.file) +
                      (last.pid ? ", pid " + std::to_string(last.pid) : "")) + ": click a frame to zoom, Ctrl-F to search";
    write_whole_file(o.flamegraph, flamegraph_svg(stacks, title, sub));
    notes.push_back("flame graph of the " + std::string(grown ? "growth" : "bytes in use") + " of " + top.view->label +
                    " written to " + o.flamegraph);
  }
  if (!o.trend.empty()) {
    // Several processes: one line per process (and all of them). One: the
    // top sites.
    const bool per_process = processes.size() > 1 && !o.pid;
    SiteTable by_process = per_process ? process_trend_table(processes) : SiteTable();
    const SiteTable& table = per_process ? by_process : top.table;
    std::vector<const Site*> lines;
    for (const auto& s : table.sites) lines.push_back(&s);
    std::stable_sort(lines.begin(), lines.end(), [](const Site* a, const Site* b) { return a->bytes.back() > b->bytes.back(); });
    if (lines.size() > 8) lines.resize(8);
    std::vector<std::string> labels;
    if (per_process || top.view->merged) {
      for (size_t i = 0; i < table.totals.size(); ++i)
        labels.push_back("snapshot " + std::to_string(i + 1 - table.totals.size()));
    } else {
      for (const auto& s : top.snaps())
        labels.push_back(s.backend == "heaptrack" ? std::to_string(s.time_ms) + " ms" : basename_of(s.file));
    }
    std::string title = per_process ? "Bytes in use per process over their last " + std::to_string(table.totals.size()) +
                                          " snapshots: all, and the largest processes"
                                    : "Bytes in use over " + std::to_string(table.totals.size()) +
                                          " snapshots: all, and the top sites";
    write_whole_file(o.trend, trend_svg(table, lines, labels, title));
    notes.push_back(std::string(per_process ? "trend of the processes" : "trend of the top sites") + " written to " +
                    o.trend);
  }
}

struct Ranked {
  std::vector<const Site*> by_use, by_growth;
};

Ranked rank(const Folded& f, size_t top) {
  Ranked r;
  for (const auto& s : f.table.sites) {
    if (s.bytes.back() > 0) r.by_use.push_back(&s);
    if (s.growth() > 0) r.by_growth.push_back(&s);
  }
  std::stable_sort(r.by_use.begin(), r.by_use.end(), [](const Site* a, const Site* b) { return a->bytes.back() > b->bytes.back(); });
  std::stable_sort(r.by_growth.begin(), r.by_growth.end(), [](const Site* a, const Site* b) { return a->growth() > b->growth(); });
  if (r.by_use.size() > top) r.by_use.resize(top);
  if (r.by_growth.size() > top) r.by_growth.resize(top);
  return r;
}

nlohmann::json process_json(const ProcessSeries& p) {
  return {{"pid", p.info.pid}, {"parent", p.info.parent}, {"program", p.info.program}, {"snapshots", p.snaps.size()},
          {"bytes_in_use", p.last_bytes()}, {"growth", p.growth()}};
}

// Where each process of a view grew, from the records beside its first and
// last snapshots that have one: {pid, change, verdict}.
struct MemoryLine {
  uint64_t pid;
  MemoryRecord first, last;
  std::string change, verdict;
};
std::vector<MemoryLine> memory_lines(const Folded& f, const std::map<std::string, MemoryRecord>& memory) {
  std::vector<MemoryLine> out;
  for (const auto* m : f.view->members) {
    const MemoryRecord *first = nullptr, *last = nullptr;
    double first_bytes = 0, last_bytes = 0;
    for (const auto& s : m->snaps) {
      // A dump's own name: an archive entry's comes after "ARCHIVE:".
      std::string name = basename_of(s.file);
      if (size_t colon = name.rfind(':'); colon != std::string::npos) name = name.substr(colon + 1);
      auto it = memory.find(name);
      if (it == memory.end()) continue;
      if (!first) {
        first = &it->second;
        first_bytes = s.total_bytes;
      }
      last = &it->second;
      last_bytes = s.total_bytes;
    }
    if (!first || first == last) continue;
    out.push_back({m->info.pid, *first, *last, memory_change(*first, *last),
                   memory_verdict(*first, *last, last_bytes - first_bytes)});
  }
  return out;
}

nlohmann::json view_json(const Folded& f, const ReportOptions& o, const std::vector<std::string>& notes,
                         const std::map<std::string, MemoryRecord>& memory) {
  const auto& snaps = f.snaps();
  const SiteTable& table = f.table;
  Ranked r = rank(f, o.top);
  nlohmann::json j;
  j["backend"] = snaps.back().backend;
  j["pid"] = snaps.back().pid;
  j["view"] = f.view->label;
  j["pids"] = nlohmann::json::array();
  for (const auto* m : f.view->members) j["pids"].push_back(m->info.pid);
  j["snapshots"] = nlohmann::json::array();
  for (size_t i = 0; i < f.count(); ++i)
    j["snapshots"].push_back({{"file", f.view->merged ? table.snapshots[i] : snaps[i].file},
                              {"bytes_in_use", table.totals[i]},
                              {"sample_period", snaps[std::min(i, snaps.size() - 1)].sample_period}});
  auto site_json = [&](const Site* s) {
    nlohmann::json sj = {{"site", frame_json(s->frame)}, {"bytes_in_use", s->bytes.back()},
                         {"objects_in_use", s->objects.back()}, {"growth", s->growth()},
                         {"leak_suspect", f.over_time() && s->leak_suspect()}, {"bytes_per_snapshot", s->bytes}};
    sj["stack"] = nlohmann::json::array();
    for (const auto& fr : s->stack) sj["stack"].push_back(frame_json(fr));
    return sj;
  };
  j["in_use"] = nlohmann::json::array();
  for (const Site* s : r.by_use) j["in_use"].push_back(site_json(s));
  j["growth"] = nlohmann::json::array();
  if (f.over_time())
    for (const Site* s : r.by_growth) j["growth"].push_back(site_json(s));
  j["memory"] = nlohmann::json::array();
  auto record_json = [](const MemoryRecord& r) {
    nlohmann::json rj = {{"rss", r.rss}, {"anon", r.anon}, {"file", r.file}, {"shmem", r.shmem}, {"swap", r.swap}};
    if (r.has_allocator) rj["allocator"] = {{"name", r.allocator}, {"allocated", r.allocated}, {"resident", r.resident}};
    if (r.has_cgroup) rj["cgroup"] = r.cgroup;
    return rj;
  };
  for (const auto& m : memory_lines(f, memory))
    j["memory"].push_back({{"pid", m.pid}, {"first", record_json(m.first)}, {"last", record_json(m.last)},
                           {"verdict", m.verdict}});
  j["warnings"] = table.warnings;
  j["notes"] = notes;
  return j;
}

void print_process_table(const std::vector<ProcessSeries>& processes) {
  std::cout << "Processes (" << processes.size() << "), growth from each one's first dump to its last:\n";
  std::cout << "      pid   parent  snapshots       in use       growth  program\n";
  for (const auto& p : processes) {
    char line[96];
    std::snprintf(line, sizeof line, "  %7llu  %7s  %9zu  %11s  %11s  ", static_cast<unsigned long long>(p.info.pid),
                  p.info.parent ? std::to_string(p.info.parent).c_str() : "-", p.snaps.size(),
                  human_bytes(p.last_bytes()).c_str(),
                  p.snaps.size() < 2 ? "-" : ((p.growth() >= 0 ? "+" : "") + human_bytes(p.growth())).c_str());
    std::cout << line << p.info.program << "\n";
  }
}

void print_view(const Folded& f, const ReportOptions& o, const std::vector<std::string>& notes,
                const std::map<std::string, MemoryRecord>& memory) {
  const auto& snaps = f.snaps();
  const SiteTable& table = f.table;
  Ranked r = rank(f, o.top);
  if (f.view->merged) {
    size_t dumps = 0;
    std::string pids;
    for (const auto* m : f.view->members) {
      dumps += m->snaps.size();
      pids += (pids.empty() ? "" : ", ") + std::to_string(m->info.pid);
    }
    std::cout << "memprofile report: " << f.view->label << " (pids " << pids << "), " << dumps << " "
              << snaps.back().backend << " snapshots, summed per site over the last " << f.count() << "\n";
  } else if (snaps.back().backend == "heaptrack") {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f", static_cast<double>(snaps.back().time_ms) / 1000);
    std::cout << "memprofile report: heaptrack trace " << basename_of(snaps.back().file) << ", " << snaps.size()
              << " snapshot" << (snaps.size() == 1 ? "" : "s") << " over " << secs
              << " s, every allocation recorded" << (snaps.back().trigger == "cut" ? " (the trace is cut short)" : "")
              << "\n";
  } else {
    std::cout << "memprofile report: " << snaps.size() << " jemalloc heap dump" << (snaps.size() == 1 ? "" : "s")
              << " of pid " << snaps.back().pid << " (" << basename_of(snaps.front().file)
              << (snaps.size() > 1 ? " … " + basename_of(snaps.back().file) : "") << "), sampled every "
              << human_bytes(static_cast<double>(snaps.back().sample_period)) << "\n";
  }
  const char* moment = snaps.back().backend == "heaptrack" ? "snapshot" : "dump";
  std::cout << "in use at the last " << moment << ": " << human_bytes(table.totals.back());
  if (f.over_time()) std::cout << " (" << (table.totals.back() >= table.totals.front() ? "+" : "")
                               << human_bytes(table.totals.back() - table.totals.front()) << " since the first)";
  std::cout << "\n";
  for (const auto& m : memory_lines(f, memory)) {
    std::cout << "memory of pid " << m.pid << ", first snapshot to last: " << m.change << "\n";
    std::cout << "  where it grew: " << m.verdict << "\n";
  }
  for (const auto& n : notes) std::cout << "note: " << n << "\n";
  for (const auto& w : table.warnings) std::cout << "warning: " << w << "\n";
  if (f.over_time()) {
    std::cout << "\nGrowth, first " << moment << " to last (" << f.count() << " " << moment << "s), by bytes gained:\n";
    if (r.by_growth.empty()) std::cout << "  no site grew\n";
    for (size_t i = 0; i < r.by_growth.size(); ++i) {
      const Site* s = r.by_growth[i];
      char line[64];
      std::snprintf(line, sizeof line, "%3zu  %11s  %11s  ", i + 1, ("+" + human_bytes(s->growth())).c_str(),
                    human_bytes(s->bytes.back()).c_str());
      std::cout << line << site_label(s->frame)
                << (s->leak_suspect() ? std::string("  LEAK SUSPECT: rose at every ") + moment + ", never fell" : "") << "\n";
    }
  }
  std::cout << "\nIn use at the last " << moment << ", by bytes:\n";
  for (size_t i = 0; i < r.by_use.size(); ++i) {
    const Site* s = r.by_use[i];
    char line[64];
    double share = table.totals.back() > 0 ? 100 * s->bytes.back() / table.totals.back() : 0;
    std::snprintf(line, sizeof line, "%3zu  %11s  %5.1f%%  ", i + 1, human_bytes(s->bytes.back()).c_str(), share);
    std::cout << line << site_label(s->frame) << "\n";
    for (size_t k = 1; k < s->stack.size() && k < 8; ++k) std::cout << "                          " << site_label(s->stack[k]) << "\n";
  }
}

ExitCode run_report(const ReportOptions& o) {
  if (o.rootfs.empty() == o.image.empty())
    throw Error("report needs the image's files for symbols: --image IMAGE (an archive, an OCI layout, - , docker://REF "
                "or docker-daemon:NAME, as for preflight) or --rootfs DIR (its root filesystem), one of them");
  std::vector<std::string> notes;
  std::map<uint64_t, std::vector<std::string>> process_notes;
  std::map<std::string, MemoryRecord> memory;  // beside the dumps, by dump name
  std::vector<ProcessSeries> processes = load_processes(o, process_notes, memory);
  for (const auto& n : process_notes[0]) notes.push_back(n);  // of no one process: the files'
  process_notes.erase(0);
  if (processes.empty()) throw Error("no snapshot in " + o.profiles[0]);
  // --base names one process: the one it was put in front of.
  uint64_t pid = o.pid;
  if (!o.base.empty() && processes.size() > 1)
    for (const auto& p : processes)
      if (p.snaps.front().file == o.base) pid = p.info.pid;
  ViewChoice choice = choose_views(processes, pid, o.merge, kMaxViews);
  for (const auto& n : choice.notes) notes.push_back(n);
  std::vector<HeapSnapshot> all_snaps;  // for the files to keep from the image
  for (const auto& p : processes) all_snaps.insert(all_snaps.end(), p.snaps.begin(), p.snaps.end());
  std::shared_ptr<FileTree> tree = open_files(o, all_snaps, notes);
  all_snaps.clear();
  Symbolizer symbolizer([tree](const std::string& path) -> int {
    std::optional<Resolved> r;
    try {
      r = resolve(*tree, path);
    } catch (const Error&) {
      return -1;
    }
    if (!r || r->node.kind != FsNode::Kind::Regular) return -1;
    return tree->open_data(r->path);
  });
  std::vector<Folded> views;
  for (const auto& v : choice.views) views.push_back(fold_view(v, symbolizer));
  write_pictures(o, processes, views, symbolizer, notes);
  // A view's notes: the report's, then its own processes'.
  auto notes_of = [&](const Folded& f) {
    std::vector<std::string> n = notes;
    for (const auto* m : f.view->members)
      for (const auto& pn : process_notes[m->info.pid]) n.push_back(f.view->members.size() > 1 ? "pid " + std::to_string(m->info.pid) + ": " + pn : pn);
    return n;
  };

  if (o.json) {
    nlohmann::json j = view_json(views.front(), o, notes_of(views.front()), memory);
    if (processes.size() > 1) {
      j["processes"] = nlohmann::json::array();
      for (const auto& p : processes) j["processes"].push_back(process_json(p));
    }
    if (views.size() > 1) {
      j["views"] = nlohmann::json::array();
      for (const auto& f : views) j["views"].push_back(view_json(f, o, notes_of(f), memory));
    }
    std::cout << json_text(j) << "\n";
    return ExitCode::Ok;
  }
  if (processes.size() > 1) {
    print_process_table(processes);
    std::cout << "\n";
  }
  for (size_t i = 0; i < views.size(); ++i) {
    if (views.size() > 1) std::cout << (i ? "\n" : "") << "== " << views[i].view->label << "\n";
    print_view(views[i], o, notes_of(views[i]), memory);
  }
  return ExitCode::Ok;
}

}  // namespace

void setup_report(CLI::App& app, ExitCode& exit_code) {
  auto o = std::make_shared<ReportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "report", "From heap profiles to the code holding the memory: the largest allocation sites, and with several "
                "dumps (or --base) the sites that grew and the leak suspects");
  cmd->add_option("profiles", o->profiles, "jemalloc .heap dumps, or directories of them (memprofile collect's output)")
      ->required();
  cmd->add_option("--base", o->base, "an earlier dump to measure growth from");
  auto* image = cmd->add_option("--image", o->image, "the image the profile came from (archive, OCI layout, -, docker://REF, "
                                                      "docker-daemon:NAME): symbols come from its files");
  auto* rootfs = cmd->add_option("--rootfs", o->rootfs, "or the image's root filesystem, as a directory");
  image->excludes(rootfs);
  cmd->add_option("--platform", o->platform, "--image: the platform of a multi-platform image (os/arch[/variant])");
  cmd->add_option("--top", o->top, "sites shown per view")->capture_default_str()->check(CLI::Range(1, 10000));
  cmd->add_flag("--json", o->json, "the same content as JSON");
  cmd->add_option("--flamegraph", o->flamegraph, "also write a flame graph SVG of bytes in use (of growth, with --base)");
  cmd->add_option("--trend", o->trend, "also write an SVG of bytes in use over the snapshots for the top sites");
  cmd->add_option("--pid", o->pid, "of the profiles of several processes, this one alone")->check(CLI::PositiveNumber);
  cmd->add_flag("--merge", o->merge, "sum the processes of one program (prefork workers) into one view per program");
  cmd->add_option("--pprof", o->pprof, "also write the last snapshot as a gzipped pprof profile (go tool pprof, "
                                       "Pyroscope, Parca)");
  cmd->callback([o, &exit_code] { exit_code = run_report(*o); });
}

}  // namespace memprofile
