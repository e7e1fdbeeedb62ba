#include "serve/tree_profile.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>

#include <map>
#include <optional>

#include "base/checked_open.h"
#include "base/error.h"
#include "base/unique_fd.h"
#include "image/file_tree.h"
#include "profile/heap_profile.h"
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

// What serve reads of one member: at most this many files (its dump, its
// memory record, its marks, its process record; a continuous backend's
// trace), each no larger than report reads.
constexpr size_t kMaxMemberFiles = 8;

// The uid of process `pid` (the owner of /proc/PID: its effective uid);
// -1 when it cannot be seen, and then only root's files are its.
long uid_of(long pid) {
  struct stat st;
  return stat(("/proc/" + std::to_string(pid)).c_str(), &st) == 0 ? static_cast<long>(st.st_uid) : -1;
}

// The member files serve reads, each opened once and judged on its
// descriptor (base/checked_open.h): a regular file, owned by the
// member's uid or root, within the size report reads, whose name carries
// the member's pid. What fails is left out with a line, never read.
struct MemberFiles {
  std::vector<CheckedFile> open;  // owns the fds `files` point at
  std::vector<OpenedProfile> files;
  std::vector<std::string> left_out;
};

// Opens `name` in `dir_fd` for member `m` (shown as `shown`), or says why not.
void open_member_file(int dir_fd, const std::string& name, const std::string& shown, const Member& m, long uid,
                      MemberFiles& out) {
  OpenRules rules;
  // -1 (its uid not seen): only root's files are taken as its.
  rules.uid = uid < 0 ? 0 : uid;
  rules.max_size = kMaxProfileFile;
  CheckedFile f = open_checked(dir_fd, name, rules);
  if (!f.fd) {
    if (f.error == ENOENT) return;  // rotated away meanwhile
    out.left_out.push_back("pid " + std::to_string(m.pid) + ": " + shown + " left out: " + f.why);
    return;
  }
  OpenedProfile p;
  p.path = shown;
  p.fd = f.fd.get();
  p.size = f.size;
  p.pid = static_cast<uint64_t>(m.pid);
  p.backend = m.reply.value("backend", std::string());
  out.open.push_back(std::move(f));
  out.files.push_back(std::move(p));
}

// The files to read for the members that gave a snapshot, not the whole
// directory (a day of dumps): the dump each answer names, with its memory
// record, its marks (memray) and the process's record; for a member whose
// answer names none (a continuous trace), the files that carry its pid.
// Only names that carry the member's own pid are opened: one member's
// answer cannot make serve read another's files.
MemberFiles member_files(const std::string& dir, const std::vector<const Member*>& ms) {
  MemberFiles out;
  UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd) throw FileError(dir, std::string("cannot open it: ") + std::strerror(errno));
  std::map<long, const Member*> continuous_members;  // by pid: read every file that carries its pid
  for (const Member* m : ms) {
    const long uid = uid_of(m->pid);
    const std::string path = m->reply.value("snapshot", std::string());
    const std::string snap = basename_only(path);
    if (continuous(m->reply) || snap.empty()) {
      continuous_members[m->pid] = m;
      continue;
    }
    std::vector<std::string> names = {snap, snap + ".mem.json", "memprofile-proc." + std::to_string(m->pid) + ".json"};
    if (auto marks = basename_only(m->reply.value("marks", std::string())); !marks.empty()) names.push_back(marks);
    // A process that became a user who cannot write the directory writes
    // in proc.PID/ (its own): its files are read there.
    const std::string sub = "proc." + std::to_string(m->pid);
    int in = dir_fd.get();
    std::string shown_dir = dir;
    UniqueFd sub_fd;
    if (path.size() > snap.size() + sub.size() &&
        path.compare(path.size() - snap.size() - sub.size() - 1, sub.size() + 1, "/" + sub) == 0) {
      OpenRules rules;
      rules.uid = uid < 0 ? 0 : uid;
      CheckedFile d = open_checked_dir(dir_fd.get(), sub, rules);
      if (!d.fd) {
        out.left_out.push_back("pid " + std::to_string(m->pid) + ": " + dir + "/" + sub + " left out: " + d.why);
        continue;
      }
      sub_fd = std::move(d.fd);
      in = sub_fd.get();
      shown_dir = dir + "/" + sub;
    }
    for (const auto& n : names) {
      if (output_file_pid(n) != m->pid || !is_loadable_name(n)) {
        if (n == snap)
          out.left_out.push_back("pid " + std::to_string(m->pid) + ": its answer names " + n +
                                 ", which is not a file of its own");
        continue;
      }
      open_member_file(in, n, shown_dir + "/" + n, *m, uid, out);
    }
  }
  if (!continuous_members.empty()) {
    // One pass over the directory, bounded by what it holds; each
    // member's files at most kMaxMemberFiles.
    std::map<long, std::vector<std::string>> names;
    UniqueFd list_fd(::openat(dir_fd.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    DIR* d = list_fd ? fdopendir(list_fd.release()) : nullptr;
    if (!d) throw FileError(dir, std::string("cannot list it: ") + std::strerror(errno));
    for (struct dirent* e; (e = readdir(d));) {
      const std::string name = e->d_name;
      auto it = continuous_members.find(output_file_pid(name));
      if (it == continuous_members.end() || !is_loadable_name(name)) continue;
      names[it->first].push_back(name);
    }
    closedir(d);
    for (auto& [pid, list] : names) {
      const Member& m = *continuous_members[pid];
      std::sort(list.begin(), list.end());
      if (list.size() > kMaxMemberFiles) {
        out.left_out.push_back("pid " + std::to_string(pid) + ": " + std::to_string(list.size() - kMaxMemberFiles) +
                               " more of its files in " + dir + " left out: serve reads at most " +
                               std::to_string(kMaxMemberFiles) + " of a process");
        list.resize(kMaxMemberFiles);
      }
      const long uid = uid_of(pid);
      for (const auto& n : list) open_member_file(dir_fd.get(), n, dir + "/" + n, m, uid, out);
    }
  }
  std::vector<size_t> order(out.files.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return out.files[a].path < out.files[b].path; });
  std::vector<OpenedProfile> sorted;
  for (size_t i : order) sorted.push_back(out.files[i]);
  out.files = std::move(sorted);
  return out;
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
  heap.loaded = std::make_unique<LoadedProfiles>();
  if (!gave.empty()) {
    MemberFiles files = member_files(t.dir, gave);
    heap.left_out.insert(heap.left_out.end(), files.left_out.begin(), files.left_out.end());
    if (!files.files.empty()) *heap.loaded = load_opened_profiles(files.files, heap.left_out);
  }
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

TreeHeap growth_between(const TreeHeap& before, const std::shared_ptr<const TreeHeap>& later) {
  TreeHeap after;
  after.from = later;
  after.left_out = later->left_out;
  after.notes = later->notes;
  after.root = later->root;
  after.time_nanos = later->time_nanos;
  std::map<uint64_t, const MemberHeap*> earlier;
  for (const auto& m : before.members) earlier[m.pid] = &m;
  std::set<uint64_t> placed;
  std::vector<MemberHeap> grown;
  for (const auto& m : later->members) {
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
