#include "serve/tree_profile.h"

#include <dirent.h>
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>

#include <map>
#include <optional>

#include "base/error.h"
#include "image/file_tree.h"
#include "profile/pprof.h"
#include "profile/symbolizer.h"
#include "runtime/backend.h"
#include "runtime/proc_tree.h"

namespace memprofile {

namespace {

std::string basename_only(const std::string& p) {
  size_t s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

// The series of `pid` that is this process: the one holding the snapshot
// its answer named, else the one whose record has its start (a pid reused in
// the same directory: pid 1 of a restarted container), else the only one.
const ProcessSeries* series_of(const LoadedProfiles& loaded, const Member& m, unsigned long long start_ticks) {
  std::vector<const ProcessSeries*> same_pid;
  for (const auto& p : loaded.processes)
    if (p.info.pid == static_cast<uint64_t>(m.pid) && !p.snaps.empty()) same_pid.push_back(&p);
  const std::string named = basename_only(m.reply.value("snapshot", std::string()));
  for (const auto* p : same_pid)
    for (const auto& s : p->snaps)
      if (!named.empty() && basename_only(s.file) == named) return p;
  for (const auto* p : same_pid)
    if (start_ticks && p->info.start_ticks == start_ticks) return p;
  return same_pid.size() == 1 ? same_pid.front() : nullptr;
}

// A member whose profiler writes one file of the whole run: its snapshot
// request is refused, and the file as it stands is what it has in use now.
bool continuous(const nlohmann::json& reply) {
  try {
    return writes_one_file(parse_backend(reply.value("backend", std::string())));
  } catch (const Error&) {
    return false;
  }
}

// The files to read for the members that gave a snapshot, not the whole
// directory (a day of dumps): the dump each answer names, with its memory
// record, its marks (memray) and the process's record; for a member whose
// answer names none (a continuous trace), every file that carries its pid.
std::vector<std::string> member_files(const std::string& dir, const std::vector<const Member*>& ms) {
  std::map<long, std::set<std::string>> named;  // by pid: the names its answer gave; empty: all of its files
  std::vector<std::string> files;
  for (const Member* m : ms) {
    std::set<std::string>& want = named[m->pid];
    const std::string path = m->reply.value("snapshot", std::string());
    std::string snap = basename_only(path);
    // A process that became a user who cannot write the directory writes
    // in proc.PID/ (its own): that dump, by its name there.
    const std::string sub = "proc." + std::to_string(m->pid);
    if (path.size() > snap.size() + sub.size() &&
        path.compare(path.size() - snap.size() - sub.size() - 1, sub.size() + 1, "/" + sub) == 0 && is_loadable_name(snap)) {
      files.push_back(dir + "/" + sub + "/" + snap);
      continue;
    }
    if (snap.empty() || continuous(m->reply)) continue;
    want.insert(snap);
    want.insert(snap + ".mem.json");
    want.insert("memprofile-proc." + std::to_string(m->pid) + ".json");
    if (auto marks = basename_only(m->reply.value("marks", std::string())); !marks.empty()) want.insert(marks);
  }
  DIR* d = opendir(dir.c_str());
  if (!d) throw FileError(dir, std::string("cannot list it: ") + std::strerror(errno));
  for (struct dirent* e; (e = readdir(d));) {
    const std::string name = e->d_name;
    auto it = named.find(output_file_pid(name));
    if (it == named.end() || !is_loadable_name(name)) continue;
    if (it->second.empty() || it->second.count(name)) files.push_back(dir + "/" + name);
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  return files;
}

std::string member_label(const Member& m) {
  return "pid " + std::to_string(m.pid) + (m.comm.empty() ? "" : " (" + m.comm + ")");
}

}  // namespace

TreeHeap snapshot_tree(const ControlRequest& target) {
  ControlRequest o = target;
  o.action = "snapshot";
  TreeAnswer t = ask_tree(o);
  TreeHeap heap;
  heap.time_nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count();
  std::vector<const Member*> gave;  // the members whose profile is read
  for (const auto& m : t.ms) {
    if (!m.reply.is_object()) {
      heap.left_out.push_back(member_label(m) + ": " + m.why);
    } else if (!m.reply.value("ok", false) && !continuous(m.reply)) {
      heap.left_out.push_back(member_label(m) + ": its snapshot failed: " + m.why);
    } else if (m.reply.value("backend", std::string()) == "none") {
      heap.left_out.push_back(member_label(m) + ": no heap profiler (--backend none): its memory is in /metrics");
    } else {
      gave.push_back(&m);
    }
  }
  std::vector<std::string> files = gave.empty() ? std::vector<std::string>() : member_files(t.dir, gave);
  heap.loaded = std::make_unique<LoadedProfiles>();
  if (!files.empty()) *heap.loaded = load_profiles(files, "");
  auto table = read_process_table();
  for (const Member* mp : gave) {
    const Member& m = *mp;
    auto it = table.find(m.pid);
    const unsigned long long start = it == table.end() ? 0 : it->second.start_ticks;
    const ProcessSeries* p = series_of(*heap.loaded, m, start);
    if (!p) {
      heap.left_out.push_back(member_label(m) + ": no snapshot of it in " + t.dir + " that report can read");
      continue;
    }
    if (continuous(m.reply))
      heap.notes.push_back(member_label(m) + ": " + m.reply.value("backend", std::string()) + "'s file as it stands" +
                           (m.reply.value("backend", std::string()) == "bytehound"
                                ? " (bytehound writes it about every 30 s: the last seconds are not in it yet)"
                                : ""));
    std::string program = p->info.program.empty() ? m.reply.value("program", std::string()) : p->info.program;
    heap.members.push_back({&p->snaps.back(), static_cast<uint64_t>(m.pid), start, program});
    if (!heap.root) heap.root = m.pid;
  }
  for (long pid : t.beyond)
    heap.left_out.push_back("pid " + std::to_string(pid) + ": under a process that is not profiled (its children never "
                            "carry the profiler)");
  return heap;
}

TreeHeap growth_between(const TreeHeap& before, TreeHeap after) {
  std::map<uint64_t, const MemberHeap*> earlier;
  for (const auto& m : before.members) earlier[m.pid] = &m;
  std::set<uint64_t> placed;
  std::vector<MemberHeap> grown;
  for (const auto& m : after.members) {
    placed.insert(m.pid);
    auto it = earlier.find(m.pid);
    if (it == earlier.end() || it->second->start_ticks != m.start_ticks) {
      after.left_out.push_back("pid " + std::to_string(m.pid) + ": not in the first snapshot (started since" +
                               std::string(it == earlier.end() ? "" : ", with a pid used before") + "): no growth to show");
      continue;
    }
    // Stacks are keyed by their addresses: one process's are the same
    // addresses from one snapshot to the next.
    std::map<std::vector<uint64_t>, std::pair<double, double>> was;
    for (const auto& s : it->second->snap->stacks) {
      auto& w = was[s.stack()];
      w.first += s.bytes;
      w.second += s.objects;
    }
    auto out = std::make_unique<HeapSnapshot>(*m.snap);
    out->stacks.clear();
    out->has_allocated = false;
    out->total_bytes = out->total_objects = 0;
    for (const auto& s : m.snap->stacks) {
      auto w = was.find(s.stack());
      double bytes = s.bytes - (w == was.end() ? 0 : w->second.first);
      double objects = s.objects - (w == was.end() ? 0 : w->second.second);
      if (w != was.end()) was.erase(w);  // a stack's growth counted once
      if (bytes <= 0) continue;
      StackSample g;
      g.pcs = s.stack();
      g.bytes = bytes;
      g.objects = objects > 0 ? objects : 0;
      out->total_bytes += bytes;
      out->total_objects += g.objects;
      out->stacks.push_back(std::move(g));
    }
    grown.push_back({out.get(), m.pid, m.start_ticks, m.program});
    after.made.push_back(std::move(out));
  }
  for (const auto& m : before.members)
    if (!placed.count(m.pid))
      after.left_out.push_back("pid " + std::to_string(m.pid) + ": in the first snapshot, not in the second (it ended, "
                               "or gave none): no growth to show");
  for (const auto& l : before.left_out)
    if (std::find(after.left_out.begin(), after.left_out.end(), l) == after.left_out.end())
      after.left_out.push_back("in the first snapshot: " + l);
  after.members = std::move(grown);
  after.duration_nanos = after.time_nanos - before.time_nanos;
  after.time_nanos = before.time_nanos;
  return after;
}

std::string encode_tree_heap(const TreeHeap& heap) {
  if (heap.members.empty()) {
    std::string why;
    for (const auto& l : heap.left_out) why += (why.empty() ? "" : "; ") + l;
    throw Error("no process of the tree gave a heap profile" + (why.empty() ? std::string() : ": " + why));
  }
  auto tree = std::make_shared<HostTree>("/proc/" + std::to_string(heap.root) + "/root");
  Symbolizer symbolizer(open_in_tree(tree));
  std::vector<LabeledSnapshot> snaps;
  for (const auto& m : heap.members) snaps.push_back({m.snap, m.pid, m.program});
  PprofOptions options;
  options.labels = true;
  options.time_nanos = heap.time_nanos;
  options.duration_nanos = heap.duration_nanos;
  if (heap.duration_nanos)
    options.comments.push_back("memprofile serve: the growth over " + std::to_string(heap.duration_nanos / 1000000) +
                               " ms: bytes and objects in use at the second snapshot less the first, where they grew");
  for (const auto& l : heap.left_out) options.comments.push_back("memprofile serve: not in this profile: " + l);
  for (const auto& n : heap.notes) options.comments.push_back("memprofile serve: " + n);
  return encode_pprof(snaps, symbolizer, options);
}

}  // namespace memprofile
