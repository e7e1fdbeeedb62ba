#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

#include "profile/profiles.h"
#include "profile/report.h"
#include "runtime/backend.h"

namespace memprofile {

namespace {

// How the header names a backend's files: its row's words
// (runtime/backend.h), or plain ones for a file of no backend memprofile
// knows.
struct HeaderWords {
  std::string noun;
  BackendRow::HeaderPid pid = BackendRow::HeaderPid::Known;
  std::string kept, cut;
  bool sampled = false;
};

HeaderWords header_words(const std::string& backend) {
  for (const BackendRow& row : backend_rows())
    if (backend == row.name)
      return {row.report.noun, row.report.pid, row.report.kept, row.report.cut, row.report.sampled};
  return {backend + " profile", BackendRow::HeaderPid::Known, "", " (the file is cut short)", false};
}

bool says_pid(const HeaderWords& w, uint64_t pid) {
  return w.pid == BackendRow::HeaderPid::Always || (w.pid == BackendRow::HeaderPid::Known && pid);
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

// The frames a site's stack holds above the frame that names it: those
// without a name (sites.cpp names a site by its nearest named caller).
size_t unnamed_above(const Site& s) {
  size_t k = 0;
  while (k < s.stack.size() && s.stack[k].function.empty() && !s.frame.function.empty()) ++k;
  return k < s.stack.size() ? k : 0;
}

// A site's line: its frame, and beside it the unnamed address it stands for.
std::string site_line(const Site& s) {
  size_t above = unnamed_above(s);
  return site_label(s.frame) + (above ? "  [from " + site_label(s.stack[0]) + ", no symbol]" : std::string());
}

// A suspect's shape in words: "rose at every dump, never fell", or, with
// flat intervals, in how many of them it rose.
std::string how_it_rose(const Site& s, const std::string& moment) {
  Site::Rises r = s.rises();
  size_t intervals = s.bytes.size() - 1;
  if (r.rose == intervals) return "rose at every " + moment + ", never fell";
  return "rose in " + std::to_string(r.rose) + " of " + std::to_string(intervals) + " intervals, never fell";
}

// Where a whole-run file's snapshots were taken, when it was marked
// (memray: memprofile snapshot, --snapshot-every): "" otherwise.
std::string marks_said(const std::vector<HeapSnapshot>& snaps) {
  size_t asked = 0, scheduled = 0;
  for (const auto& s : snaps) {
    asked += s.trigger == "m";
    scheduled += s.trigger == "i";
  }
  if (!asked && !scheduled) return "";
  std::string out = " (";
  if (asked) out += std::to_string(asked) + " at memprofile snapshot";
  if (asked && scheduled) out += ", ";
  if (scheduled) out += std::to_string(scheduled) + " by --snapshot-every";
  return out + ")";
}

nlohmann::json frame_json(const Frame& f) {
  nlohmann::json j = {{"function", f.function}, {"file", f.file}, {"line", f.line}, {"module", f.module},
                      {"module_offset", f.module_offset}};
  if (f.inlined) j["inlined"] = true;
  return j;
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
      const MemoryRecord* r = record_beside(memory, s.file);
      if (!r) continue;
      if (!first) {
        first = r;
        first_bytes = s.total_bytes;
      }
      last = r;
      last_bytes = s.total_bytes;
    }
    if (!first || first == last) continue;
    out.push_back({m->info.pid, *first, *last, memory_change(*first, *last),
                   memory_verdict(*first, *last, last_bytes - first_bytes)});
  }
  return out;
}

nlohmann::json view_json(const Folded& f, const ReportRequest& o, const std::vector<std::string>& notes,
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
  for (size_t i = 0; i < f.count(); ++i) {
    j["snapshots"].push_back({{"file", f.view->merged ? table.snapshots[i] : snaps[i].file},
                              {"bytes_in_use", table.totals[i]},
                              {"sample_period", snaps[std::min(i, snaps.size() - 1)].sample_period}});
    // One process's: why (jemalloc's dump kind; 'm', 'i' at a memray
    // capture's marks; "cut"), and for a whole-run file when (ms since it
    // began; not for a --base of another file).
    if (!f.view->merged && i < snaps.size()) {
      j["snapshots"].back()["trigger"] = snaps[i].trigger;
      if (whole_run(snaps[i]) && snaps[i].file == snaps.back().file) j["snapshots"].back()["time_ms"] = snaps[i].time_ms;
    }
  }
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
    if (r.has_cgroup_split) rj["cgroup_split"] = {{"shmem", r.cgroup_shmem}, {"file", r.cgroup_file}};
    return rj;
  };
  for (const auto& m : memory_lines(f, memory))
    j["memory"].push_back({{"pid", m.pid}, {"first", record_json(m.first)}, {"last", record_json(m.last)},
                           {"verdict", m.verdict}});
  j["warnings"] = table.warnings;
  j["notes"] = notes;
  return j;
}

void print_process_table(std::ostream& out, const std::vector<ProcessSeries>& processes) {
  // A pid with two rows recorded twice (memray: a capture per start): each
  // row names its capture.
  std::map<uint64_t, int> rows;
  for (const auto& p : processes) ++rows[p.info.pid];
  out << "Processes (" << processes.size() << "), growth from each one's first dump to its last:\n";
  out << "      pid   parent  snapshots       in use       growth  program\n";
  for (const auto& p : processes) {
    char line[96];
    std::snprintf(line, sizeof line, "  %7llu  %7s  %9zu  %11s  %11s  ", static_cast<unsigned long long>(p.info.pid),
                  p.info.parent ? std::to_string(p.info.parent).c_str() : "-", p.snaps.size(),
                  human_bytes(p.last_bytes()).c_str(),
                  p.snaps.size() < 2 ? "-" : ((p.growth() >= 0 ? "+" : "") + human_bytes(p.growth())).c_str());
    out << line << p.info.program;
    if (rows[p.info.pid] > 1 && !p.snaps.empty()) out << "  (" << basename_of(p.snaps.back().file) << ")";
    out << "\n";
  }
}

void print_view(std::ostream& out, const Folded& f, const ReportRequest& o, const std::vector<std::string>& notes,
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
    out << "memprofile report: " << f.view->label << " (pids " << pids << "), " << dumps << " "
              << snaps.back().backend << " snapshots, summed per site over the last " << f.count() << "\n";
  } else if (whole_run(snaps.back())) {
    // One file of the whole run (heaptrack, bytehound, memray): its
    // backend's row says how it is named.
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f", static_cast<double>(snaps.back().time_ms) / 1000);
    const HeaderWords w = header_words(snaps.back().backend);
    out << "memprofile report: " << w.noun << " " << basename_of(snaps.back().file)
        << (says_pid(w, snaps.back().pid) ? " (pid " + std::to_string(snaps.back().pid) + ")" : "") << ", "
        << snaps.size() << " snapshot" << (snaps.size() == 1 ? "" : "s")
        << (snaps.front().file != snaps.back().file ? " (the first is --base " + basename_of(snaps.front().file) + "'s last)" : "")
        << marks_said(snaps) << " over " << secs << " s, every allocation recorded" << w.kept
        << (snaps.back().trigger == "cut" ? w.cut : "") << "\n";
  } else {
    // Dumps (jemalloc's, gperftools'): how many, of which pid, from which
    // file to which, and how they sample.
    const HeapSnapshot& last = snaps.back();
    const HeaderWords w = header_words(last.backend);
    out << "memprofile report: " << snaps.size() << " " << w.noun << (snaps.size() == 1 ? "" : "s")
        << (says_pid(w, last.pid) ? " of pid " + std::to_string(last.pid) : "") << " ("
        << basename_of(snaps.front().file) << (snaps.size() > 1 ? " … " + basename_of(last.file) : "") << "), "
        << (last.sample_period || w.sampled ? "sampled every " + human_bytes(static_cast<double>(last.sample_period))
                                            : std::string("every allocation recorded"))
        << "\n";
  }
  const char* moment = whole_run(snaps.back()) ? "snapshot" : "dump";
  out << "in use at the last " << moment << ": " << human_bytes(table.totals.back());
  if (f.over_time()) out << " (" << (table.totals.back() >= table.totals.front() ? "+" : "")
                               << human_bytes(table.totals.back() - table.totals.front()) << " since the first)";
  out << "\n";
  for (const auto& m : memory_lines(f, memory)) {
    out << "memory of pid " << m.pid << ", first snapshot to last: " << m.change << "\n";
    out << "  where it grew: " << m.verdict << "\n";
  }
  for (const auto& n : notes) out << "note: " << n << "\n";
  for (const auto& w : table.warnings) out << "warning: " << w << "\n";
  if (f.over_time()) {
    out << "\nGrowth, first " << moment << " to last (" << f.count() << " " << moment << "s), by bytes gained:\n";
    if (r.by_growth.empty()) out << "  no site grew\n";
    for (size_t i = 0; i < r.by_growth.size(); ++i) {
      const Site* s = r.by_growth[i];
      char line[64];
      std::snprintf(line, sizeof line, "%3zu  %11s  %11s  ", i + 1, ("+" + human_bytes(s->growth())).c_str(),
                    human_bytes(s->bytes.back()).c_str());
      out << line << site_line(*s) << (s->leak_suspect() ? "  LEAK SUSPECT: " + how_it_rose(*s, moment) : "") << "\n";
    }
  }
  out << "\nIn use at the last " << moment << ", by bytes:\n";
  for (size_t i = 0; i < r.by_use.size(); ++i) {
    const Site* s = r.by_use[i];
    char line[64];
    double share = table.totals.back() > 0 ? 100 * s->bytes.back() / table.totals.back() : 0;
    std::snprintf(line, sizeof line, "%3zu  %11s  %5.1f%%  ", i + 1, human_bytes(s->bytes.back()).c_str(), share);
    out << line << site_line(*s) << "\n";
    const size_t from = unnamed_above(*s) + 1;
    for (size_t k = from; k < s->stack.size() && k < from + 7; ++k)
      out << "                          " << site_label(s->stack[k]) << "\n";
  }
}

// A view's notes: the report's, then its own processes'.
std::vector<std::string> notes_of(const Report& r, const Folded& f) {
  std::vector<std::string> n = r.notes;
  for (const auto* m : f.view->members)
    if (auto it = r.process_notes.find(m->info.pid); it != r.process_notes.end())
      for (const auto& pn : it->second)
        n.push_back(f.view->members.size() > 1 ? "pid " + std::to_string(m->info.pid) + ": " + pn : pn);
  return n;
}

// The files without symbols that a site the text shows depends on: its
// site is unnamed, or named only through a caller (the frame where the
// memory was asked for has no name). A file whose unnamed addresses no
// shown site reaches is not said: every site shown has its name.
std::vector<std::string> symbol_notes_shown(const Report& r, const Folded& f, const ReportRequest& o) {
  Ranked ranked = rank(f, o.top);
  std::set<std::string> modules;
  for (const auto* list : {&ranked.by_use, &ranked.by_growth})
    for (const Site* s : *list) {
      const Frame& asked = s->stack.empty() ? s->frame : s->stack.front();
      if (asked.function.empty()) modules.insert(asked.module);
      if (s->frame.function.empty()) modules.insert(s->frame.module);
    }
  std::vector<std::string> out;
  for (const auto& m : r.missing_symbols)
    if (modules.count(m.path)) out.push_back(o.verbose ? m.full : m.line);
  return out;
}

// The JSON's: every file without symbols, the whole story.
std::vector<std::string> with_symbol_notes(std::vector<std::string> notes, const Report& r) {
  for (const auto& m : r.missing_symbols) notes.push_back(m.full);
  return notes;
}

// The text's: the ones a shown site depends on.
std::vector<std::string> with_symbol_notes(std::vector<std::string> notes, const Report& r, const Folded& f,
                                           const ReportRequest& o) {
  for (auto& line : symbol_notes_shown(r, f, o)) notes.push_back(std::move(line));
  return notes;
}

}  // namespace

nlohmann::json report_json(const Report& r, const ReportRequest& o) {
  if (r.views.empty()) return memory_report_json(r.memory_only, r.notes);
  nlohmann::json j = view_json(r.views.front(), o, with_symbol_notes(notes_of(r, r.views.front()), r), r.memory);
  if (r.processes.size() > 1) {
    j["processes"] = nlohmann::json::array();
    for (const auto& p : r.processes) j["processes"].push_back(process_json(p));
  }
  if (r.views.size() > 1) {
    j["views"] = nlohmann::json::array();
    for (const auto& f : r.views) j["views"].push_back(view_json(f, o, with_symbol_notes(notes_of(r, f), r), r.memory));
  }
  return j;
}

void print_report(std::ostream& out, const Report& r, const ReportRequest& o) {
  if (r.views.empty()) return print_memory_report(out, r.memory_only, r.notes);
  if (r.processes.size() > 1) {
    print_process_table(out, r.processes);
    out << "\n";
  }
  for (size_t i = 0; i < r.views.size(); ++i) {
    if (r.views.size() > 1) out << (i ? "\n" : "") << "== " << r.views[i].view->label << "\n";
    print_view(out, r.views[i], o, with_symbol_notes(notes_of(r, r.views[i]), r, r.views[i], o), r.memory);
  }
}

std::string report_text(const Report& r, const ReportRequest& o) {
  std::ostringstream out;
  print_report(out, r, o);
  return out.str();
}

}  // namespace memprofile
