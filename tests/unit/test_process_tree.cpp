// A service is a tree of processes: the pieces that read the tree, name each
// process's files and records, and fold several processes into one report.
#include <catch2/catch.hpp>

#include <ostream>
#include <streambuf>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json_text.h"
#include "base/terminal.h"
#include "profile/processes.h"
#include "runtime/proc_tree.h"
#include "support.h"
#include "runtime/launcher.h"
#include "runtime/backend.h"

using namespace memprofile;
using testing::Scratch;

namespace {

ProcessInfo process_info(uint64_t pid, uint64_t parent, const std::string& program) {
  ProcessInfo p;
  p.pid = p.key = pid;
  p.parent = parent;
  p.program = program;
  return p;
}

void fake_process(const Scratch& s, long pid, long ppid, const std::string& comm) {
  testing::make_dirs(s / std::to_string(pid));
  testing::write_file(s / (std::to_string(pid) + "/stat"),
                      std::to_string(pid) + " (" + comm + ") S " + std::to_string(ppid) + " 1 1 0 -1\n");
}

HeapSnapshot snap(uint64_t pid, uint64_t seq, double bytes) {
  HeapSnapshot h;
  h.backend = "jemalloc";
  h.pid = pid;
  h.sequence = seq;
  h.total_bytes = bytes;
  h.file = "jeprof." + std::to_string(pid) + "." + std::to_string(seq) + ".m" + std::to_string(seq) + ".heap";
  return h;
}

Site site(const std::string& function, std::vector<double> bytes) {
  Site s;
  s.frame.function = function;
  s.frame.file = "a.c";
  s.frame.line = 1;
  s.bytes = bytes;
  s.objects.assign(bytes.size(), 1);
  return s;
}

}  // namespace

TEST_CASE("process tree: descendants of a pid, parents first, from /proc") {
  Scratch s;
  fake_process(s, 1, 0, "init");
  fake_process(s, 10, 1, "nginx: master");
  fake_process(s, 11, 10, "nginx: worker (a) b)");  // a comm with parentheses and spaces
  fake_process(s, 12, 10, "nginx: worker");
  fake_process(s, 20, 11, "sh");
  fake_process(s, 30, 1, "other");
  testing::write_file(s / "self", "not a pid");
  auto table = read_process_table(s.path());
  REQUIRE(table.size() == 6);
  CHECK(table.at(11).comm == "nginx: worker (a) b)");
  CHECK(table.at(11).ppid == 10);
  CHECK(process_tree(table, 10) == std::vector<long>{10, 11, 12, 20});
  CHECK(process_tree(table, 30) == std::vector<long>{30});
  CHECK(process_tree(table, 99).empty());
  CHECK_THROWS_AS(read_process_table(s / "missing"), FileError);
}

TEST_CASE("process tree: a process gone or a zombie has ended; a live one of any state has not") {
  Scratch s;
  fake_process(s, 10, 1, "running (x) Z");  // a comm that ends like a state
  testing::make_dirs(s / "11");
  testing::write_file(s / "11/stat", "11 (worker) Z 10 1 1 0 -1\n");
  testing::make_dirs(s / "12");
  testing::write_file(s / "12/stat", "12 (stopped) T 10 1 1 0 -1\n");
  CHECK_FALSE(process_ended(10, s.path()));
  CHECK(process_ended(11, s.path()));
  CHECK_FALSE(process_ended(12, s.path()));
  CHECK(process_ended(13, s.path()));
  CHECK(read_process_table(s.path()).at(12).state == 'T');
}

TEST_CASE("process tree: each profile file's pid, and the control library's records") {
  CHECK(profile_file_pid(Backend::Jemalloc, "jeprof.812.3.m2.heap") == 812);
  CHECK(profile_file_pid(Backend::Jemalloc, "jeprof.host.812.3.f.heap") == 812);
  CHECK(profile_file_pid(Backend::Jemalloc, "jeprof.x.3.m2.heap") == -1);
  CHECK(profile_file_pid(Backend::Heaptrack, "heaptrack.77.raw") == 77);
  CHECK(profile_file_pid(Backend::Bytehound, "memory-profiling_app_1700000000_99.dat") == 99);
  CHECK(profile_file_pid(Backend::Bytehound, "bytehound_app_99.log") == 99);
  CHECK(profile_file_pid(Backend::Jemalloc, "heaptrack.77.raw") == -1);
  // --backend none: the memory record is the snapshot.
  CHECK(profile_file_pid(Backend::None, "memprofile-mem.812.3.mem.json") == 812);
  CHECK(profile_file_pid(Backend::None, "memprofile-mem.x.3.mem.json") == -1);
  CHECK(profile_file_pid(Backend::None, "memprofile-mem.mem.json") == -1);
  CHECK(is_memory_record("memprofile-mem.812.3.mem.json"));
  CHECK(is_memory_record("jeprof.812.3.m2.heap.mem.json"));
  // gperftools' heap profiler, its dumps as the control library names them.
  CHECK(profile_file_pid(Backend::Tcmalloc, "tcmalloc.812.0003.heap") == 812);
  CHECK(profile_file_pid(Backend::Tcmalloc, "tcmalloc-77_812.0003.heap") == -1);  // not renamed: no pid said
  CHECK(output_file_pid("tcmalloc.812.0003.heap") == 812);
  CHECK(is_memory_record("tcmalloc.812.0003.heap.mem.json"));
  CHECK(parse_backend("tcmalloc") == Backend::Tcmalloc);
  CHECK(backend_env(Backend::Tcmalloc, "/out", false, false).at(0).first == "HEAPPROFILE");
  CHECK_FALSE(is_memory_record("memprofile-mem.812.3.mem.json.new"));
  CHECK(parse_backend("none") == Backend::None);
  CHECK(default_preload(Backend::None).empty());
  CHECK(backend_env(Backend::None, "/out", false, false).empty());
  CHECK(forked_children_unrecorded(Backend::None).empty());
  CHECK_THAT(dormant_unsupported(Backend::None), Catch::Contains("nothing to keep dormant"));
  CHECK(is_process_record("memprofile-proc.812.json"));
  CHECK_FALSE(is_process_record("memprofile-proc..json"));
  CHECK_FALSE(is_process_record("memprofile-proc.812.json.new"));
  CHECK_FALSE(is_process_record("memprofile-proc.8x.json"));
  ProcessInfo p = parse_process_record(R"({"pid":812,"parent":811,"program":"/usr/sbin/nginx","backend":"jemalloc"})",
                                       "r.json");
  CHECK(p.pid == 812);
  CHECK(p.parent == 811);
  CHECK(p.program == "/usr/sbin/nginx");
  CHECK_THROWS_WITH(parse_process_record("[1]", "r.json"), Catch::Contains("r.json") && Catch::Contains("not a memprofile process record"));
  CHECK_THROWS_AS(parse_process_record("{\"pid\":", "r.json"), FileError);
}

TEST_CASE("process tree: --snapshot-every durations") {
  CHECK(parse_duration_ms("30s") == 30000u);
  CHECK(parse_duration_ms("90") == 90000u);
  CHECK(parse_duration_ms("5m") == 300000u);
  CHECK(parse_duration_ms("2h") == 7200000u);
  CHECK(parse_duration_ms("7d") == 7 * 86400000ull);
  CHECK_FALSE(parse_duration_ms("0s"));
  CHECK_FALSE(parse_duration_ms("8d"));
  CHECK_FALSE(parse_duration_ms("1.5s"));
  CHECK_FALSE(parse_duration_ms("s"));
  CHECK_FALSE(parse_duration_ms(""));
  CHECK_FALSE(parse_duration_ms("99999999999999999999s"));
  ExecArgs bad = parse_exec_args({"--snapshot-every", "soon", "--", "/app"});
  CHECK_THAT(bad.error, Catch::Contains("--snapshot-every soon is not a duration"));
  ExecArgs good = parse_exec_args({"--snapshot-every=1m", "--", "/app"});
  CHECK(good.error.empty());
  CHECK(good.snapshot_every_ms == 60000u);
  CHECK(forked_children_unrecorded(Backend::Jemalloc).empty());
  CHECK_THAT(forked_children_unrecorded(Backend::Heaptrack), Catch::Contains("does not record a child forked"));
}

TEST_CASE("process tree: dumps grouped by process, named by their records, the grown ones chosen") {
  std::vector<HeapSnapshot> dumps = {snap(11, 1, 300), snap(10, 0, 100), snap(11, 0, 100), snap(12, 0, 100),
                                     snap(10, 1, 100), snap(12, 1, 900)};
  std::map<uint64_t, ProcessInfo> records = {{11, process_info(11, 10, "/usr/sbin/nginx")}, {12, process_info(12, 10, "/usr/sbin/nginx")},
                                             {10, process_info(10, 0, "/usr/sbin/nginx")}};
  auto ps = group_by_process(dumps, records);
  REQUIRE(ps.size() == 3);
  CHECK(ps[1].info.pid == 11);
  CHECK(ps[1].snaps.front().sequence == 0);
  CHECK(ps[1].growth() == 200);
  CHECK(ps[1].info.parent == 10);

  ViewChoice grown = choose_views(ps, 0, false, 8);
  REQUIRE(grown.views.size() == 2);
  CHECK(grown.views[0].members[0]->info.pid == 12);  // the larger growth first
  CHECK(grown.views[1].members[0]->info.pid == 11);
  CHECK(grown.views[0].label == "pid 12 (/usr/sbin/nginx, forked from 10)");
  CHECK(choose_views(ps, 0, false, 1).views.size() == 1);

  ViewChoice one = choose_views(ps, 10, false, 8);
  REQUIRE(one.views.size() == 1);
  CHECK(one.views[0].members[0]->info.pid == 10);
  CHECK_THROWS_WITH(choose_views(ps, 99, false, 8), Catch::Contains("10, 11, 12"));

  // Two recordings of one pid (memray: a capture per start): --pid shows both.
  std::vector<ProcessSeries> twice(2);
  twice[0].info = twice[1].info = process_info(7, 0, "/usr/bin/python3");
  twice[0].snaps = {snap(7, 0, 100)};
  twice[1].snaps = {snap(7, 1, 100)};
  twice[0].snaps[0].file = "memray.7.bin";
  twice[1].snaps[0].file = "memray.7.2.bin";
  ViewChoice both = choose_views(twice, 7, false, 8);
  REQUIRE(both.views.size() == 2);
  CHECK(both.views[1].label == "pid 7 (/usr/bin/python3) [memray.7.2.bin]");
  REQUIRE(both.notes.size() == 1);
  CHECK_THAT(both.notes[0], Catch::Contains("2 recordings of that pid"));

  ViewChoice merged = choose_views(ps, 0, true, 8);
  REQUIRE(merged.views.size() == 1);
  CHECK(merged.views[0].merged);
  CHECK(merged.views[0].members.size() == 3);
  CHECK(merged.views[0].label == "/usr/sbin/nginx: 3 processes merged");

  std::vector<HeapSnapshot> flat = {snap(10, 0, 100), snap(10, 1, 100), snap(11, 0, 50)};
  auto fps = group_by_process(flat, {});
  ViewChoice none = choose_views(fps, 0, false, 8);
  REQUIRE(none.views.size() == 1);
  CHECK(none.views[0].members[0]->info.pid == 10);  // the most dumps
  CHECK_THAT(none.notes[0], Catch::Contains("no process grew"));
}

TEST_CASE("process tree: site tables merged per site, aligned at each process's last snapshot") {
  SiteTable a, b;
  a.totals = {10, 20, 30};
  a.snapshots = {"a0", "a1", "a2"};
  a.sites = {site("grow", {10, 20, 30})};
  b.totals = {5, 7};
  b.snapshots = {"b0", "b1"};
  b.sites = {site("grow", {5, 7}), site("other", {1, 1})};
  b.warnings = {"w"};
  SiteTable m = merge_site_tables({a, b});
  CHECK(m.totals == std::vector<double>{10, 25, 37});
  REQUIRE(m.sites.size() == 2);
  CHECK(m.sites[0].bytes == std::vector<double>{10, 25, 37});
  CHECK(m.sites[0].leak_suspect());
  CHECK(m.sites[1].bytes == std::vector<double>{0, 1, 1});
  CHECK(m.snapshots[1] == "a1 + b0");
  CHECK(m.warnings == std::vector<std::string>{"w"});

  std::vector<HeapSnapshot> dumps = {snap(1, 0, 10), snap(1, 1, 20), snap(2, 0, 5)};
  SiteTable t = process_trend_table(group_by_process(dumps, {}));
  REQUIRE(t.sites.size() == 2);
  CHECK(t.sites[1].bytes == std::vector<double>{0, 5});
  CHECK(t.totals == std::vector<double>{10, 25});
}

TEST_CASE("text outputs: control characters from files never reach the terminal raw") {
  CHECK(terminal_safe("main\x1b]0;owned\x07") == "main\\x1b]0;owned\\x07");
  CHECK(terminal_safe("clear\x1b[2J\x7f") == "clear\\x1b[2J\\x7f");
  CHECK(terminal_safe("naïve ünïcode\tand\n") == "naïve ünïcode\tand\n");
  CHECK(terminal_safe("csi\xc2\x9b" "2J and \xc2\xa9") == "csi\\xc2\\x9b" "2J and \xc2\xa9");
  CHECK(terminal_safe("cr\roverwritten") == "cr\\x0doverwritten");
}

// Counts the calls it gets: each is one write(2) when stdio's unbuffered
// stderr is behind it.
class CallsBuf : public std::streambuf {
 public:
  std::vector<std::string> calls;

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    calls.emplace_back(s, static_cast<size_t>(n));
    return n;
  }
  int_type overflow(int_type c) override {
    if (!traits_type::eq_int_type(c, traits_type::eof())) calls.emplace_back(1, traits_type::to_char_type(c));
    return traits_type::not_eof(c);
  }
};

TEST_CASE("text outputs: an error line reaches stderr in one write, whole") {
  CallsBuf dest;
  auto buf = escaping_buffer(&dest, true);
  std::ostream err(buf.get());
  err << "memprofile: " << "snapshot 7: " << "no \x1b socket" << "\n" << "next: ";
  REQUIRE(dest.calls.size() == 1);
  CHECK(dest.calls[0] == "memprofile: snapshot 7: no \\x1b socket\n");
  err << "two\nthree\n";  // both lines, in one call
  REQUIRE(dest.calls.size() == 2);
  CHECK(dest.calls[1] == "next: two\nthree\n");
  err << "held until a flush";
  CHECK(dest.calls.size() == 2);
  err.flush();
  REQUIRE(dest.calls.size() == 3);
  CHECK(dest.calls[2] == "held until a flush");
}
