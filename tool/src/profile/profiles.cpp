#include "profile/profiles.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <set>

#include "base/error.h"
#include "base/memory_ceiling.h"
#include "base/stream.h"
#include "base/unique_fd.h"
#include "archive/collected.h"
#include "profile/bytehound_dat.h"
#include "profile/heap_profile.h"
#include "profile/heaptrack_trace.h"
#include "profile/memray_capture.h"
#include "runtime/backend.h"

namespace memprofile {

namespace {

// Most profile files one report reads (a day of dumps every minute).
constexpr size_t kMaxProfiles = 4096;

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A NAME.bin in a directory is read when it starts as a memray capture
// does (memray's magic, or an LZ4 frame): other programs write .bin files.
bool starts_like_memray(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  char head[7] = {};
  if (!fd || pread(fd.get(), head, sizeof head, 0) < 4) return false;
  return std::memcmp(head, "memray", 7) == 0 || std::memcmp(head, "\x04\x22\x4d\x18", 4) == 0;
}

// A process's own subdirectory, proc.PID: where a process that became a
// user who cannot write the output directory writes its files (the control
// library made it, ctl.h).
bool is_process_subdir(const std::string& name) {
  return name.size() > 5 && name.size() <= 15 && name.compare(0, 5, "proc.") == 0 &&
         name.find_first_not_of("0123456789", 5) == std::string::npos;
}

// A heap dump's text (jemalloc's, gperftools'), under the cap. What it is is known from its first
// bytes: anything else is refused there, before the rest is read (`yes |
// memprofile report /dev/stdin` reads 64 KiB, not 256 MiB).
std::string read_dump_text(Reader& bytes, const std::string& name) {
  std::string text;
  std::vector<char> buf(1 << 16);
  bool checked = false;
  MemoryCheck memory(name, 16);  // every MiB read
  for (size_t r; (r = bytes.read(buf.data(), buf.size())) > 0;) {
    memory();
    text.append(buf.data(), r);
    if (!checked && text.size() >= 16) {
      checked = true;
      if (!is_heap_dump(text.substr(0, 16))) break;
    }
    if (text.size() > kMaxProfileFile)
      throw FileError(name, "larger than " + std::to_string(kMaxProfileFile >> 20) + " MiB; not a heap profile memprofile reads");
  }
  if (!is_heap_dump(text.substr(0, 16))) {
    throw FileError(name, "not a heap profile memprofile reads (a jemalloc dump starts with \"heap_v2/\", gperftools' "
                          "with \"heap profile: \", a heaptrack "
                          "trace is named heaptrack.*, a bytehound profile *.dat, a memray capture *.bin)");
  }
  return text;
}


// The snapshot at exit comes after the program's own teardown: containers
// freed by destructors would look like memory given back. jemalloc marks it
// (its prof_final dump, .f.heap): with other dumps to compare, it is left
// out. heaptrack's last timestamp looks the same at exit and in a trace
// copied while the process runs, so there the end is left out only when it
// holds less than half the peak (a teardown), and the report says so. A
// teardown can span a timestamp (one every 10 ms; a busy machine may stop
// the program in the middle of its destructors): every snapshot of the
// descent that ends there, within the file's last second, goes with it,
// whether or not it is under half the peak yet.
void drop_exit_snapshot(std::vector<HeapSnapshot>& snaps, std::vector<std::string>& notes) {
  if (snaps.size() < 2) return;
  const HeapSnapshot& last = snaps.back();
  if (whole_run(last)) {
    double peak = 0;
    for (const auto& s : snaps) peak = std::max(peak, s.total_bytes);
    const uint64_t end_ms = last.time_ms;
    const double held = last.total_bytes;
    if (held >= peak / 2) return;  // no teardown: a copy of a running process, or a program that ends full
    size_t dropped = 0;
    // A snapshot someone asked for (a memray capture's mark) is kept: only
    // the spans that end where the file does can be the teardown.
    auto marked = [](const HeapSnapshot& s) { return s.trigger == "m" || s.trigger == "i"; };
    auto in_teardown = [&](size_t i) {
      return snaps[i].total_bytes < peak / 2 || snaps[i].total_bytes < snaps[i - 1].total_bytes;
    };
    while (snaps.size() >= 2 && !marked(snaps.back()) && end_ms - snaps.back().time_ms <= 1000 &&
           in_teardown(snaps.size() - 1)) {
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

// heaptrack.PID.raw's pid (0 when the name has none).
uint64_t trace_pid(const std::string& file) {
  std::string name = basename_of(file);
  if (name.size() <= 10) return 0;
  size_t dot = name.find('.', 10);
  std::string digits = name.substr(10, dot == std::string::npos ? std::string::npos : dot - 10);
  return !digits.empty() && digits.size() <= 9 && digits.find_first_not_of("0123456789") == std::string::npos
             ? std::stoull(digits)
             : 0;
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
  std::string input;  // the input being read (a directory, an archive): what tells two pods' pid 1 apart
  std::vector<HeapSnapshot> dumps;
  std::vector<std::vector<HeapSnapshot>> traces;
  std::vector<std::string> trace_names;
  std::vector<uint64_t> trace_pids;  // heaptrack's in its name, bytehound's and memray's in their headers
  std::vector<ProcessInfo> record_list;  // memprofile-proc.PID.json, each with its input as origin
  std::map<uint64_t, ProcessInfo> records;  // the same by process key (assign_process_keys)
  StackInterner stacks;                      // every dump's, once: the run's budget
  std::map<std::string, MemoryRecord> memory;  // by dump path: NAME.mem.json beside it
  std::map<std::string, std::vector<MemrayMark>> marks;  // by the capture's name, as load_one gets it
  std::set<std::string> captures;  // the memray captures read, by that name
  std::vector<std::string> notes;  // for the report's header
};

bool memray_magic(const std::string& head) {
  return (head.size() >= 7 && std::memcmp(head.data(), "memray", 7) == 0) ||
         (head.size() >= 4 && std::memcmp(head.data(), "\x04\x22\x4d\x18", 4) == 0);
}

// The trace just read: its name, its process's pid, and the input it came
// from on each of its snapshots.
void took_trace(Loaded& out, const std::string& name, uint64_t pid) {
  out.trace_names.push_back(name);
  out.trace_pids.push_back(pid);
  for (auto& s : out.traces.back()) s.origin = out.input;
}

void load_memray_capture(const std::string& name, Reader& bytes, Loaded& out) {
  auto marks = out.marks.find(name);
  out.traces.push_back(read_memray_capture(bytes, name, marks == out.marks.end() ? std::vector<MemrayMark>{} : marks->second));
  took_trace(out, name, out.traces.back().empty() ? 0 : out.traces.back().front().pid);
  out.captures.insert(name);
}

// A small file's text, at most `cap` bytes and one more (which the parser
// then refuses).
std::string read_small(Reader& bytes, size_t cap) {
  std::string text;
  char buf[4096];
  for (size_t r; text.size() <= cap && (r = bytes.read(buf, sizeof buf)) > 0;) text.append(buf, r);
  return text;
}

// Whether a record's content names the pid its file name carries; when
// not, it is left out with a note: a record is read only as the process its
// name says (one process cannot rename, or grow, another).
bool named_as(const std::string& name, const std::string& file, uint64_t pid, Loaded& out) {
  long named = output_file_pid(basename_of(file));
  if (named == static_cast<long>(pid)) return true;
  out.notes.push_back("left out: " + name + " holds pid " + std::to_string(pid) + ", its name pid " +
                      std::to_string(named) + ": a record is read only as the process its name says");
  return false;
}

// How each kind of file report reads is loaded. `name` in messages; `file`
// the file's own name (an archive entry's is after the archive's).
void load_marks(const std::string& name, const std::string& file, Reader& bytes, Loaded& out) {
  // memray's own default name for `memray run -m marks` is a capture
  // named so: what the file holds says which it is.
  std::string head(8, '\0');
  size_t got = 0;
  for (size_t r; got < head.size() && (r = bytes.read(&head[got], head.size() - got)) > 0;) got += r;
  head.resize(got);
  PrefixedReader whole(head, bytes);
  if (memray_magic(head)) return load_memray_capture(name, whole, out);
  // Kept for the capture it marks, which sorts after it (in a directory
  // and in what collect writes).
  const std::string base = basename_of(file);
  const std::string capture = name.substr(0, name.size() - base.size()) + "memray." + base.substr(std::strlen("memray-marks."));
  if (out.captures.count(capture)) {
    out.notes.push_back(name + " comes after its capture: its marks are not used (collect writes them first)");
    return;
  }
  out.marks[capture] = parse_memray_marks(read_small(whole, kMaxMemrayMarksFile), name);
}

void load_memory_record(const std::string& name, const std::string& file, Reader& bytes, Loaded& out) {
  MemoryRecord r = parse_memory_record(read_small(bytes, 64 * 1024), name);
  if (!named_as(name, file, r.pid, out)) return;
  r.origin = out.input;
  out.memory[name.substr(0, name.size() - std::strlen(".mem.json"))] = r;
}

void load_process_record(const std::string& name, const std::string& file, Reader& bytes, Loaded& out) {
  ProcessInfo p = parse_process_record(read_small(bytes, 64 * 1024), name);
  if (!named_as(name, file, p.pid, out)) return;
  p.origin = out.input;
  out.record_list.push_back(p);
}

void load_heaptrack(const std::string& name, const std::string&, Reader& bytes, Loaded& out) {
  out.traces.push_back(read_heaptrack_trace(bytes, name));
  took_trace(out, name, trace_pid(name));
}

void load_bytehound(const std::string& name, const std::string&, Reader& bytes, Loaded& out) {
  out.traces.push_back(read_bytehound_dat(bytes, name));
  took_trace(out, name, out.traces.back().empty() ? 0 : out.traces.back().front().pid);
}

void load_memray(const std::string& name, const std::string&, Reader& bytes, Loaded& out) {
  load_memray_capture(name, bytes, out);
}

void load_dump(const std::string& name, const std::string&, Reader& bytes, Loaded& out) {
  out.dumps.push_back(parse_heap_dump(read_dump_text(bytes, name), name, &out.stacks));
  out.dumps.back().origin = out.input;
}

bool is_heap_dump_name(const std::string& n) { return ends_with(n, ".heap"); }
bool is_heaptrack_name(const std::string& n) { return n.rfind("heaptrack.", 0) == 0; }

// One kind of file report reads, as one row: its files by name, whether it
// is looked for in a process's own subdirectory (proc.PID) too, whether a
// directory's file of that name is read only when it starts as one
// (memray's .bin: other programs write .bin files), how it loads, and, for
// a file that holds a whole run, its reader (--base takes its last
// snapshot). The first row whose name matches loads a file; a file no row
// names is read as a heap dump, which refuses anything else by its first
// bytes. The profilers' rows are runtime/backend.h's.
struct Format {
  bool (*named)(const std::string& base);
  bool in_subdirs;
  bool by_content;
  void (*load)(const std::string& name, const std::string& file, Reader&, Loaded&);
  std::vector<HeapSnapshot> (*read_run)(Reader&, const std::string& name);
};
const Format kFormats[] = {
    // memray's marks come first: memray's own default name for `memray run -m marks` is a capture's.
    {is_memray_marks, true, false, load_marks,
     [](Reader& in, const std::string& name) { return read_memray_capture(in, name); }},
    {is_memory_record, true, false, load_memory_record, nullptr},
    {is_process_record, true, false, load_process_record, nullptr},
    {is_heaptrack_name, true, false, load_heaptrack,
     [](Reader& in, const std::string& name) { return read_heaptrack_trace(in, name); }},
    {is_bytehound_name, true, false, load_bytehound,
     [](Reader& in, const std::string& name) { return read_bytehound_dat(in, name); }},
    {is_memray_name, false, true, load_memray,
     [](Reader& in, const std::string& name) { return read_memray_capture(in, name); }},
    {is_heap_dump_name, true, false, load_dump, nullptr},
};

const Format* format_of(const std::string& base) {
  for (const Format& f : kFormats)
    if (f.named(base)) return &f;
  return nullptr;
}

void load_one(const std::string& name, const std::string& file, Reader& bytes, Loaded& out) {
  const Format* f = format_of(basename_of(file));
  (f ? f->load : load_dump)(name, file, bytes, out);
}

// The profile files a PROFILE argument names: itself, or a directory's
// profiles, with those of its processes' own subdirectories (proc.PID, one
// level: collect keeps them so). `input_of` gets each file's input: the
// directory named, or a file's own directory (an archive is an input of
// its own, set as it is read).
void gather(const std::string& arg, std::vector<std::string>& out, std::map<std::string, std::string>& input_of) {
  struct stat st;
  if (stat(arg.c_str(), &st) != 0) throw FileError(arg, std::string("cannot open: ") + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) {
    out.push_back(arg);
    input_of.emplace(arg, arg.find('/') == std::string::npos ? "." : arg.substr(0, arg.rfind('/') + 1));
    return;
  }
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir(arg.c_str()), closedir);
  if (!dir) throw FileError(arg, std::string("cannot list: ") + std::strerror(errno));
  std::vector<std::string> names, subdirs;
  while (dirent* e = readdir(dir.get())) {
    std::string n = e->d_name;
    // Only regular files (through a link too): a fifo or a device under a
    // profile's name would block the read for ever.
    struct stat entry;
    if (is_process_subdir(n) && fstatat(dirfd(dir.get()), e->d_name, &entry, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISDIR(entry.st_mode)) {
      if (subdirs.size() < kMaxProfiles) subdirs.push_back(n);
      continue;
    }
    if (fstatat(dirfd(dir.get()), e->d_name, &entry, 0) != 0 || !S_ISREG(entry.st_mode)) continue;
    // An empty capture is memray's too (created, not yet written): read,
    // it is left out with a note.
    if (const Format* f = format_of(n);
        f && (!f->by_content || entry.st_size == 0 || starts_like_memray(arg + "/" + n)))
      names.push_back(n);
    if (names.size() > kMaxProfiles)
      throw FileError(arg, "more than " + std::to_string(kMaxProfiles) + " profiles; name the ones to read");
  }
  for (const auto& sub : subdirs) {
    std::unique_ptr<DIR, int (*)(DIR*)> d(opendir((arg + "/" + sub).c_str()), closedir);
    while (dirent* e = d ? readdir(d.get()) : nullptr) {
      std::string n = e->d_name;
      struct stat entry;
      if (fstatat(dirfd(d.get()), e->d_name, &entry, 0) != 0 || !S_ISREG(entry.st_mode)) continue;
      if (const Format* f = format_of(n); f && f->in_subdirs) names.push_back(sub + "/" + n);
      if (names.size() > kMaxProfiles)
        throw FileError(arg, "more than " + std::to_string(kMaxProfiles) + " profiles; name the ones to read");
    }
  }
  if (names.empty()) throw FileError(arg, "holds no heap profile (jemalloc *.heap, heaptrack.*, bytehound *.dat, memray *.bin) and no memory record "
                             "(*.mem.json)");
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    out.push_back(arg + "/" + n);
    input_of.emplace(out.back(), arg);
  }
}

// --base: the state growth is measured from. A jemalloc dump is one moment;
// a heaptrack trace or a bytehound profile (of an earlier run, or a copy
// taken while the process ran, cut short as such copies are) gives its last
// snapshot, its teardown left out as for the profiles.
HeapSnapshot read_base(const std::string& path, StackInterner& stacks, std::vector<std::string>& notes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
  FdReader in(fd.get(), path);
  std::string name = basename_of(path);
  const Format* f = format_of(name);
  if (!f || !f->read_run) return parse_heap_dump(read_dump_text(in, path), path, &stacks);
  std::vector<HeapSnapshot> snaps = f->read_run(in, path);
  if (snaps.empty()) throw FileError(path, "--base holds no snapshot to measure growth from");
  drop_exit_snapshot(snaps, notes);
  if (snaps.back().backend == "heaptrack") snaps.back().pid = trace_pid(path);  // in its name, as for the profiles
  return std::move(snaps.back());
}

void load_archive(const std::string& path, Loaded& out) {
  out.input = path;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
  FdReader in(fd.get(), path);
  // A profile that does not parse is said after the manifest check: a
  // corrupt archive is the first thing to know.
  // (An entry collect cut, zero-filled, is known only from the manifest
  // at the end: its error is then no error of the archive.)
  std::vector<std::pair<std::string, std::exception_ptr>> unreadable;
  CollectedArchive archive = read_collected(in, path, [&](const std::string& entry, Reader& bytes) {
    std::string base = basename_of(entry);
    if (unreadable.size() > 64 || !format_of(base)) return;
    try {
      load_one(path + ":" + entry, entry, bytes, out);
    } catch (const Error&) {
      unreadable.emplace_back(entry, std::current_exception());
    }
  });
  if (!archive.problems.empty()) throw FileError(path, archive.problems.front() + " (memprofile collect --verify)");
  unreadable.erase(std::remove_if(unreadable.begin(), unreadable.end(),
                                  [&](const auto& u) {
                                    return std::find(archive.cut.begin(), archive.cut.end(), u.first) != archive.cut.end();
                                  }),
                   unreadable.end());
  for (const auto& f : archive.files)
    if (!f.mismatch.empty())
      throw FileError(path, "entry '" + f.name + "': " + f.mismatch + "; the archive does not match its manifest");
  if (!unreadable.empty()) std::rethrow_exception(unreadable.front().second);
}

// A memray capture named alone still has its marks beside it: read them
// first, unless its directory's listing already did.
void load_sibling_marks(const std::string& path, Loaded& out) {
  const std::string base = basename_of(path);
  if (!is_memray_name(base) || is_memray_marks(base) || out.marks.count(path)) return;
  std::string marks = memray_marks_name(base);
  if (marks.empty()) return;
  marks = path.substr(0, path.size() - base.size()) + marks;
  UniqueFd fd(::open(marks.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  struct stat st;
  if (!fd || fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return;  // none: the spans double as the run goes on
  if (starts_like_memray(marks)) return;  // a capture of its own (memray's name for `memray run -m marks`)
  FdReader in(fd.get(), marks);
  load_one(marks, marks, in, out);
}

// Drops the files named more than once (a directory and a file in it, a
// file twice, a link to it): each is one process's profile, read once, or
// its growth would count twice. What was dropped, for a note.
std::vector<std::string> drop_repeated(std::vector<std::string>& files) {
  std::set<std::pair<dev_t, ino_t>> seen;
  std::vector<std::string> kept, repeated;
  for (auto& f : files) {
    struct stat st;
    if (stat(f.c_str(), &st) == 0 && S_ISREG(st.st_mode) && !seen.insert({st.st_dev, st.st_ino}).second) {
      repeated.push_back(f + " (named more than once)");
      continue;
    }
    kept.push_back(std::move(f));
  }
  files = std::move(kept);
  return repeated;
}

// The tree's processes that the records name and no profile read covers (a
// worker that has not dumped yet, one whose dump was cut or empty, a child
// its profiler does not record): said, so that the table of processes is
// not taken for the whole tree.
void note_unprofiled(const std::map<uint64_t, ProcessInfo>& records, const std::vector<ProcessSeries>& processes,
                     std::vector<std::string>& notes) {
  std::set<uint64_t> covered;
  for (const auto& p : processes) covered.insert(p.info.key ? p.info.key : p.info.pid);
  for (const auto& [key, info] : records) {
    if (covered.count(key)) continue;
    if (!info.recorded) {
      // Its profiler never recorded it: the report cannot see its heap.
      std::string why;
      try {
        why = forked_children_unrecorded(parse_backend(info.backend));
      } catch (const Error&) {
      }
      notes.push_back("pid " + std::to_string(info.pid) + (info.origin.empty() ? "" : " of " + info.origin) + " (" +
                      (info.program.empty() ? "program unknown" : info.program) +
                      (info.parent ? ", forked from " + std::to_string(info.parent) : "") +
                      ") is a process of the tree this report cannot see: not recorded (" +
                      (why.empty() ? "its profiler does not record a child forked without exec" : why) +
                      "); jemalloc records forked children");
      continue;
    }
    notes.push_back("pid " + std::to_string(info.pid) + (info.origin.empty() ? "" : " of " + info.origin) + " (" +
                    (info.program.empty() ? "program unknown" : info.program) +
                    (info.parent ? ", forked from " + std::to_string(info.parent) : "") +
                    ") is a process of the tree (its record is here) with no snapshot in the profiles read: none "
                    "written yet, cut short, or a child its profiler does not record");
  }
}

// A profile that holds far less than the process did: most of its memory
// never went through the malloc the profiler saw (an allocator of its own,
// pymalloc without PYTHONMALLOC=malloc, a managed runtime's heap). Judged
// where the record says what the process held at exit: its anonymous
// resident memory at least 32 MiB, and both the profile at its largest and
// the allocator's own count under a quarter of it. Said in one line, with
// the likely causes, so an empty profile is not read as "no growth".
void note_heap_outside_profile(const std::vector<ProcessSeries>& processes, std::vector<std::string>& notes) {
  constexpr uint64_t kFloor = 32ull << 20;
  for (const auto& p : processes) {
    const uint64_t anon = p.info.exit_rss_anon;
    if (anon < kFloor || p.info.exit_allocator_in_use >= anon / 4) continue;
    double largest = 0;
    for (const auto& s : p.snaps) largest = std::max(largest, s.total_bytes);
    if (largest >= static_cast<double>(anon) / 4) continue;
    notes.push_back("pid " + std::to_string(p.info.pid) + (p.info.origin.empty() ? "" : " of " + p.info.origin) + " (" +
                    (p.info.program.empty() ? "program unknown" : p.info.program) + ") held " + human_bytes(anon) +
                    " of anonymous memory at exit, but its profile holds at most " + human_bytes(largest) +
                    " and its allocator counted " + human_bytes(p.info.exit_allocator_in_use) +
                    ": most of its memory is outside the malloc the profiler sees (an allocator of its own, "
                    "pymalloc without PYTHONMALLOC=malloc, or a managed runtime's heap): memprofile check "
                    "--preload LIB PROGRAM says which");
  }
}

// Why a directory with process records has no profile: each process its
// profiler was to record, and the likely cause.
std::string why_no_profile(const std::map<uint64_t, ProcessInfo>& records) {
  std::string why;
  size_t said = 0;
  for (const auto& [key, info] : records) {
    if (!info.recorded || info.backend.empty() || info.backend == "none") continue;
    if (++said > 4) continue;
    why += std::string(said == 1 ? ": " : "; ") + "pid " + std::to_string(info.pid) + " (" +
           (info.program.empty() ? "program unknown" : info.program) + ") ran under " + info.backend +
           ", which wrote nothing for it";
  }
  if (!said) return "";
  if (said > 4) why += "; and " + std::to_string(said - 4) + " more";
  return why + ". Likely cause: the program's heap does not go through the malloc the profiler interposes (an "
               "allocator linked into it, or calls to an allocator's own entry points): memprofile check "
               "--preload LIB PROGRAM says which";
}

// A dormant tree records from memprofile start: what a process's first
// dump holds was allocated since then, and is growth like any other (a
// backend that allocated 252 MiB between start and its first snapshot, and
// nothing after, grew by 252 MiB). Its dumps begin with an empty snapshot
// at start, and a note says so.
void start_from_zero(std::vector<ProcessSeries>& processes, std::vector<std::string>& notes) {
  std::string pids;
  for (auto& p : processes) {
    if (!p.info.dormant || p.snaps.empty() || whole_run(p.snaps.front())) continue;
    const HeapSnapshot& first = p.snaps.front();
    HeapSnapshot start;
    start.file = "memprofile start";
    start.backend = first.backend;
    start.pid = first.pid;
    start.process = first.process;
    start.origin = first.origin;
    start.trigger = "start";
    start.sample_period = first.sample_period;
    start.call_sites = first.call_sites;
    start.has_allocated = first.has_allocated;
    p.snaps.insert(p.snaps.begin(), std::move(start));
    pids += (pids.empty() ? "" : ", ") + std::to_string(p.info.pid);
  }
  if (!pids.empty())
    notes.push_back("recorded from memprofile start (started dormant): what each process holds at its first snapshot "
                    "was allocated since start, and counts as growth from zero (pid" +
                    std::string(pids.find(',') == std::string::npos ? " " : "s ") + pids + ")");
}

// Which process each profile and record is of. A pid alone does not say:
// two pods' directories or archives each hold a pid 1. So a process is its
// input and its pid, or, where a record gives its start time, its pid and
// that time (two archives of one pod, collected at two times, are one
// process). A pid that names one process keeps the pid as its key, and
// nothing changes; one that names several gives each a key of its own and
// its input as `origin`, so that every line says which it is.
void assign_process_keys(Loaded& loaded) {
  // A record's start: its time, and where it says them its boot and ticks
  // (a second is not fine enough for two replicas started together).
  std::map<std::pair<std::string, uint64_t>, std::string> started;
  for (const auto& r : loaded.record_list)
    if (r.started)
      started[{r.origin, r.pid}] = std::to_string(r.started) +
                                   (r.boot.empty() ? "" : " " + r.boot + " " + std::to_string(r.start_ticks));
  std::map<uint64_t, std::vector<std::string>> identities;  // by pid, in the order met
  auto identity = [&](const std::string& input, uint64_t pid) {
    auto it = started.find({input, pid});
    std::string id = it != started.end() ? "started " + it->second : "input " + input;
    auto& ids = identities[pid];
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    return id;
  };
  for (const auto& d : loaded.dumps) identity(d.origin, d.pid);
  for (size_t i = 0; i < loaded.traces.size(); ++i)
    if (!loaded.traces[i].empty()) identity(loaded.traces[i].front().origin, loaded.trace_pids[i]);
  for (const auto& r : loaded.record_list) identity(r.origin, r.pid);
  for (const auto& [name, m] : loaded.memory) identity(m.origin, m.pid);
  // The key and the origin shown of (input, pid).
  auto place = [&](std::string& origin, uint64_t pid, uint64_t& key) {
    const auto& ids = identities[pid];
    if (ids.size() < 2) {
      key = pid;
      origin.clear();
      return;
    }
    const std::string id = identity(origin, pid);
    key = pid + (static_cast<uint64_t>(std::find(ids.begin(), ids.end(), id) - ids.begin() + 1) << 32);
  };
  for (auto& d : loaded.dumps) place(d.origin, d.pid, d.process);
  for (size_t i = 0; i < loaded.traces.size(); ++i)
    for (auto& s : loaded.traces[i]) {
      uint64_t key = 0;
      place(s.origin, loaded.trace_pids[i], key);
      s.process = key;
    }
  for (auto& [name, m] : loaded.memory) place(m.origin, m.pid, m.process);
  for (auto r : loaded.record_list) {
    place(r.origin, r.pid, r.key);
    loaded.records[r.key] = r;
  }
  for (const auto& [pid, ids] : identities)
    if (ids.size() > 1)
      loaded.notes.push_back("pid " + std::to_string(pid) + " is " + std::to_string(ids.size()) +
                             " processes here, one in each input (another pod's, or another start): each told apart "
                             "by the input it was read from");
}

// The files the arguments name, read (each by its kind, kFormats): the
// dumps cut short and the files named twice are said, not read.
void read_named(const std::vector<std::string>& args, Loaded& loaded, std::vector<std::string>& cut,
                std::vector<std::string>& repeated) {
  std::vector<std::string> files;
  std::map<std::string, std::string> input_of;
  for (const auto& p : args) gather(p, files, input_of);
  if (files.size() > kMaxProfiles) throw Error("more than " + std::to_string(kMaxProfiles) + " profiles");
  repeated = drop_repeated(files);
  for (const auto& f : files) {
    if (is_tar(f)) {
      load_archive(f, loaded);
      continue;
    }
    loaded.input = input_of[f];
    load_sibling_marks(f, loaded);
    UniqueFd fd(::open(f.c_str(), O_RDONLY | O_CLOEXEC));
    // A file a directory listed, gone by the time it is opened: the disk
    // budget removed it, or the profiler replaced it, while the tree runs.
    // Among several, left out and said, as a dump cut short.
    if (!fd && errno == ENOENT && files.size() > 1 && std::find(args.begin(), args.end(), f) == args.end()) {
      cut.push_back(f + ": removed after the directory was listed (the disk budget, or the profiler's own rotation)");
      continue;
    }
    if (!fd) throw FileError(f, std::string("cannot open: ") + std::strerror(errno));
    struct stat st;
    if (files.size() > 1 && fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0) {
      // Created and not written yet (a dump or capture being written as
      // the report ran): among several, left out like one cut short.
      cut.push_back(f + ": empty");
      continue;
    }
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
}

// Why what one opened file added to `loaded` is not the process its name
// says, or not of the profiler it runs under ("" when it agrees); what it
// added is taken back then. Records carry their pid (named_as checks it).
std::string disagrees(Loaded& loaded, size_t dumps, size_t traces, const OpenedProfile& f) {
  std::string why;
  for (size_t i = dumps; i < loaded.dumps.size() && why.empty(); ++i) {
    const HeapSnapshot& d = loaded.dumps[i];
    if (d.pid != f.pid) why = "its name says pid " + std::to_string(d.pid) + ", not " + std::to_string(f.pid);
    else if (!f.backend.empty() && d.backend != f.backend) why = "it holds a " + d.backend + " profile, and the process runs under " + f.backend;
  }
  for (size_t i = traces; i < loaded.traces.size() && why.empty(); ++i) {
    if (loaded.trace_pids[i] != f.pid)
      why = "it holds pid " + std::to_string(loaded.trace_pids[i]) + "'s profile, not pid " + std::to_string(f.pid) + "'s";
    else if (!f.backend.empty() && !loaded.traces[i].empty() && loaded.traces[i].front().backend != f.backend)
      why = "it holds a " + loaded.traces[i].front().backend + " profile, and the process runs under " + f.backend;
  }
  if (!why.empty()) {
    loaded.dumps.resize(dumps);
    loaded.traces.resize(traces);
    loaded.trace_names.resize(traces);
    loaded.trace_pids.resize(traces);
  }
  return why;
}

// Files opened and checked by the caller, read from their descriptors.
void read_opened(const std::vector<OpenedProfile>& files, Loaded& loaded, std::vector<std::string>& left_out) {
  if (files.size() > kMaxProfiles) throw Error("more than " + std::to_string(kMaxProfiles) + " profiles");
  for (const auto& f : files) {
    loaded.input = f.path.find('/') == std::string::npos ? "." : f.path.substr(0, f.path.rfind('/'));
    const size_t dumps = loaded.dumps.size(), traces = loaded.traces.size(), notes = loaded.notes.size();
    // What fstat gave when it was opened, at most: a file that grows (a
    // trace still written) is read as it stood.
    FdReader in(f.fd, f.path, 0, f.size);
    std::string why;
    try {
      load_one(f.path, f.path, in, loaded);
      why = disagrees(loaded, dumps, traces, f);
    } catch (const Error& e) {
      why = e.what();
    }
    // A record whose content names another pid is dropped by named_as,
    // with a note: here that is the line that leaves it out.
    if (why.empty() && loaded.notes.size() > notes && loaded.notes.back().rfind("left out: ", 0) == 0) {
      why = loaded.notes.back().substr(std::strlen("left out: "));
      loaded.notes.pop_back();
    }
    if (!why.empty()) left_out.push_back("pid " + std::to_string(f.pid) + ": " + f.path + " left out: " + why);
  }
}

// What was read, as processes, each oldest first, its exit snapshot
// dropped (drop_exit_snapshot); notes per pid. `what`: the inputs, for the
// message when nothing was.
std::vector<ProcessSeries> assemble(Loaded& loaded, const std::vector<std::string>& cut,
                                    const std::vector<std::string>& repeated, const std::string& base_dump,
                                    const std::string& what,
                                    std::map<uint64_t, std::vector<std::string>>& process_notes,
                                    std::map<std::string, MemoryRecord>& memory,
                                    std::map<uint64_t, ProcessInfo>& records) {
  if (!cut.empty() && loaded.dumps.empty() && loaded.traces.empty()) throw Error(cut.front());
  assign_process_keys(loaded);
  memory = std::move(loaded.memory);
  records = loaded.records;
  for (const auto& c : cut) process_notes[0].push_back("left out, cut short: " + c);
  for (const auto& r : repeated) process_notes[0].push_back("read once: " + r);
  for (const auto& n : loaded.notes) process_notes[0].push_back(n);
  std::vector<ProcessSeries> processes;
  // heaptrack: one trace holds a whole process's run, snapshots included;
  // several traces are several processes.
  std::optional<HeapSnapshot> base;
  if (!base_dump.empty()) base = read_base(base_dump, loaded.stacks, process_notes[0]);
  if (base && (!loaded.dumps.empty() || !loaded.traces.empty())) {
    const std::string& kind = !loaded.traces.empty() && !loaded.traces[0].empty() ? loaded.traces[0].front().backend
                              : !loaded.dumps.empty()                              ? loaded.dumps[0].backend
                                                                                   : base->backend;
    if (kind != base->backend)
      throw Error(base_dump + ": --base is a " + base->backend + " profile and the profiles are " + kind +
                  "'s; growth is measured between profiles of one profiler");
  }
  // Puts the base before its own process's first snapshot; one of another
  // pid is still the start of the only process there is.
  auto put_base = [&](std::vector<ProcessSeries>& processes) {
    ProcessSeries* into = processes.size() == 1 ? &processes[0] : nullptr;
    for (auto& p : processes)
      if (p.info.pid == base->pid) into = &p;
    if (!into) throw Error(base_dump + ": --base is a profile of pid " + std::to_string(base->pid) + ", and the profiles hold no "
                           "snapshot of that process");
    into->snaps.insert(into->snaps.begin(), std::move(*base));
  };
  if (!loaded.traces.empty()) {
    if (!loaded.dumps.empty())
      throw Error(loaded.trace_names[0] + ": a heaptrack trace, a bytehound profile or a memray capture holds the whole run; report reads "
                  "them alone (no jemalloc dumps beside them)");
    for (size_t i = 0; i < loaded.traces.size(); ++i) {
      ProcessSeries p;
      // heaptrack's pid is in its file name, bytehound's and memray's in their headers.
      p.info.pid = loaded.trace_pids[i];
      p.info.key = loaded.traces[i].empty() ? p.info.pid : loaded.traces[i].front().process;
      if (!loaded.traces[i].empty()) p.info.origin = loaded.traces[i].front().origin;
      if (auto it = loaded.records.find(p.info.key); it != loaded.records.end()) p.info = it->second;
      p.snaps = std::move(loaded.traces[i]);
      drop_exit_snapshot(p.snaps, process_notes[p.info.pid]);
      if (!p.snaps.empty()) processes.push_back(std::move(p));
    }
    if (base) put_base(processes);
    note_unprofiled(loaded.records, processes, process_notes[0]);
    note_heap_outside_profile(processes, process_notes[0]);
    return processes;
  }
  if (loaded.dumps.empty() && !base && !memory.empty()) return processes;  // memory records alone
  if (loaded.dumps.empty()) throw Error("no profile in " + what + why_no_profile(loaded.records));
  processes = group_by_process(std::move(loaded.dumps), loaded.records);
  for (auto& p : processes) drop_exit_snapshot(p.snaps, process_notes[p.info.pid]);
  if (base)
    put_base(processes);
  else
    start_from_zero(processes, process_notes[0]);
  note_unprofiled(loaded.records, processes, process_notes[0]);
  note_heap_outside_profile(processes, process_notes[0]);
  return processes;
}


}  // namespace

std::string basename_of(const std::string& p) {
  size_t s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

bool is_loadable_name(const std::string& n) { return format_of(n) != nullptr; }

LoadedProfiles load_profiles(const std::vector<std::string>& args, const std::string& base) {
  LoadedProfiles out;
  Loaded loaded;
  std::vector<std::string> cut, repeated;
  read_named(args, loaded, cut, repeated);
  out.processes = assemble(loaded, cut, repeated, base, args.empty() ? "" : args[0], out.notes, out.memory, out.records);
  return out;
}

LoadedProfiles load_opened_profiles(const std::vector<OpenedProfile>& files, std::vector<std::string>& left_out) {
  LoadedProfiles out;
  Loaded loaded;
  read_opened(files, loaded, left_out);
  if (loaded.dumps.empty() && loaded.traces.empty()) return out;  // each file's why is in left_out
  out.processes = assemble(loaded, {}, {}, "", "the files read", out.notes, out.memory, out.records);
  return out;
}

}  // namespace memprofile
