#include "profile/processes.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json_text.h"
#include "profile/profiles.h"

namespace memprofile {

ProcessInfo parse_process_record(const std::string& text, const std::string& name) {
  if (text.size() > 64 * 1024) throw FileError(name, "larger than 64 KiB: not a memprofile process record");
  nlohmann::json j = parse_json_bounded(text, name);
  ProcessInfo p;
  if (!j.is_object() || !j.contains("pid") || !j["pid"].is_number_unsigned())
    throw FileError(name, "not a memprofile process record (no \"pid\")");
  p.pid = j["pid"].get<uint64_t>();
  if (j.contains("parent") && j["parent"].is_number_unsigned()) p.parent = j["parent"].get<uint64_t>();
  if (j.contains("program") && j["program"].is_string()) p.program = j["program"].get<std::string>();
  if (j.contains("started") && j["started"].is_number_integer()) p.started = j["started"].get<int64_t>();
  if (j.contains("backend") && j["backend"].is_string()) p.backend = j["backend"].get<std::string>();
  if (j.contains("boot") && j["boot"].is_string()) p.boot = j["boot"].get<std::string>();
  if (j.contains("start_ticks") && j["start_ticks"].is_number_unsigned()) p.start_ticks = j["start_ticks"].get<uint64_t>();
  if (j.contains("recorded") && j["recorded"].is_boolean()) p.recorded = j["recorded"].get<bool>();
  if (j.contains("dormant") && j["dormant"].is_boolean()) p.dormant = j["dormant"].get<bool>();
  if (j.contains("exit_rss_anon") && j["exit_rss_anon"].is_number_unsigned())
    p.exit_rss_anon = j["exit_rss_anon"].get<uint64_t>();
  if (j.contains("exit_allocator_in_use") && j["exit_allocator_in_use"].is_number_unsigned())
    p.exit_allocator_in_use = j["exit_allocator_in_use"].get<uint64_t>();
  p.key = p.pid;
  return p;
}

std::vector<ProcessSeries> group_by_process(std::vector<HeapSnapshot> dumps,
                                            const std::map<uint64_t, ProcessInfo>& records) {
  std::map<uint64_t, ProcessSeries> by_pid;
  for (auto& d : dumps) {
    const uint64_t key = d.process ? d.process : d.pid;
    ProcessSeries& p = by_pid[key];
    p.info.pid = d.pid;
    p.info.key = key;
    p.info.origin = d.origin;
    p.snaps.push_back(std::move(d));
  }
  std::vector<ProcessSeries> out;
  for (auto& [key, p] : by_pid) {
    std::stable_sort(p.snaps.begin(), p.snaps.end(),
                     [](const HeapSnapshot& a, const HeapSnapshot& b) { return a.sequence < b.sequence; });
    if (auto it = records.find(key); it != records.end()) {
      // The record says the rest (parent, program, start, how it was
      // recorded); who the process is stays as the dumps said.
      ProcessInfo info = it->second;
      info.pid = p.info.pid;
      info.key = p.info.key;
      info.origin = p.info.origin;
      p.info = std::move(info);
    }
    if (p.info.program.empty() && !p.snaps.front().maps.empty()) p.info.program = p.snaps.front().maps.front().path;
    out.push_back(std::move(p));
  }
  return out;
}

namespace {

std::string process_label(const ProcessInfo& p) {
  std::string s = "pid " + std::to_string(p.pid) + (p.origin.empty() ? "" : " of " + p.origin);
  std::string inner = p.program;
  if (p.parent) inner += (inner.empty() ? "" : ", ") + std::string("forked from ") + std::to_string(p.parent);
  return inner.empty() ? s : s + " (" + inner + ")";
}

}  // namespace

ViewChoice choose_views(const std::vector<ProcessSeries>& processes, uint64_t pid, bool merge, size_t most) {
  ViewChoice c;
  if (processes.empty()) return c;
  if (pid) {
    // Every recording of that pid (memray writes a capture per start): one
    // view each, named by its file when there are several.
    std::vector<const ProcessSeries*> same;
    for (const auto& p : processes)
      if (p.info.pid == pid) same.push_back(&p);
    for (const auto* p : same)
      c.views.push_back({process_label(p->info) + (same.size() > 1 && !p->snaps.empty()
                                                       ? " [" + basename_of(p->snaps.back().file) + "]"
                                                       : std::string()),
                         {p},
                         false});
    if (same.size() > 1)
      c.notes.push_back("--pid " + std::to_string(pid) + ": " + std::to_string(same.size()) +
                        " recordings of that pid (a capture per start): each shown");
    if (!same.empty()) return c;
    std::string pids;
    for (const auto& p : processes) pids += (pids.empty() ? "" : ", ") + std::to_string(p.info.pid);
    throw Error("--pid " + std::to_string(pid) + ": no dumps of that process; the profiles are of pid " + pids);
  }
  if (processes.size() == 1) {
    c.views.push_back({process_label(processes[0].info), {&processes[0]}, false});
    return c;
  }
  if (merge) {
    std::map<std::string, ProcessView> by_program;
    for (const auto& p : processes) by_program[p.info.program].members.push_back(&p);
    std::vector<std::pair<double, ProcessView>> ranked;
    for (auto& [program, v] : by_program) {
      double growth = 0;
      for (const auto* m : v.members) growth += m->growth();
      v.merged = v.members.size() > 1;
      v.label = v.merged ? (program.empty() ? "?" : program) + ": " + std::to_string(v.members.size()) +
                               " processes merged"
                         : process_label(v.members[0]->info);
      if (v.merged) {
        // Said: what was summed, each process as it is told apart.
        std::string which;
        for (const auto* m : v.members)
          which += (which.empty() ? "" : ", ") + std::to_string(m->info.pid) + (m->info.origin.empty() ? "" : " of " + m->info.origin);
        c.notes.push_back("--merge: " + (program.empty() ? std::string("?") : program) + " sums pid" +
                          (v.members.size() == 1 ? " " : "s ") + which);
      }
      ranked.emplace_back(growth, std::move(v));
    }
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (auto& r : ranked) c.views.push_back(std::move(r.second));
    c.notes.push_back("--merge: the processes of each program summed per site, aligned at each one's last snapshot");
    return c;
  }
  std::vector<const ProcessSeries*> grown;
  for (const auto& p : processes)
    if (p.growth() > 0) grown.push_back(&p);
  std::stable_sort(grown.begin(), grown.end(),
                   [](const ProcessSeries* a, const ProcessSeries* b) { return a->growth() > b->growth(); });
  if (grown.empty()) {
    // What holds the most is what a user looks for next, not what was
    // dumped the most often.
    const ProcessSeries* most = &processes[0];
    for (const auto& p : processes)
      if (p.last_bytes() > most->last_bytes()) most = &p;
    c.views.push_back({process_label(most->info), {most}, false});
    c.notes.push_back("no process grew between its first dump and its last; shown: pid " + std::to_string(most->info.pid) +
                      ", the one holding the most at its last (" + human_bytes(most->last_bytes()) +
                      "; --pid N for another)");
    return c;
  }
  if (grown.size() > most) {
    c.notes.push_back(std::to_string(grown.size() - most) + " more process(es) grew and are not shown here (--pid N, "
                      "or --merge to sum the processes of one program)");
    grown.resize(most);
  }
  for (const auto* p : grown) c.views.push_back({process_label(p->info), {p}, false});
  c.notes.push_back("shown: the " + std::to_string(c.views.size()) + " process(es) that grew, by growth (--pid N "
                    "for one, --merge to sum the processes of one program)");
  return c;
}

namespace {

// A table of n snapshots with nothing in it yet, and a site of it.
SiteTable empty_table(size_t n) {
  SiteTable t;
  t.totals.assign(n, 0);
  t.snapshots.assign(n, std::string());
  return t;
}

Site empty_site(const Frame& frame, size_t n) {
  Site s;
  s.frame = frame;
  s.bytes.assign(n, 0);
  s.objects.assign(n, 0);
  return s;
}

}  // namespace

SiteTable merge_site_tables(const std::vector<SiteTable>& tables) {
  size_t n = 0;
  for (const auto& t : tables) n = std::max(n, t.totals.size());
  SiteTable out = empty_table(n);
  std::map<std::string, size_t> index;
  std::vector<double> heaviest;
  for (const auto& t : tables) {
    const size_t off = n - t.totals.size();
    for (size_t i = 0; i < t.totals.size(); ++i) {
      out.totals[off + i] += t.totals[i];
      out.snapshots[off + i] += (out.snapshots[off + i].empty() ? "" : " + ") + t.snapshots[i];
    }
    for (const auto& s : t.sites) {
      auto [it, added] = index.emplace(site_key(s.frame), out.sites.size());
      if (added) {
        out.sites.push_back(empty_site(s.frame, n));
        heaviest.push_back(-1);
      }
      Site& m = out.sites[it->second];
      for (size_t i = 0; i < s.bytes.size(); ++i) {
        m.bytes[off + i] += s.bytes[i];
        m.objects[off + i] += s.objects[i];
      }
      if (!s.bytes.empty() && s.bytes.back() > heaviest[it->second]) {
        heaviest[it->second] = s.bytes.back();
        m.stack = s.stack;
      }
    }
    for (const auto& w : t.warnings)
      if (std::find(out.warnings.begin(), out.warnings.end(), w) == out.warnings.end()) out.warnings.push_back(w);
  }
  return out;
}

SiteTable process_trend_table(const std::vector<ProcessSeries>& processes) {
  size_t n = 0;
  for (const auto& p : processes) n = std::max(n, p.snaps.size());
  SiteTable out = empty_table(n);
  for (const auto& p : processes) {
    Frame label;
    label.function = process_label(p.info);
    Site s = empty_site(label, n);
    const size_t off = n - p.snaps.size();
    for (size_t i = 0; i < p.snaps.size(); ++i) {
      s.bytes[off + i] = p.snaps[i].total_bytes;
      s.objects[off + i] = p.snaps[i].total_objects;
      out.totals[off + i] += p.snaps[i].total_bytes;
    }
    out.sites.push_back(std::move(s));
  }
  return out;
}

}  // namespace memprofile
