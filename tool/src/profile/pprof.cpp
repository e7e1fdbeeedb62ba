#include "profile/pprof.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <tuple>

#include "base/error.h"
#include "base/memory_ceiling.h"
#include "base/stream.h"
#include "profile.pb.h"
#include "profile/sites.h"

namespace memprofile {

namespace {

// A value as pprof's int64 holds it: rounded, and saturating at INT64_MAX
// (a count past 2^63 would otherwise come out negative in go tool pprof).
int64_t pprof_value(double v) {
  if (!(v > 0)) return 0;
  if (v >= 9.2233720368547748e18) return INT64_MAX;
  return std::llround(v);
}


namespace pb = perftools::profiles;

// The string table: index 0 is "", each string once.
class Strings {
 public:
  explicit Strings(pb::Profile& p) : p_(p) { id(""); }
  int64_t id(const std::string& s) {
    auto [it, added] = ids_.emplace(s, static_cast<int64_t>(ids_.size()));
    if (added) p_.add_string_table(s);
    return it->second;
  }

 private:
  pb::Profile& p_;
  std::map<std::string, int64_t> ids_;
};

std::string gzip(const std::string& data, const std::string& what) {
  z_stream z{};
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw FileError(what, "cannot start gzip");
  std::string out(deflateBound(&z, data.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw FileError(what, "gzip failed");
  return out;
}

}  // namespace

void write_pprof(const HeapSnapshot& snap, Symbolizer& symbolizer, const std::string& path) {
  write_pprof(std::vector<LabeledSnapshot>{{&snap, 0, ""}}, symbolizer, path);
}

namespace {

// One profile.proto built from the snapshots, one member per part: the
// header (sample types, period, comments), the mappings, and each sample
// with its locations and functions, each written once.
class PprofBuilder {
 public:
  PprofBuilder(const std::vector<LabeledSnapshot>& snaps, Symbolizer& symbolizer, const PprofOptions& options)
      : snaps_(snaps), symbolizer_(symbolizer), options_(options), str_(p_) {}

  const pb::Profile& build() {
    header();
    for (const auto& ls : snaps_) sorted_per_snap_.push_back(add_mappings(*ls.snap));
    pid_key_ = snaps_.size() > 1 || options_.labels ? str_.id("pid") : 0;
    if (options_.labels) {
      program_key_ = str_.id("program");
      backend_key_ = str_.id("backend");
    }
    // The profile grows with every sample: the process's memory is looked
    // at as it does (base/memory_ceiling.h).
    for (size_t si = 0; si < snaps_.size(); ++si) {
      MemoryCheck memory(snaps_[si].snap->file);
      for (const auto& sample : snaps_[si].snap->stacks) {
        memory();
        add_sample(si, sample);
      }
    }
    return p_;
  }

 private:
  void value_type(pb::ValueType* v, const char* type, const char* unit) {
    v->set_type(str_.id(type));
    v->set_unit(str_.id(unit));
  }

  void header() {
    const HeapSnapshot& first = *snaps_.front().snap;
    if (first.has_allocated) {
      value_type(p_.add_sample_type(), "alloc_objects", "count");
      value_type(p_.add_sample_type(), "alloc_space", "bytes");
    }
    value_type(p_.add_sample_type(), "inuse_objects", "count");
    value_type(p_.add_sample_type(), "inuse_space", "bytes");
    p_.set_default_sample_type(str_.id("inuse_space"));
    value_type(p_.mutable_period_type(), "space", "bytes");
    p_.set_period(static_cast<int64_t>(first.sample_period));
    for (const auto& ls : snaps_) p_.add_comment(str_.id("memprofile report: " + ls.snap->backend + " " + ls.snap->file));
    for (const auto& c : options_.comments) p_.add_comment(str_.id(c));
    if (options_.time_nanos) p_.set_time_nanos(options_.time_nanos);
    if (options_.duration_nanos) p_.set_duration_nanos(options_.duration_nanos);
  }

  // Processes forked from one another share their mappings: each is written once.
  void add_mapping(const Mapping* m) {
    auto key = std::make_tuple(m->start, m->end, m->offset, m->path);
    if (auto it = mapping_ids_.find(key); it != mapping_ids_.end()) {
      mapping_id_[m] = it->second;
      return;
    }
    pb::Mapping* pm = p_.add_mapping();
    pm->set_id(static_cast<uint64_t>(p_.mapping_size()));
    pm->set_memory_start(m->start);
    pm->set_memory_limit(m->end);
    pm->set_file_offset(m->offset_is_vaddr ? 0 : m->offset);
    pm->set_filename(str_.id(m->path));
    std::string id = symbolizer_.build_id(m->path);
    if (!id.empty()) pm->set_build_id(str_.id(id));
    pm->set_has_functions(true);
    pm->set_has_filenames(true);
    pm->set_has_line_numbers(true);
    pm->set_has_inline_frames(true);
    mapping_ids_[key] = mapping_id_[m] = pm->id();
  }

  // A snapshot's mappings, the main binary first (pprof's convention): the
  // file mapped lowest, then the rest. Returns them by address.
  std::vector<const Mapping*> add_mappings(const HeapSnapshot& snap) {
    std::vector<const Mapping*> maps;
    for (const auto& m : snap.maps) maps.push_back(&m);
    std::sort(maps.begin(), maps.end(), [](const Mapping* a, const Mapping* b) { return a->start < b->start; });
    const std::string main_path = snap.maps.empty() ? "" : maps.front()->path;
    for (const Mapping* m : maps)
      if (m->path == main_path) add_mapping(m);
    for (const Mapping* m : maps)
      if (m->path != main_path) add_mapping(m);
    return maps;
  }

  uint64_t function(const Frame& f) {
    std::string name = f.function.empty() ? f.module + "+0x" + [&] {
      char b[20];
      std::snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(f.module_offset));
      return std::string(b);
    }() : f.function;
    auto key = std::make_tuple(name, f.file, f.module);
    auto it = function_id_.find(key);
    if (it != function_id_.end()) return it->second;
    pb::Function* pf = p_.add_function();
    pf->set_id(static_cast<uint64_t>(p_.function_size()));
    pf->set_name(str_.id(name));
    pf->set_system_name(str_.id(name));
    pf->set_filename(str_.id(f.file));
    return function_id_[key] = pf->id();
  }

  // The location of `pc` (by mapping and address), with its frames.
  uint64_t location(const std::vector<const Mapping*>& maps, uint64_t pc, const std::vector<Frame>& frames) {
    const Mapping* at = find_mapping(maps, pc);
    auto lkey = std::make_pair(at ? mapping_id_[at] : 0, pc);
    auto it = location_id_.find(lkey);
    if (it != location_id_.end()) return it->second;
    pb::Location* loc = p_.add_location();
    loc->set_id(static_cast<uint64_t>(p_.location_size()));
    loc->set_address(pc);
    if (at) loc->set_mapping_id(mapping_id_[at]);
    for (const Frame& f : frames) {
      pb::Line* line = loc->add_line();
      line->set_function_id(function(f));
      line->set_line(f.line);
    }
    return location_id_.emplace(lkey, loc->id()).first->second;
  }

  // A sample's stack, symbolised; the allocator's frames at the leaf go, as
  // for report's sites, and in the leaf kept the allocator's inlined frames
  // too (std::vector's allocate inlined into the function that grew it):
  // pprof's flat view names the innermost line. Returns where it starts.
  size_t symbolised_stack(const HeapSnapshot& snap, const std::vector<const Mapping*>& maps, const StackSample& sample,
                          std::vector<std::pair<uint64_t, std::vector<Frame>>>& stack) {
    for (size_t i = 0; i < sample.stack().size(); ++i) {
      const Mapping* m = find_mapping(maps, sample.stack()[i]);
      std::vector<Frame> frames;
      if (m) frames = symbolizer_.lookup(*m, sample.stack()[i], i > 0 && !snap.call_sites);
      stack.push_back({sample.stack()[i], std::move(frames)});
    }
    if (stack.empty()) return 0;  // an allocation heaptrack recorded with no frames (trace 0)
    size_t first = 0;
    auto all_allocator = [](const std::vector<Frame>& fs) {
      return !fs.empty() && std::all_of(fs.begin(), fs.end(), [](const Frame& f) { return is_allocator_frame(f); });
    };
    while (first < stack.size() && all_allocator(stack[first].second)) ++first;
    if (first == stack.size()) first = 0;
    auto& leaf = stack[first].second;
    size_t inner = 0;
    while (inner + 1 < leaf.size() && is_allocator_frame(leaf[inner])) ++inner;
    leaf.erase(leaf.begin(), leaf.begin() + static_cast<std::ptrdiff_t>(inner));
    return first;
  }

  // A frame of a stack the profiler resolved in part (memray's Python
  // frames among the native ones): a location of its own, with no address.
  uint64_t frame_location(const Frame& f) {
    auto key = std::make_tuple(f.function, f.file, f.module, static_cast<int64_t>(f.line));
    auto it = frame_location_id_.find(key);
    if (it != frame_location_id_.end()) return it->second;
    pb::Location* loc = p_.add_location();
    loc->set_id(static_cast<uint64_t>(p_.location_size()));
    pb::Line* line = loc->add_line();
    line->set_function_id(function(f));
    line->set_line(f.line);
    return frame_location_id_[key] = loc->id();
  }

  void add_sample(size_t si, const StackSample& sample) {
    const HeapSnapshot& snap = *snaps_[si].snap;
    const std::vector<const Mapping*>& maps = sorted_per_snap_[si];
    pb::Sample* ps = p_.add_sample();
    if (snap.resolved) {
      // memray: the hybrid stack as report's sites see it, from the Python
      // line that asked (the interpreter's allocation machinery dropped at
      // the leaf, as the allocator's is).
      size_t outside = 0;
      std::vector<Frame> frames = stack_frames(snap, maps, sample, symbolizer_, outside);
      for (size_t i = site_frame(frames); i < frames.size(); ++i) ps->add_location_id(frame_location(frames[i]));
    } else {
      std::vector<std::pair<uint64_t, std::vector<Frame>>> stack;  // per pc, its frames
      size_t first = symbolised_stack(snap, maps, sample, stack);
      for (size_t i = first; i < stack.size(); ++i) ps->add_location_id(location(maps, stack[i].first, stack[i].second));
    }
    if (snap.has_allocated) {
      ps->add_value(pprof_value(sample.alloc_objects));
      ps->add_value(pprof_value(sample.alloc_bytes));
    }
    ps->add_value(pprof_value(sample.objects));
    ps->add_value(pprof_value(sample.bytes));
    if (pid_key_) {
      pb::Label* l = ps->add_label();
      l->set_key(pid_key_);
      l->set_num(static_cast<int64_t>(snaps_[si].pid));
    }
    if (options_.labels) {
      pb::Label* l = ps->add_label();
      l->set_key(program_key_);
      l->set_str(str_.id(snaps_[si].program));
      l = ps->add_label();
      l->set_key(backend_key_);
      l->set_str(str_.id(snap.backend));
    }
  }

  const std::vector<LabeledSnapshot>& snaps_;
  Symbolizer& symbolizer_;
  const PprofOptions& options_;
  pb::Profile p_;
  Strings str_;
  std::map<std::tuple<uint64_t, uint64_t, uint64_t, std::string>, uint64_t> mapping_ids_;
  std::map<const Mapping*, uint64_t> mapping_id_;
  std::vector<std::vector<const Mapping*>> sorted_per_snap_;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> function_id_;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> location_id_;  // by mapping and address
  std::map<std::tuple<std::string, std::string, std::string, int64_t>, uint64_t> frame_location_id_;
  int64_t pid_key_ = 0, program_key_ = 0, backend_key_ = 0;
};

}  // namespace

std::string encode_pprof(const std::vector<LabeledSnapshot>& snaps, Symbolizer& symbolizer, const PprofOptions& options) {
  if (snaps.empty()) throw Error("no snapshot to encode as pprof");
  PprofBuilder builder(snaps, symbolizer, options);
  std::string bytes;
  if (!builder.build().SerializeToString(&bytes)) throw Error("cannot encode the profile as pprof");
  return gzip(bytes, "pprof");
}

void write_pprof(const std::vector<LabeledSnapshot>& snaps, Symbolizer& symbolizer, const std::string& path) {
  if (snaps.empty()) throw FileError(path, "no snapshot to write");
  std::string bytes;
  try {
    bytes = encode_pprof(snaps, symbolizer, PprofOptions());
  } catch (const FileError&) {
    throw;
  } catch (const Error& e) {
    throw FileError(path, e.what());
  }
  write_whole_file(path, bytes);
}

}  // namespace memprofile
