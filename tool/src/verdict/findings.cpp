#include "verdict/findings.h"

#include <algorithm>
#include <stdexcept>

namespace memprofile {

const char* to_string(Severity s) {
  switch (s) {
    case Severity::Error: return "error";
    case Severity::Warning: return "warning";
    case Severity::Info: return "info";
  }
  return "error";
}

const std::vector<FindingSpec>& finding_catalog() {
  // {code, severity, default fix, fix order}: the fix order is the one
  // place that says which blocking finding a report lists first.
  static const std::vector<FindingSpec> catalog = {
      {"STATIC_BINARY", Severity::Error,
       "link dynamically against glibc: drop -static (C/C++), or build Rust for a *-linux-gnu target with "
       "RUSTFLAGS='-C target-feature=-crt-static'", 9},
      {"STATIC_PIE", Severity::Error,
       "link dynamically against glibc: drop -static-pie (C/C++), or build Rust for a *-linux-gnu target with "
       "RUSTFLAGS='-C target-feature=-crt-static'", 10},
      {"GO_BINARY", Severity::Warning,
       "profile the Go heap with Go's own pprof (import net/http/pprof, then fetch /debug/pprof/heap)"},
      {"MUSL_LIBC", Severity::Error,
       "build the program for a *-linux-gnu target and run it on a glibc base image (e.g. debian:bookworm-slim)", 11},
      {"NOT_A_PROGRAM", Severity::Error, "point memprofile at the executable that runs, not an object or core file", 12},
      {"SHARED_LIBRARY", Severity::Info, "check the program that loads this library"},
      {"SETUID", Severity::Warning,
       "run the profiled program without the setuid bit (chmod u-s) or as its owner, so AT_SECURE is not set"},
      {"SETGID", Severity::Warning,
       "run the profiled program without the setgid bit (chmod g-s) or with its group, so AT_SECURE is not set"},
      {"FILE_CAPABILITIES", Severity::Warning,
       "drop the file capabilities of the profiled copy (setcap -r FILE) or grant them another way (pod "
       "securityContext)"},
      {"INTERPRETER_MISSING", Severity::Error,
       "use a glibc base image that provides the loader (e.g. debian:bookworm-slim) instead of scratch/distroless-static", 7},
      {"LIBC_MISSING", Severity::Error, "use a glibc base image (e.g. debian:bookworm-slim) instead of scratch", 8},
      {"NEEDED_MISSING", Severity::Error,
       "install the package that provides the library in the image, or add its directory to RUNPATH or "
       "/etc/ld.so.conf.d and run ldconfig", 15},
      {"GLIBC_TOO_OLD", Severity::Error,
       "build against a glibc no newer than the image's, or move the image to a newer glibc base", 16},
      {"VERSION_MISSING", Severity::Error, "install the library version the program was built against", 17},
      {"PRELOAD_NOT_FOUND", Severity::Error, "copy the preload library into the image at that path (see preload/)", 19},
      {"PRELOAD_NOT_ELF", Severity::Error, "point LD_PRELOAD at the profiler's shared object (.so), not a script or archive", 20},
      {"PRELOAD_NOT_SHARED", Severity::Error, "build the profiler as a shared library (.so) and preload that", 21},
      {"PRELOAD_WRONG_ARCH", Severity::Error,
       "use the preload library built for the target's architecture (make preload ARCH=<arch>)", 22},
      {"PRELOAD_NEEDED_MISSING", Severity::Error,
       "install the libraries the preload library needs in the image, or build it with fewer dependencies", 23},
      {"PRELOAD_GLIBC_TOO_NEW", Severity::Error,
       "build the preload library against a glibc no newer than the image's (see preload/README.md)", 24},
      {"PRELOAD_NO_MALLOC", Severity::Error,
       "preload a heap profiler that defines malloc and free (bytehound, jemalloc with --enable-prof, heaptrack)", 25},
      {"PRELOAD_FORK_HANG", Severity::Error,
       "use memprofile's build of the profiler, made with its fork fix (make preload BACKEND=heaptrack or "
       "BACKEND=bytehound; in an image /usr/lib/memprofile/), or another backend (jemalloc records forked "
       "children)", 26},
      // preflight: what the image's config makes of the program
      {"NO_ENTRYPOINT", Severity::Error, "give the image an ENTRYPOINT or CMD, or name the program with --target", 1},
      {"ENTRYPOINT_MISSING", Severity::Error,
       "fix the ENTRYPOINT/CMD path or PATH in the image, or add the program to the image", 4},
      {"ENTRYPOINT_NOT_EXECUTABLE", Severity::Error, "make ENTRYPOINT name an executable ELF program or a #! script", 5},
      {"ENTRYPOINT_SCRIPT", Severity::Info, "scope LD_PRELOAD to the program the script starts (memprofile exec)"},
      {"DISPATCHER", Severity::Info,
       "name the process to profile with --target; its verdict is the one that counts"},
      {"TARGET_NOT_FOUND", Severity::Error, "give --target as a path inside the image", 6},
      {"PRELOAD_NOT_LOADED", Severity::Error,
       "run the same check by hand (LD_TRACE_LOADED_OBJECTS=1 LD_PRELOAD=LIB PROGRAM) and fix what the loader says"},
      {"LOADER_TRACED", Severity::Info, "none: the image's own loader maps the preload library into the target"},
      {"MEMRAY_NOT_IMPORTED", Severity::Error,
       "run the interpreter with the same command by hand in the image and fix what its ImportError says (a missing "
       "shared library: the package that ships it; make image-memprofile BACKEND=memray installs Debian's memray with "
       "what it needs)"},
      {"MEMRAY_IMPORTED", Severity::Info, "none: the image's own interpreter imports memray's extension"},
      {"LAUNCHER", Severity::Info, "none: the program memprofile exec starts was judged, with the launcher's settings"},
      {"LAUNCHER_CONFIG", Severity::Error,
       "fix the memprofile exec flags in the entrypoint or the launcher config (/etc/memprofile/exec.conf)", 3},
      {"LAUNCHER_WRONG_ARCH", Severity::Error,
       "copy the memprofile static binary built for the image's architecture (make static ARCH=...)", 2},
      {"USER_UNKNOWN", Severity::Error, "add the user to the image's /etc/passwd or use a numeric USER uid:gid", 18},
      {"SETUID_AS_USER", Severity::Error,
       "run as the file's owner or drop the setuid bit/capabilities from the profiled program", 27},
      {"PLATFORM_MISMATCH", Severity::Warning, "fix the image config's architecture or rebuild for the platform it claims"},
      {"SCRIPT_ENV_DROPS_PRELOAD", Severity::Error,
       "take env's -i, -u LD_PRELOAD or LD_PRELOAD=... out of the script's #! line, or give the interpreter as the "
       "entrypoint"},
      {"NO_PRELOAD", Severity::Info,
       "name the preload library with --preload (a path in the image) to have it checked too"},
      {"LD_PRELOAD_IN_IMAGE_ENV", Severity::Warning,
       "remove LD_PRELOAD from the image ENV and inject it for the app only (memprofile exec as ENTRYPOINT)"},
      {"BYTEHOUND_CHILD_UNTRACKED", Severity::Error,
       "set MEMORY_PROFILER_TRACK_CHILD_PROCESSES=1 for the dispatcher, or start the target through memprofile exec", 28},
      {"OUTPUT_DIR_MISSING", Severity::Error,
       "create the profile directory in the image (owned by the image's USER) or mount a volume (emptyDir) there", 29},
      {"OUTPUT_DIR_NOT_WRITABLE", Severity::Error,
       "make the profile directory writable by the image's USER (chown/chmod in the Dockerfile) or mount a writable "
       "volume there", 30},
      // exec: what only the running launcher can see
      {"OUTPUT_DIR_FULL", Severity::Error,
       "give the profile its own volume (not the application's data volume) with room to grow", 31},
      {"ENV_TOO_LARGE", Severity::Error, "make the environment or the arguments smaller"},
      // Heap coverage (verdict/heap_coverage.cpp): attached is not seeing.
      {"OUTPUT_DIR_PER_PROCESS", Severity::Info,
       "nothing to do; chmod 1777 the directory to keep every process's files in one"},
      {"HEAP_OWN_MALLOC", Severity::Error,
       "build the profiling image without the statically linked allocator (link glibc's malloc)", 13},
      {"HEAP_OWN_ALLOCATOR", Severity::Error,
       "build the profiling image without the allocator it calls (link glibc's malloc)", 14},
      {"HEAP_OWN_JEMALLOC", Severity::Info, "nothing to do: memprofile exec --backend jemalloc drives it"},
      {"HEAP_OWN_TCMALLOC", Severity::Info, "nothing to do: memprofile exec drives gperftools' heap profiler"},
      {"HEAP_PYMALLOC", Severity::Warning,
       "run it through memprofile exec (it sets PYTHONMALLOC=malloc), or set PYTHONMALLOC=malloc in the image; "
       "--backend memray shows the Python frames"},
      {"HEAP_MANAGED_CPYTHON", Severity::Warning,
       "profile with the default (GIL) build of the same Python (python3.N, not python3.Nt), which memprofile exec "
       "runs with PYTHONMALLOC=malloc"},
      {"HEAP_MANAGED_JVM", Severity::Warning,
       "for the Java heap use the JVM's own tools (jcmd PID GC.heap_dump, or JFR's OldObjectSample); the profile "
       "still shows native leaks (NMT: -XX:NativeMemoryTracking=summary)"},
      {"HEAP_MANAGED_V8", Severity::Warning,
       "for JavaScript objects use V8's own tools (node --heapsnapshot-signal=SIGUSR2, or --heap-prof); the "
       "profile still shows native leaks"},
      {"HEAP_MANAGED_DOTNET", Severity::Warning,
       "for managed objects use dotnet-gcdump or dotnet-dump; the profile still shows native leaks"},
      {"CTL_LIBRARY_MISSING", Severity::Error,
       "install libmemprofile_ctl.so at /usr/lib/memprofile (memprofile images have it) or set MEMPROFILE_CTL_LIBRARY"},
      // memray: a Python interpreter that must import it
      {"MEMRAY_NOT_PYTHON", Severity::Error,
       "give --target as the python3.N interpreter the program runs with (memray tracks CPython only)"},
      {"MEMRAY_MISSING", Severity::Error,
       "install memray for this interpreter: make image-memprofile BACKEND=memray installs Debian's on a Debian python "
       "(or apt-get install python3-memray in the app's Dockerfile); pip install memray on another"},
      {"MEMRAY_WRONG_PYTHON", Severity::Error,
       "install memray built for this interpreter's Python version (apt-get install python3-memray on Debian's, or pip "
       "install memray with this interpreter)"},
      {"MEMRAY_WRONG_ARCH", Severity::Error,
       "install memray built for the interpreter's architecture (the image's own package manager or pip, in the image)"},
      {"MEMRAY_BOOTSTRAP_IGNORED", Severity::Error,
       "drop -I, -E and -S from the interpreter's options (its command line or the script's #! line), and env's -i, "
       "-u PYTHONPATH or PYTHONPATH=... from a #! line"},
      {"MEMRAY_APP_TRACKER", Severity::Error,
       "run the app itself (memprofile's bootstrap is the tracker), or keep python -m memray and profile without "
       "--backend memray"},
      {"MEMRAY_NO_LAUNCHER", Severity::Info,
       "start the interpreter under memprofile exec --backend memray (make image-memprofile BACKEND=memray puts it "
       "in the entrypoint)"},
      {"MEMRAY_BOOTSTRAP_MISSING", Severity::Error,
       "install memprofile's python/ directory (sitecustomize.py and _memprofile_memray/) beside "
       "libmemprofile_ctl.so (memprofile images have it) or set "
       "MEMPROFILE_CTL_LIBRARY to the library it sits beside"},
  };
  return catalog;
}

Finding make_finding(const std::string& code, std::string message, std::string fix) {
  for (const auto& spec : finding_catalog()) {
    if (code == spec.code) return {code, spec.severity, std::move(message), fix.empty() ? spec.fix : std::move(fix)};
  }
  throw std::logic_error("unknown finding code " + code);
}

int fix_order(const std::string& code) {
  for (const auto& spec : finding_catalog())
    if (code == spec.code) return spec.fix_order;
  return kNoFixOrder;
}

void sort_by_fix_order(std::vector<Finding>& findings) {
  std::stable_sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) {
    int sa = static_cast<int>(a.severity), sb = static_cast<int>(b.severity);
    if (sa != sb) return sa < sb;
    return fix_order(a.code) < fix_order(b.code);
  });
}

}  // namespace memprofile
