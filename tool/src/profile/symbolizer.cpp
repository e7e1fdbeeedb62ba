#include "profile/symbolizer.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
// libiberty.h declares basename() unless told the C library does.
#define HAVE_DECL_BASENAME 1
#include <libiberty/demangle.h>
#include <unistd.h>

#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "base/error.h"
#include "base/unique_fd.h"
#include "elf/layout.h"
#include "image/file_tree.h"

namespace memprofile {

namespace {

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string hex_bytes(const void* data, ssize_t n) {
  std::string out;
  for (ssize_t i = 0; i < n; ++i) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", static_cast<const unsigned char*>(data)[i]);
    out += b;
  }
  return out;
}

// The warning for a file over the budget; "" when it is within it.
std::string over_debug_budget(Elf* elf) {
  uint64_t n = inflated_debug_bytes(elf);
  if (n <= kMaxInflatedDebug) return "";
  return "its compressed debug sections declare " + std::to_string(n >> 20) + " MiB inflated, over memprofile's " +
         std::to_string(kMaxInflatedDebug >> 20) + " MiB: its DWARF is not read (names from its symbol table only)";
}

std::string build_id_of(Elf* elf) {
  const void* id = nullptr;
  ssize_t n = elf ? dwelf_elf_gnu_build_id(elf, &id) : -1;
  return n > 0 ? hex_bytes(id, n) : "";
}

// A module's build-id, as libdwfl read it; "" when it has none.
std::string module_build_id(Dwfl_Module* mod) {
  const unsigned char* bits = nullptr;
  GElf_Addr vaddr;
  int n = dwfl_module_build_id(mod, &bits, &vaddr);
  return n > 0 ? hex_bytes(bits, n) : "";
}

// A DIE's name, through DW_AT_abstract_origin and DW_AT_specification:
// the linkage name when there is one (it demangles to the qualified name).
std::string die_name(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  for (int at : {DW_AT_linkage_name, DW_AT_MIPS_linkage_name})
    if (dwarf_attr_integrate(die, at, &attr))
      if (const char* s = dwarf_formstring(&attr)) return demangle(s);
  if (dwarf_attr_integrate(die, DW_AT_name, &attr))
    if (const char* s = dwarf_formstring(&attr)) return s;
  return "";
}

}  // namespace

OpenFile open_in_tree(std::shared_ptr<FileTree> tree) {
  return [tree = std::move(tree)](const std::string& path) -> int {
    std::optional<Resolved> r;
    try {
      r = resolve(*tree, path);
    } catch (const Error&) {
      return -1;
    }
    if (!r || r->node.kind != FsNode::Kind::Regular) return -1;
    return tree->open_data(r->path);
  };
}

std::string demangle(const std::string& name) {
  if (name.rfind("_Z", 0) != 0 && name.rfind("_R", 0) != 0) return name;
  char* d = cplus_demangle(name.c_str(), DMGL_ANSI);
  if (!d) return name;
  std::string out = d;
  std::free(d);
  return out;
}

std::string Frame::str() const {
  if (function.empty() && file.empty()) return module + "+" + hex(module_offset);
  std::string s = function.empty() ? module + "+" + hex(module_offset) : function;
  if (!file.empty()) s += " (" + file + (line ? ":" + std::to_string(line) : "") + ")";
  return s;
}

// One mapped file: its own Dwfl (reported at its link-time addresses), and
// whether it is the file the process mapped.
struct Symbolizer::Module {
  std::string path;
  OpenFile* open = nullptr;
  Dwfl* dwfl = nullptr;
  Dwfl_Module* mod = nullptr;
  std::vector<GElf_Phdr> loads;
  bool usable = false;
  bool no_dwarf = false;  // over the inflated-debug budget: symbol table only
  std::vector<std::string>* warnings = nullptr;
  const std::string* debug_dir = nullptr;  // report --debug-dir ("" none)
  std::vector<std::string> looked_for;     // the debug files find_debuginfo tried
  bool unnamed = false;                    // an address of it got no name
  size_t unnamed_order = 0;
  bool warned_mismatch = false;
  bool other_build = false;  // check_builds: return addresses do not follow calls
  // Per CU (by its DIE offset): every subprogram and inlined subroutine
  // with code, as [lo, hi) ranges with their nesting depth.
  struct Range {
    Dwarf_Addr lo, hi;
    Dwarf_Off die;
    int depth;
  };
  std::map<Dwarf_Off, std::vector<Range>> cu_functions;
  static constexpr size_t kMaxRangesPerCu = 1 << 20;

  void index_cu(Dwarf_Die* die, int depth, std::vector<Range>& out) {
    Dwarf_Die child;
    if (depth > 256 || dwarf_child(die, &child) != 0) return;
    do {
      int tag = dwarf_tag(&child);
      int next = depth;
      if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine) {
        Dwarf_Addr base, lo, hi;
        ptrdiff_t off = 0;
        while ((off = dwarf_ranges(&child, off, &base, &lo, &hi)) > 0 && out.size() < kMaxRangesPerCu)
          out.push_back({lo, hi, dwarf_dieoffset(&child), depth});
        next = depth + 1;
      }
      // Functions nest in namespaces, classes and lexical blocks too.
      if (tag != DW_TAG_variable && tag != DW_TAG_formal_parameter && tag != DW_TAG_member)
        index_cu(&child, next, out);
    } while (dwarf_siblingof(&child, &child) == 0);
  }

  std::vector<Dwarf_Die> functions_at(Dwarf_Die* cu, Dwarf_Addr addr) {
    Dwarf_Off key = dwarf_dieoffset(cu);
    auto it = cu_functions.find(key);
    if (it == cu_functions.end()) {
      std::vector<Range> ranges;
      index_cu(cu, 0, ranges);
      it = cu_functions.emplace(key, std::move(ranges)).first;
    }
    std::vector<const Range*> hits;
    for (const auto& r : it->second)
      if (addr >= r.lo && addr < r.hi) hits.push_back(&r);
    std::sort(hits.begin(), hits.end(), [](const Range* a, const Range* b) { return a->depth > b->depth; });
    std::vector<Dwarf_Die> out;
    Dwarf* dbg = dwarf_cu_getdwarf(cu->cu);
    for (const Range* r : hits) {
      Dwarf_Die d;
      if (!dbg || !dwarf_offdie(dbg, r->die, &d)) break;
      out.push_back(d);
      if (dwarf_tag(&d) == DW_TAG_subprogram) break;
    }
    return out;
  }
  ~Module() {
    if (dwfl) dwfl_end(dwfl);
  }
};

namespace {

int find_no_elf(Dwfl_Module*, void**, const char*, Dwarf_Addr, char**, Elf**) { return -1; }

// Debug files from the image only, as gdb and elfutils look for them:
// /usr/lib/debug/.build-id/XX/REST.debug, then the .gnu_debuglink name
// beside the file, in its .debug/ and under /usr/lib/debug/DIR/. A debug
// file with a build-id other than the module's is not used.
int find_debuginfo(Dwfl_Module* mod, void** userdata, const char*, Dwarf_Addr, const char*, const char* debuglink,
                   GElf_Word, char** debuginfo_file_name) {
  auto* m = static_cast<Symbolizer::Module*>(*userdata);
  if (!m || !m->open) return -1;
  std::string id = module_build_id(mod);
  std::vector<std::string> candidates;
  if (id.size() > 2) candidates.push_back("/usr/lib/debug/.build-id/" + id.substr(0, 2) + "/" + id.substr(2) + ".debug");
  if (debuglink && *debuglink && !std::strchr(debuglink, '/')) {
    std::string dir = dirname_of(m->path);
    std::string sep = dir == "/" ? "" : "/";
    candidates.push_back(dir + sep + debuglink);
    candidates.push_back(dir + sep + ".debug/" + debuglink);
    candidates.push_back("/usr/lib/debug" + dir + sep + debuglink);
  }
  // The user's --debug-dir after the image's own, laid out as /usr/lib/debug.
  std::vector<std::string> in_image = candidates;
  if (m->debug_dir && !m->debug_dir->empty()) {
    const std::string& d = *m->debug_dir;
    if (id.size() > 2) candidates.push_back(d + "/.build-id/" + id.substr(0, 2) + "/" + id.substr(2) + ".debug");
    if (debuglink && *debuglink && !std::strchr(debuglink, '/')) {
      candidates.push_back(d + dirname_of(m->path) + (dirname_of(m->path) == "/" ? "" : "/") + debuglink);
      candidates.push_back(d + "/" + debuglink);
    }
  }
  for (size_t k = 0; k < candidates.size(); ++k) {
    const std::string& c = candidates[k];
    if (c == m->path) continue;
    const bool host = k >= in_image.size();
    const std::string said = host ? c : c + " (in the image)";
    if (std::find(m->looked_for.begin(), m->looked_for.end(), said) == m->looked_for.end()) m->looked_for.push_back(said);
    int fd = host ? ::open(c.c_str(), O_RDONLY | O_CLOEXEC) : (*m->open)(c);
    if (fd < 0) continue;
    // Same build-id, or none to compare.
    Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
    std::string theirs = build_id_of(elf);
    std::string over = over_debug_budget(elf);
    if (elf) elf_end(elf);
    if (!id.empty() && !theirs.empty() && theirs != id) {
      ::close(fd);
      continue;
    }
    if (!over.empty()) {
      if (m->warnings) m->warnings->push_back(c + ": " + over);
      ::close(fd);
      return -1;
    }
    *debuginfo_file_name = strdup(c.c_str());
    return fd;
  }
  return -1;
}

// Whether the instruction ending at `at` (an offset into `file`) is a call.
bool follows_call(const unsigned char* file, size_t size, uint64_t at, unsigned machine) {
  if (machine == EM_AARCH64) {
    // Instructions are 4 bytes: an address inside the call (heaptrack's
    // libunwind gives the return address minus 2) ends at the next boundary.
    at = (at + 3) & ~uint64_t{3};
    if (at < 4 || at > size) return false;
    uint32_t insn;
    std::memcpy(&insn, file + at - 4, 4);
    return (insn & 0xFC000000u) == 0x94000000u ||  // BL
           (insn & 0xFFFFFC1Fu) == 0xD63F0000u ||  // BLR
           (insn & 0xFFFFFC1Fu) == 0xD63F081Fu ||  // BLRAAZ/BLRABZ (pointer authentication)
           (insn & 0xFFFFF800u) == 0xD73F0800u;    // BLRAA/BLRAB
  }
  if (machine != EM_X86_64 || at > size) return true;  // other machines: not checked
  if (at >= 5 && file[at - 5] == 0xE8) return true;   // call rel32
  // call r/m64: FF /2, its ModRM (and SIB, displacement) ending at `at`,
  // maybe after a REX prefix.
  for (uint64_t k = 2; k <= 8 && k <= at; ++k) {
    uint64_t op = at - k;
    bool rex = (file[op] & 0xF0) == 0x40;
    if (rex) ++op;
    if (op + 1 >= at || file[op] != 0xFF) continue;
    unsigned modrm = file[op + 1], mod = modrm >> 6, rm = modrm & 7;
    if (((modrm >> 3) & 7) != 2) continue;
    uint64_t len = 2;
    if (mod != 3 && rm == 4) {
      ++len;  // SIB
      if (mod == 0 && op + 2 < at && (file[op + 2] & 7) == 5) len += 4;
    }
    if (mod == 1) len += 1;
    if (mod == 2 || (mod == 0 && rm == 5)) len += 4;
    if (op + len == at) return true;
  }
  return false;
}

const Dwfl_Callbacks kCallbacks = {find_no_elf, find_debuginfo, dwfl_offline_section_address, nullptr};

}  // namespace

Symbolizer::Symbolizer(OpenFile open, std::string debug_dir) : open_(std::move(open)), debug_dir_(std::move(debug_dir)) {
  elf_version(EV_CURRENT);
}

Symbolizer::~Symbolizer() = default;

Symbolizer::Module& Symbolizer::module(const Mapping& map) {
  auto it = modules_.find(map.path);
  if (it != modules_.end()) return *it->second;
  auto m = std::make_unique<Module>();
  m->path = map.path;
  m->open = &open_;
  m->warnings = &warnings_;
  m->debug_dir = &debug_dir_;
  auto warn = [&](const std::string& why) { warnings_.push_back(map.path + ": " + why); };
  int fd = open_(map.path);
  if (fd < 0) {
    warn("not in the image: its addresses stay unresolved");
  } else {
    m->dwfl = dwfl_begin(&kCallbacks);
    // Reported at its link-time addresses: an address is looked up as the
    // file's own virtual address (libdwfl takes the fd).
    m->mod = m->dwfl ? dwfl_report_elf(m->dwfl, map.path.c_str(), map.path.c_str(), fd, 0, true) : nullptr;
    if (!m->mod) {
      ::close(fd);
      warn(std::string("not an ELF file libdwfl can read (") + dwfl_errmsg(-1) + "): its addresses stay unresolved");
    } else {
      dwfl_report_end(m->dwfl, nullptr, nullptr);
      void** slot = nullptr;
      dwfl_module_info(m->mod, &slot, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
      if (slot) *slot = m.get();
      GElf_Addr bias;
      Elf* elf = dwfl_module_getelf(m->mod, &bias);
      m->loads = load_segments(elf);
      m->usable = !m->loads.empty();
      if (!m->usable) warn("has no loadable segments: its addresses stay unresolved");
      if (std::string over = over_debug_budget(elf); m->usable && !over.empty()) {
        m->no_dwarf = true;
        warn(over);
      }
    }
  }
  return *(modules_[map.path] = std::move(m));
}

void Symbolizer::check_builds(const std::vector<std::pair<const Mapping*, uint64_t>>& returns) {
  struct Tally {
    size_t checked = 0, calls = 0;
  };
  std::map<std::string, Tally> tally;
  for (const auto& [map, pc] : returns) {
    Tally& t = tally[map->path];
    if (t.checked >= 256) continue;
    Module& m = module(*map);
    if (!m.usable) continue;
    GElf_Addr bias;
    std::optional<RawElf> raw = raw_elf(dwfl_module_getelf(m.mod, &bias));
    if (!raw) continue;
    // The return address as an offset into the file.
    uint64_t at;
    if (map->offset_is_vaddr) {
      const GElf_Phdr* seg = nullptr;
      for (const auto& ph : m.loads)
        if (ph.p_vaddr == map->offset && ph.p_memsz == map->end - map->start) seg = &ph;
      if (!seg) continue;
      at = pc - map->start + seg->p_offset;
    } else {
      at = pc - map->start + map->offset;
    }
    ++t.checked;
    if (follows_call(raw->bytes, raw->size, at, raw->machine)) ++t.calls;
  }
  for (const auto& [path, t] : tally) {
    if (t.checked < 4 || t.calls * 4 >= t.checked * 3) continue;
    Module& m = *modules_.at(path);
    m.other_build = true;
    warnings_.push_back(path + ": not the build the process ran (" + std::to_string(t.checked - t.calls) + " of " +
                        std::to_string(t.checked) + " return addresses do not follow a call): its addresses stay unresolved");
  }
}

std::vector<UnnamedModule> Symbolizer::unnamed() const {
  std::vector<std::pair<size_t, UnnamedModule>> found;
  for (const auto& [path, m] : modules_)
    if (m->unnamed)
      found.push_back({m->unnamed_order, {path, m->mod ? module_build_id(m->mod) : "", m->looked_for}});
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<UnnamedModule> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::string Symbolizer::build_id(const std::string& path) {
  Mapping m;
  m.path = path;
  Module& mod = module(m);
  return mod.mod ? module_build_id(mod.mod) : "";
}

std::vector<Frame> Symbolizer::lookup(const Mapping& map, uint64_t pc, bool caller) {
  Frame unresolved;
  unresolved.module = map.path;
  unresolved.module_offset = pc - map.start + map.offset;
  auto key = std::make_pair(map.path, unresolved.module_offset * 2 + (caller ? 1 : 0));
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  std::vector<Frame>& out = cache_[key];
  Module& m = module(map);
  // The file offset to the file's virtual address, through the segment
  // holding it; an executable mapping no segment explains means this is not
  // the file the process mapped (another build): nothing is attributed.
  const GElf_Phdr* seg = nullptr;
  bool explained;
  if (map.offset_is_vaddr) {
    // heaptrack: the segment itself, which the file must have as listed.
    for (const auto& ph : m.loads)
      if (ph.p_vaddr == map.offset && ph.p_memsz == map.end - map.start) seg = &ph;
    explained = seg != nullptr;
    if (seg) unresolved.module_offset = pc - map.start + seg->p_offset;  // as a file offset
  } else {
    for (const auto& ph : m.loads)
      if (unresolved.module_offset >= ph.p_offset && unresolved.module_offset < ph.p_offset + ph.p_filesz) seg = &ph;
    explained = seg && (!map.executable || (seg->p_flags & PF_X));
  }
  if (m.other_build) {  // check_builds said so already
    out.push_back(unresolved);
    return out;
  }
  if (!m.usable || !explained) {
    if (m.usable && !m.warned_mismatch) {
      m.warned_mismatch = true;
      warnings_.push_back(map.path + ": not the file the process mapped (its segments differ from the profile's maps): "
                                     "its addresses stay unresolved");
    }
    out.push_back(unresolved);
    return out;
  }
  Dwarf_Addr addr = unresolved.module_offset - seg->p_offset + seg->p_vaddr - (caller ? 1 : 0);
  if (map.offset_is_vaddr) addr = pc - map.start + map.offset;
  Dwarf_Addr bias = 0;
  Dwarf_Die* cu = m.no_dwarf ? nullptr : dwfl_module_addrdie(m.mod, addr, &bias);
  // The functions at addr, innermost first (inlined subroutines, then the
  // subprogram), from the CU's index of function ranges (built once per CU;
  // dwarf_getscopes would walk the CU's whole tree for every address).
  std::vector<Dwarf_Die> fn_dies = cu ? m.functions_at(cu, addr - bias) : std::vector<Dwarf_Die>{};
  std::vector<Dwarf_Die*> fns;
  for (auto& d : fn_dies) fns.push_back(&d);
  Frame first = unresolved;
  if (Dwfl_Line* line = m.no_dwarf ? nullptr : dwfl_module_getsrc(m.mod, addr)) {
    int lineno = 0;
    if (const char* file = dwfl_lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr)) {
      first.file = file;
      first.line = lineno;
    }
  }
  if (!fns.empty()) first.function = die_name(fns[0]);
  // The symbol table only when DWARF names nothing: libdwfl searches it
  // linearly for every address.
  if (first.function.empty())
    if (const char* sym = dwfl_module_addrname(m.mod, addr)) first.function = demangle(sym);
  if (first.function.empty() && !m.unnamed) {
    m.unnamed = true;
    m.unnamed_order = ++unnamed_count_;
  }
  out.push_back(first);
  // Each inlined subroutine was called from the next scope out, at its
  // DW_AT_call_file:DW_AT_call_line.
  Dwarf_Files* files = nullptr;
  size_t nfiles = 0;
  if (cu) dwarf_getsrcfiles(cu, &files, &nfiles);
  for (size_t k = 0; k + 1 < fns.size() && dwarf_tag(fns[k]) == DW_TAG_inlined_subroutine; ++k) {
    out.back().inlined = true;
    Frame f = unresolved;
    f.function = die_name(fns[k + 1]);
    Dwarf_Attribute attr;
    Dwarf_Word v;
    if (files && dwarf_attr(fns[k], DW_AT_call_file, &attr) && dwarf_formudata(&attr, &v) == 0 && v < nfiles)
      if (const char* file = dwarf_filesrc(files, v, nullptr, nullptr)) f.file = file;
    if (dwarf_attr(fns[k], DW_AT_call_line, &attr) && dwarf_formudata(&attr, &v) == 0) f.line = static_cast<int>(v);
    out.push_back(f);
  }
  return out;
}

}  // namespace memprofile
