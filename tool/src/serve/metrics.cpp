#include "serve/metrics.h"

#include <cstdio>
#include <map>
#include <sstream>

#include <fstream>

#include "profile/processes.h"
#include "profile/profile_in_use.h"
#include "runtime/proc_tree.h"

namespace memprofile {

using nlohmann::json;

namespace {

// The length of the UTF-8 sequence at `s[i]`, or 0 when it is not one.
size_t utf8_length(const std::string& s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 0;
  return n;
}

// A label value as the text format quotes it; bytes that are not UTF-8 (a
// program's path may hold any) as U+FFFD, which Prometheus then accepts.
std::string label_value(const std::string& v) {
  std::string out = "\"";
  for (size_t i = 0; i < v.size();) {
    size_t n = utf8_length(v, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    const char c = v[i];
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out.append(v, i, n);
    i += n;
  }
  return out + "\"";
}

// The families in the order they are first given, each with its HELP and
// TYPE once, then its samples.
class Families {
 public:
  void add(const std::string& name, const std::string& help, const std::string& labels, double value) {
    auto [it, added] = index_.emplace(name, families_.size());
    if (added) families_.push_back({name, help, {}});
    char v[64];
    std::snprintf(v, sizeof v, "%.17g", value);
    families_[it->second].samples.push_back(name + (labels.empty() ? "" : "{" + labels + "}") + " " + v);
  }
  std::string text() const {
    std::ostringstream out;
    for (const auto& f : families_) {
      out << "# HELP " << f.name << " " << f.help << "\n# TYPE " << f.name << " gauge\n";
      for (const auto& s : f.samples) out << s << "\n";
    }
    return out.str();
  }

 private:
  struct Family {
    std::string name, help;
    std::vector<std::string> samples;
  };
  std::vector<Family> families_;
  std::map<std::string, size_t> index_;
};

// The backend a process's record names (memprofile-proc.PID.json, which
// the control library wrote when it started), for one that gives no answer
// now: its series keep their labels whatever the answer.
std::string recorded_backend(const std::string& dir, long pid) {
  const std::string path = dir + "/memprofile-proc." + std::to_string(pid) + ".json";
  std::ifstream in(path);
  if (!in) return "";
  std::string text(4096, '\0');
  in.read(&text[0], static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  try {
    return parse_process_record(text, path).backend;
  } catch (const std::exception&) {
    return "";
  }
}

void process_metrics(Families& f, const Member& m, const std::string& dir) {
  const json& r = m.reply;
  const bool served = r.is_object();
  // The labels do not depend on the answer: the program as the kernel says
  // (the answer's own when /proc cannot), the backend from the answer or
  // the process's record.
  std::string program = process_exe(m.pid);
  if (program.empty() && served) program = r.value("program", std::string());
  if (program.empty()) program = m.comm;
  std::string backend = served ? r.value("backend", std::string()) : std::string();
  if (backend.empty()) backend = recorded_backend(dir, m.pid);
  const std::string id = "pid=" + label_value(std::to_string(m.pid)) + ",program=" + label_value(program) +
                         ",backend=" + label_value(backend);
  f.add("memprofile_process_served", "1 when the process answered memprofile's control socket, 0 when not (not "
        "profiled, or not reached)", id, served && r.value("ok", false) ? 1 : 0);
  if (served)
    f.add("memprofile_process_recording", "1 while the heap profiler records in the process", id,
          r.value("recording", false) ? 1 : 0);
  const ProcessMemory& mem = m.memory;
  if (mem.known) {
    f.add("memprofile_process_resident_memory_bytes", "Resident set size of the process (/proc/PID/status VmRSS)", id,
          static_cast<double>(mem.rss));
    for (const auto& [kind, bytes] : std::map<std::string, uint64_t>{
             {"anon", mem.anon}, {"file", mem.file}, {"shmem", mem.shmem}, {"swap", mem.swap}})
      f.add("memprofile_process_memory_bytes", "The kernel's split of the process's memory: resident anonymous, file "
            "and shmem, and swapped out", id + ",kind=" + label_value(kind), static_cast<double>(bytes));
  }
  AllocatorView a = allocator_view(r);
  if (a.known) {
    f.add("memprofile_process_allocator_bytes", "The allocator's own view: bytes the application holds (allocated) "
          "and bytes the allocator keeps resident", id + ",allocator=" + label_value(a.name) + ",state=\"allocated\"",
          static_cast<double>(a.allocated));
    f.add("memprofile_process_allocator_bytes", "", id + ",allocator=" + label_value(a.name) + ",state=\"resident\"",
          static_cast<double>(a.resident));
  }
  if (m.profile.known)
    f.add("memprofile_process_profile_inuse_bytes", "Bytes in use at the process's newest heap snapshot, scaled as "
          "memprofile report scales them", id, m.profile.bytes);
  for (const auto& g : memory_gap(mem, a))
    f.add("memprofile_process_gap_bytes", "Resident memory the allocator's allocations do not explain, by cause",
          id + ",cause=" + label_value(g.cause), static_cast<double>(g.bytes));
}

}  // namespace

std::string metrics_text(const TreeAnswer& t) {
  Families f;
  for (const auto& m : t.ms) process_metrics(f, m, t.dir);
  const std::string root = "root_pid=" + label_value(std::to_string(t.ms.front().pid));
  f.add("memprofile_tree_processes", "Processes of the tree, by whether memprofile reaches them",
        root + ",state=\"served\"", static_cast<double>(t.served));
  f.add("memprofile_tree_processes", "", root + ",state=\"not_reached\"",
        static_cast<double>(t.ms.size() + t.beyond.size() - t.served));
  f.add("memprofile_tree_resident_memory_bytes", "RSS of every process of the tree, and of the profiled ones",
        root + ",processes=\"all\"", static_cast<double>(t.rss_all));
  f.add("memprofile_tree_resident_memory_bytes", "", root + ",processes=\"profiled\"", static_cast<double>(t.rss_profiled));
  if (t.cgroup.known) {
    const CgroupMemory& cg = t.cgroup;
    const std::string c = root + ",cgroup=" + label_value(cg.path);
    f.add("memprofile_cgroup_memory_bytes", "The tree's memory cgroup: its charge (what the OOM killer counts) and "
          "its split", c + ",kind=\"current\"", static_cast<double>(cg.current));
    for (const auto& [kind, bytes] : std::map<std::string, uint64_t>{
             {"anon", cg.anon}, {"file", cg.file}, {"shmem", cg.shmem}, {"kernel", cg.kernel}})
      f.add("memprofile_cgroup_memory_bytes", "", c + ",kind=" + label_value(kind), static_cast<double>(bytes));
  }
  // The budget as the first member that answered sees it: one directory.
  for (const auto& m : t.ms) {
    if (!m.reply.is_object() || !m.reply.contains("disk_bytes")) continue;
    const json& r = m.reply;
    const std::string d = root + ",output_dir=" + label_value(r.value("output_dir", std::string()));
    f.add("memprofile_profiles_disk_bytes", "Bytes of profiles in the output directory", d,
          static_cast<double>(r.value("disk_bytes", uint64_t{0})));
    f.add("memprofile_profiles_budget_bytes", "The output directory's budget for profiles (0: unlimited)", d,
          static_cast<double>(r.value("max_bytes", uint64_t{0})));
    f.add("memprofile_filesystem_free_bytes", "Free bytes on the output directory's filesystem, and the floor below "
          "which no snapshot is written", d + ",kind=\"free\"", static_cast<double>(r.value("free_bytes", uint64_t{0})));
    f.add("memprofile_filesystem_free_bytes", "", d + ",kind=\"floor\"",
          static_cast<double>(r.value("min_free_bytes", uint64_t{0})));
    break;
  }
  return f.text();
}

std::string tree_metrics(const ControlRequest& target) {
  ControlRequest o = target;
  o.action = "status";
  return metrics_text(ask_tree(o, profile_in_use));
}

}  // namespace memprofile
