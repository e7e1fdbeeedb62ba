// A function of the program's own that it does not export: its address from
// the executable's symbol table (.symtab), or, where the executable is
// stripped, from its debug file (by build-id under /usr/lib/debug/.build-id,
// or by .gnu_debuglink beside it, in .debug/ or under /usr/lib/debug), plus
// the load bias dl_iterate_phdr gives. A Rust service on tikv-jemallocator
// carries jemalloc this way: the executable defines mallctl (or
// _rjem_mallctl) and exports nothing.
//
// Everything read is bounded by the file's size and checked: the section
// headers within the file, the string table's entries within it, at most
// kMaxSymbols entries read. The symbol must be a defined function with a
// size, whose address lies in an executable segment of the program as it is
// loaded. The caller verifies what it found before it relies on it
// (backend.c calls mallctl("version")).
#define _GNU_SOURCE
#include "symtab.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if UINTPTR_MAX == 0xffffffffffffffffu
typedef Elf64_Ehdr Ehdr;
typedef Elf64_Shdr Shdr;
typedef Elf64_Sym Sym;
typedef Elf64_Nhdr Nhdr;
#define ELF_ST_TYPE ELF64_ST_TYPE
#define OUR_CLASS ELFCLASS64
#else
typedef Elf32_Ehdr Ehdr;
typedef Elf32_Shdr Shdr;
typedef Elf32_Sym Sym;
typedef Elf32_Nhdr Nhdr;
#define ELF_ST_TYPE ELF32_ST_TYPE
#define OUR_CLASS ELFCLASS32
#endif

enum { kMaxSymbols = 1 << 22, kChunk = 256 };

static int read_at(int fd, void* buf, size_t len, uint64_t off, uint64_t file_size) {
  if (off > file_size || len > file_size - off) return -1;
  size_t got = 0;
  while (got < len) {
    ssize_t n = pread(fd, (char*)buf + got, len - got, (off_t)(off + got));
    if (n <= 0) return -1;
    got += (size_t)n;
  }
  return 0;
}

// The section headers of an ELF file of this process's class and machine.
struct elf_file {
  int fd;
  uint64_t size;
  Ehdr eh;
};

static int open_elf(const char* path, struct elf_file* f) {
  // Links followed: /proc/self/exe is one, and /usr/lib/debug/.build-id's
  // entries are links to the debug files. Never blocking: a FIFO is refused.
  f->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (f->fd < 0) return -1;
  struct stat st;
  if (fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode) || read_at(f->fd, &f->eh, sizeof f->eh, 0, (uint64_t)st.st_size) != 0 ||
      memcmp(f->eh.e_ident, ELFMAG, SELFMAG) != 0 || f->eh.e_ident[EI_CLASS] != OUR_CLASS ||
      f->eh.e_shentsize != sizeof(Shdr) || f->eh.e_shnum == 0) {
    close(f->fd);
    f->fd = -1;
    return -1;
  }
  f->size = (uint64_t)st.st_size;
  return 0;
}

static int section(const struct elf_file* f, unsigned i, Shdr* sh) {
  return read_at(f->fd, sh, sizeof *sh, f->eh.e_shoff + (uint64_t)i * sizeof *sh, f->size);
}

// `name`'s value, size and type in the file's .symtab: 0 when found.
static int find_in_symtab(const struct elf_file* f, const char* name, uint64_t* value, uint64_t* size) {
  const size_t want = strlen(name);
  for (unsigned i = 0; i < f->eh.e_shnum; ++i) {
    Shdr sh, strsh;
    if (section(f, i, &sh) != 0 || sh.sh_type != SHT_SYMTAB || sh.sh_entsize != sizeof(Sym)) continue;
    if (sh.sh_link >= f->eh.e_shnum || section(f, sh.sh_link, &strsh) != 0 || strsh.sh_type != SHT_STRTAB) continue;
    uint64_t count = sh.sh_size / sizeof(Sym);
    if (count > kMaxSymbols) count = kMaxSymbols;
    Sym chunk[kChunk];
    for (uint64_t at = 0; at < count; at += kChunk) {
      size_t n = count - at < kChunk ? (size_t)(count - at) : kChunk;
      if (read_at(f->fd, chunk, n * sizeof(Sym), sh.sh_offset + at * sizeof(Sym), f->size) != 0) break;
      for (size_t k = 0; k < n; ++k) {
        const Sym* s = &chunk[k];
        if (s->st_shndx == SHN_UNDEF || ELF_ST_TYPE(s->st_info) != STT_FUNC || s->st_size == 0) continue;
        if (s->st_name >= strsh.sh_size || strsh.sh_size - s->st_name < want + 1) continue;
        char got[128];
        if (want + 1 > sizeof got ||
            read_at(f->fd, got, want + 1, strsh.sh_offset + s->st_name, f->size) != 0 || memcmp(got, name, want + 1) != 0)
          continue;
        *value = s->st_value;
        *size = s->st_size;
        return 0;
      }
    }
  }
  return -1;
}

// The file's build-id (hex) and .gnu_debuglink name, where it has them.
static void debug_names(const struct elf_file* f, char* build_id, size_t id_len, char* link, size_t link_len) {
  build_id[0] = link[0] = '\0';
  Shdr strs;
  if (f->eh.e_shstrndx >= f->eh.e_shnum || section(f, f->eh.e_shstrndx, &strs) != 0) return;
  for (unsigned i = 0; i < f->eh.e_shnum; ++i) {
    Shdr sh;
    char name[24];
    if (section(f, i, &sh) != 0 || sh.sh_name >= strs.sh_size) continue;
    memset(name, 0, sizeof name);
    size_t len = strs.sh_size - sh.sh_name < sizeof name - 1 ? (size_t)(strs.sh_size - sh.sh_name) : sizeof name - 1;
    if (read_at(f->fd, name, len, strs.sh_offset + sh.sh_name, f->size) != 0) continue;
    if (strcmp(name, ".gnu_debuglink") == 0 && sh.sh_size > 4) {
      size_t n = sh.sh_size - 4 < link_len - 1 ? (size_t)(sh.sh_size - 4) : link_len - 1;
      if (read_at(f->fd, link, n, sh.sh_offset, f->size) == 0) link[n] = '\0';
      else link[0] = '\0';
      if (strchr(link, '/')) link[0] = '\0';  // a name, never a path
    } else if (strcmp(name, ".note.gnu.build-id") == 0 && sh.sh_size >= sizeof(Nhdr) && sh.sh_size <= 256) {
      unsigned char note[256];
      if (read_at(f->fd, note, (size_t)sh.sh_size, sh.sh_offset, f->size) != 0) continue;
      const Nhdr* nh = (const Nhdr*)note;
      uint64_t desc = sizeof(Nhdr) + ((nh->n_namesz + 3u) & ~3u);
      if (nh->n_type != NT_GNU_BUILD_ID || desc + nh->n_descsz > sh.sh_size || nh->n_descsz == 0 ||
          nh->n_descsz * 2 + 1 > id_len)
        continue;
      for (unsigned b = 0; b < nh->n_descsz; ++b) snprintf(build_id + 2 * b, 3, "%02x", note[desc + b]);
    }
  }
}

// The main program's load bias and whether [addr, addr + size) lies in one
// of its executable segments.
struct main_program {
  uintptr_t bias;
  uintptr_t addr, size;
  int found, in_text;
};

static int visit(struct dl_phdr_info* info, size_t len, void* data) {
  (void)len;
  struct main_program* m = data;
  m->found = 1;  // the first object is the program
  m->bias = info->dlpi_addr;
  uintptr_t addr = info->dlpi_addr + m->addr;
  for (unsigned i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)* p = &info->dlpi_phdr[i];
    if (p->p_type != PT_LOAD || !(p->p_flags & PF_X)) continue;
    uintptr_t lo = info->dlpi_addr + p->p_vaddr, hi = lo + p->p_memsz;
    if (addr >= lo && addr < hi && m->size <= hi - addr) m->in_text = 1;
  }
  return 1;  // the first only
}

// The symbol in one file; its address in the process when it is a function
// in the program's text.
static void* look_in(const char* path, const char* name, const char** where) {
  struct elf_file f;
  if (open_elf(path, &f) != 0) return NULL;
  uint64_t value = 0, size = 0;
  int found = find_in_symtab(&f, name, &value, &size);
  close(f.fd);
  if (found != 0) return NULL;
  struct main_program m = {0, (uintptr_t)value, (uintptr_t)size, 0, 0};
  dl_iterate_phdr(visit, &m);
  if (!m.found || !m.in_text) return NULL;
  *where = path;
  return (void*)(m.bias + (uintptr_t)value);
}

void* ctl_find_own_function(const char* name, char* where, size_t where_len) {
  const char* found_in = NULL;
  char exe[512];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return NULL;
  exe[n] = '\0';
  void* p = look_in("/proc/self/exe", name, &found_in);
  if (p) {
    snprintf(where, where_len, "%s's symbol table", exe);
    return p;
  }
  // Stripped: its debug file, by build-id, then by debuglink.
  struct elf_file f;
  if (open_elf("/proc/self/exe", &f) != 0) return NULL;
  char build_id[129], link[256];
  debug_names(&f, build_id, sizeof build_id, link, sizeof link);
  close(f.fd);
  char path[1024];
  if (strlen(build_id) > 2) {
    snprintf(path, sizeof path, "/usr/lib/debug/.build-id/%.2s/%s.debug", build_id, build_id + 2);
    if ((p = look_in(path, name, &found_in))) {
      snprintf(where, where_len, "%s", path);
      return p;
    }
  }
  if (link[0]) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s", exe);
    char* slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    const char* forms[] = {"%s/%s", "%s/.debug/%s", "/usr/lib/debug%s/%s"};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; ++i) {
      snprintf(path, sizeof path, forms[i], dir, link);
      if ((p = look_in(path, name, &found_in))) {
        snprintf(where, where_len, "%s", path);
        return p;
      }
    }
  }
  return NULL;
}
