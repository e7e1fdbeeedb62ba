// The memray backend's target: which CPython an interpreter is, the memray
// its sys.path would import, and the launcher model's reading of #! lines
// and of the interpreter's options.
#include <catch2/catch.hpp>

#include "elf/elf_info.h"
#include "archive_builder.h"
#include "elf_builder.h"
#include "image/file_tree.h"
#include "image/image_tree.h"
#include "runtime/backend.h"
#include "runtime/launcher.h"
#include "support.h"
#include "verdict/python_target.h"

using namespace memprofile;
using testing::Scratch;

namespace {

std::string x86_ext(const std::string& tag) { return "_memray.cpython-" + tag + "-x86_64-linux-gnu.so"; }

// A root with python3 -> python3.13 (an ELF) and, when given, memray's
// package in Debian's dist-packages with these files.
void python_root(const Scratch& s, const std::vector<std::string>& memray_files) {
  testing::write_file(s / "usr/bin/python3.13", testing::ElfBuilder().build(), 0755);
  for (const auto& f : memray_files) testing::write_file(s / ("usr/lib/python3/dist-packages/memray/" + f), "x", 0644);
}

std::vector<Finding> find(const Scratch& s, MemrayFound* found, const std::string& pythonpath = "") {
  HostTree tree(s.path());
  auto elf = tree.elf("/usr/bin/python3.13");
  REQUIRE(elf);
  return find_memray(tree, "/usr/bin/python3", "/usr/bin/python3.13", *elf, pythonpath, found);
}

}  // namespace

TEST_CASE("python_version: from the interpreter's name, else from its libpython") {
  ElfInfo plain;
  CHECK(to_string(*python_version("/usr/bin/python3.13", plain)) == "3.13");
  CHECK(to_string(*python_version("/opt/py/bin/python3.9t", plain)) == "3.9t");  // its ABI flags too
  CHECK_FALSE(python_version("/usr/bin/python3", plain));  // a link name: the caller resolves it
  CHECK_FALSE(python_version("/usr/bin/python3.13-config", plain));
  CHECK_FALSE(python_version("/usr/bin/node", plain));
  ElfInfo embedded;
  embedded.needed = {"libc.so.6", "libpython3.11.so.1.0"};
  CHECK(to_string(*python_version("/usr/bin/uwsgi", embedded)) == "3.11");
  embedded.needed = {"libpython3.13t.so.1.0"};
  CHECK(to_string(*python_version("/usr/bin/uwsgi", embedded)) == "3.13t");
}

TEST_CASE("extension_tag: a compiled extension's Python and triplet") {
  auto t = extension_tag(x86_ext("313"));
  REQUIRE(t);
  CHECK(to_string(t->version) == "3.13");
  CHECK(t->triplet == "x86_64-linux-gnu");
  auto ft = extension_tag("_memray.cpython-313t-aarch64-linux-gnu.so");
  REQUIRE(ft);
  CHECK(ft->triplet == "aarch64-linux-gnu");
  CHECK(to_string(ft->version) == "3.13t");
  auto bare = extension_tag("_memray.cpython-39.so");
  REQUIRE(bare);
  CHECK(to_string(bare->version) == "3.9");
  CHECK(bare->triplet.empty());
  CHECK_FALSE(extension_tag("_memray.abi3.so"));
  CHECK_FALSE(extension_tag("_memray.cpython-313-x86_64-linux-gnu.so.1"));
  CHECK_FALSE(extension_tag("_memray.cpython-.so"));
}

TEST_CASE("find_memray: a free-threaded extension (cpython-313t) is not one a 3.13 imports") {
  Scratch s;
  python_root(s, {"__init__.py", "_memray.cpython-313t-x86_64-linux-gnu.so"});
  MemrayFound found;
  auto problems = find(s, &found);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].code == "MEMRAY_WRONG_PYTHON");
  CHECK(found.extension.empty());
}

TEST_CASE("site_dirs: PYTHONPATH first, then the prefix's site-packages, then Debian's") {
  auto dirs = site_dirs("/usr/local/bin/python3.12", {3, 12, ""}, "/app/lib::relative:/app/lib");
  std::vector<std::string> want = {"/app/lib", "/usr/local/lib/python3.12/site-packages",
                                   "/usr/local/lib/python3.12/dist-packages", "/usr/lib/python3/dist-packages",
                                   "/usr/lib/python3.12/dist-packages"};
  CHECK(dirs == want);
}

TEST_CASE("find_memray: Debian's package for this interpreter is found, with its extension") {
  Scratch s;
  python_root(s, {"__init__.py", x86_ext("313")});
  MemrayFound found;
  CHECK(find(s, &found).empty());
  CHECK(found.package == "/usr/lib/python3/dist-packages/memray");
  CHECK(found.extension == "/usr/lib/python3/dist-packages/memray/" + x86_ext("313"));
}

TEST_CASE("find_memray: missing, for another Python, for another architecture, without its extension") {
  MemrayFound found;
  {
    Scratch s;
    python_root(s, {});
    auto f = find(s, &found);
    REQUIRE(f.size() == 1);
    CHECK(f[0].code == "MEMRAY_MISSING");
    CHECK(f[0].message.find("/usr/lib/python3/dist-packages") != std::string::npos);
  }
  {
    Scratch s;
    python_root(s, {"__init__.py", x86_ext("311")});
    auto f = find(s, &found);
    REQUIRE(f.size() == 1);
    CHECK(f[0].code == "MEMRAY_WRONG_PYTHON");
    CHECK(f[0].message.find(x86_ext("311")) != std::string::npos);
  }
  {
    Scratch s;
    python_root(s, {"__init__.py", "_memray.cpython-313-aarch64-linux-gnu.so"});
    auto f = find(s, &found);
    REQUIRE(f.size() == 1);
    CHECK(f[0].code == "MEMRAY_WRONG_ARCH");
  }
  {
    Scratch s;
    python_root(s, {"__init__.py"});
    auto f = find(s, &found);
    REQUIRE(f.size() == 1);
    CHECK(f[0].code == "MEMRAY_MISSING");
  }
}

TEST_CASE("find_memray: the first memray on sys.path is the one imported") {
  Scratch s;
  python_root(s, {"__init__.py", x86_ext("313")});
  testing::write_file(s / ("app/lib/memray/" + x86_ext("312")), "x", 0644);
  MemrayFound found;
  auto f = find(s, &found, "/app/lib");
  REQUIRE(f.size() == 1);
  CHECK(f[0].code == "MEMRAY_WRONG_PYTHON");
  CHECK(found.package == "/app/lib/memray");
}

TEST_CASE("find_memray: a program that is no CPython") {
  Scratch s;
  testing::write_file(s / "usr/bin/node", testing::ElfBuilder().build(), 0755);
  HostTree tree(s.path());
  MemrayFound found;
  auto f = find_memray(tree, "/usr/bin/node", "/usr/bin/node", *tree.elf("/usr/bin/node"), "", &found);
  REQUIRE(f.size() == 1);
  CHECK(f[0].code == "MEMRAY_NOT_PYTHON");
}

TEST_CASE("read_shebang: the program a #! line runs, through env") {
  CHECK_FALSE(read_shebang("\x7f" "ELF"));
  auto plain = read_shebang("#!/usr/bin/python3 -u\nimport sys\n");
  REQUIRE(plain);
  CHECK(plain->program == "/usr/bin/python3");
  CHECK(plain->args == std::vector<std::string>{"-u"});
  auto env = read_shebang("#! /usr/bin/env -S python3 -I\r\n");
  REQUIRE(env);
  CHECK(env->program == "python3");
  CHECK(env->args == std::vector<std::string>{"-I"});
  auto empty = read_shebang("#!   \n");
  REQUIRE(empty);
  CHECK(empty->program.empty());
}

TEST_CASE("read_shebang: env's options and assignments come before its program") {
  auto set = read_shebang("#!/usr/bin/env -S PYTHONUNBUFFERED=1 python3 -u\n");
  REQUIRE(set);
  CHECK(set->program == "python3");
  CHECK(set->args == std::vector<std::string>{"-u"});
  CHECK(set->changes("PYTHONUNBUFFERED"));
  CHECK_FALSE(set->changes("PYTHONPATH"));
  auto unset = read_shebang("#!/usr/bin/env -S -u PYTHONPATH -C /srv python3\n");
  REQUIRE(unset);
  CHECK(unset->program == "python3");
  CHECK(unset->changes("PYTHONPATH"));
  CHECK_FALSE(unset->changes("LD_PRELOAD"));
  auto cleared = read_shebang("#!/usr/bin/env -S -i python3\n");
  REQUIRE(cleared);
  CHECK(cleared->program == "python3");
  CHECK(cleared->changes("LD_PRELOAD"));
  auto plain = read_shebang("#!/usr/bin/python3 -u\n");
  REQUIRE(plain);
  CHECK_FALSE(plain->changes("PYTHONPATH"));
  auto clustered = read_shebang("#!/usr/bin/env -iS python3\n");
  REQUIRE(clustered);
  CHECK(clustered->program == "python3");
  CHECK(clustered->env_cleared);
  auto vu = read_shebang("#!/usr/bin/env -S -vu PYTHONPATH -a name python3\n");
  REQUIRE(vu);
  CHECK(vu->program == "python3");
  CHECK(vu->changes("PYTHONPATH"));
  for (const char* line : {"#!/usr/bin/env -Spython3 -u\n", "#!/usr/bin/env --split-string=python3 -u\n",
                           "#!/usr/bin/env -S \"python3\" '-u'\n"}) {
    auto sb = read_shebang(line);
    REQUIRE(sb);
    CHECK(sb->program == "python3");
    CHECK(sb->args == std::vector<std::string>{"-u"});
  }
  auto quoted = read_shebang("#!/usr/bin/env -S A=\"x y\" python3\n");
  REQUIRE(quoted);
  CHECK(quoted->program == "python3");
  CHECK(quoted->changes("A"));
}

TEST_CASE("read_shebang: the rest of the line is one argument, as the kernel passes it") {
  auto two = read_shebang("#!/usr/bin/python3 -s -E\n");
  REQUIRE(two);
  CHECK(two->args == std::vector<std::string>{"-s -E"});
  auto x = read_shebang("#!/usr/bin/python3 -X dev -E\n");
  REQUIRE(x);
  CHECK_FALSE(python_ignores_pythonpath(x->args));  // -X takes " dev -E" as its value
  auto env = read_shebang("#!/usr/bin/env python3 -E\n");
  REQUIRE(env);
  CHECK(env->program == "python3 -E");  // what env looks for on PATH, and does not find
  auto bad = read_shebang("#!/usr/bin/env -i python3\n");
  REQUIRE(bad);
  CHECK(bad->program.empty());
  CHECK(bad->error == "env: invalid option -- ' '");
  auto alone = read_shebang("#!/usr/bin/env\n");
  REQUIRE(alone);
  CHECK(alone->program == "/usr/bin/env");
}

TEST_CASE("python_ignores_pythonpath: -I, -E and -S before the script") {
  using V = std::vector<std::string>;
  CHECK(python_ignores_pythonpath(V{"-I", "app.py"}));
  CHECK(python_ignores_pythonpath(V{"-uE"}));
  CHECK(python_ignores_pythonpath(V{"-W", "ignore", "-S", "app.py"}));
  CHECK_FALSE(python_ignores_pythonpath(V{"-u", "app.py", "-I"}));  // the script's own option
  CHECK_FALSE(python_ignores_pythonpath(V{"-c", "-I"}));
  CHECK_FALSE(python_ignores_pythonpath(V{"-mIS"}));  // the module's name
  CHECK_FALSE(python_ignores_pythonpath(V{"-WI", "app.py"}));  // -W's value
  CHECK_FALSE(python_ignores_pythonpath(V{"--check-hash-based-pycs", "always", "app.py"}));
  CHECK(python_ignores_pythonpath(V{"--check-hash-based-pycs", "always", "-E", "app.py"}));  // a long option goes on
  CHECK(python_ignores_pythonpath(V{"-Ic", "print(1)"}));
}

TEST_CASE("memray marks: memray-marks. and the capture's name after memray., sorting before it") {
  for (const std::string capture : {"memray.42.bin", "memray.42.2.bin", "memray.42.bin.4711"}) {
    INFO(capture);
    const std::string marks = memray_marks_name(capture);
    CHECK(marks == "memray-marks." + capture.substr(7));
    CHECK(is_memray_marks(marks));
    CHECK_FALSE(is_memray_marks(capture));
    CHECK(marks < capture);  // read before the capture it marks, in a directory and in collect's archive
    CHECK_FALSE(is_profile_file(Backend::Memray, marks));
  }
  CHECK(memray_marks_name("capture.bin").empty());
  CHECK_FALSE(is_memray_marks("memray-marks.x.bin"));
  CHECK_FALSE(is_memray_marks("memray-marks."));
}

TEST_CASE("read_python_options: the module -m runs") {
  using V = std::vector<std::string>;
  CHECK(read_python_options(V{"-u", "-m", "memray", "run", "app.py"}).module == "memray");
  CHECK(read_python_options(V{"-OOmgunicorn.app.wsgiapp"}).module == "gunicorn.app.wsgiapp");
  CHECK(read_python_options(V{"app.py", "-m", "memray"}).module.empty());  // the script's own words
  CHECK(read_python_options(V{"-c", "x", "-m", "memray"}).module.empty());
}

TEST_CASE("memray captures: memray.PID.bin, and memray.PID.bin.CHILD for a forked child") {
  CHECK(memray_capture_name(42) == "memray.42.bin");
  CHECK(memray_capture_pid("memray.42.bin") == 42);
  CHECK(memray_capture_pid("memray.42.bin.4711") == 4711);
  CHECK(memray_capture_pid("memray.42.2.bin") == 42);  // a second start in pid 42
  CHECK(memray_capture_pid("memray.42.2.bin.4711") == 4711);
  CHECK(memray_capture_pid("memray.42.x.bin") == -1);
  CHECK(memray_capture_pid("memray.42..bin") == -1);
  CHECK(memray_capture_pid("memray.42.2.3.bin") == -1);
  CHECK(memray_capture_pid("memray.42.bin.x") == -1);
  CHECK(memray_capture_pid("memray..bin") == -1);
  CHECK(memray_capture_pid("memray.42.bin.") == -1);
  CHECK(memray_capture_pid("capture.bin") == -1);
  CHECK(is_profile_file(Backend::Memray, "memray.42.bin.4711"));
  CHECK_FALSE(is_profile_file(Backend::Memray, "heaptrack.42.raw"));
  CHECK(profile_file_pid(Backend::Memray, "memray.42.bin") == 42);
  CHECK(parse_backend("memray") == Backend::Memray);
  CHECK(dormant_unsupported(Backend::Memray).empty());  // the bootstrap starts memray's tracker later
}

TEST_CASE("find_memray: a virtual environment's site-packages, and the base's only when it includes them") {
  Scratch s;
  python_root(s, {});  // the base has no memray
  testing::write_file(s / ("venv/lib/python3.13/site-packages/memray/" + x86_ext("313")), "x", 0644);
  testing::write_file(s / "venv/pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = false\n", 0644);
  HostTree tree(s.path());
  auto elf = tree.elf("/usr/bin/python3.13");
  REQUIRE(elf);
  MemrayFound found;
  CHECK(find_memray(tree, "/venv/bin/python", "/usr/bin/python3.13", *elf, "", &found).empty());
  CHECK(found.package == "/venv/lib/python3.13/site-packages/memray");
  bool with_base = true;
  CHECK(venv_dirs(tree, "/venv/bin/python", {3, 13, ""}, &with_base) ==
        std::vector<std::string>{"/venv/lib/python3.13/site-packages"});
  CHECK_FALSE(with_base);
  // The same interpreter outside the venv does not see it.
  MemrayFound outside;
  auto f = find_memray(tree, "/usr/bin/python3", "/usr/bin/python3.13", *elf, "", &outside);
  REQUIRE(f.size() == 1);
  CHECK(f[0].code == "MEMRAY_MISSING");
  testing::write_file(s / "venv/pyvenv.cfg", "Include-System-Site-Packages = True\r\n", 0644);
  CHECK_FALSE(venv_dirs(tree, "/venv/bin/python", {3, 13, ""}, &with_base).empty());
  CHECK(with_base);
}

TEST_CASE("find_memray: a venv made with --copies, its interpreter a copy named python: pyvenv.cfg's version") {
  Scratch s;
  python_root(s, {"__init__.py", x86_ext("313")});
  testing::write_file(s / "venv/bin/python", testing::ElfBuilder().build(), 0755);
  testing::write_file(s / "venv/pyvenv.cfg",
                      "home = /usr/bin\ninclude-system-site-packages = true\nversion = 3.13.5\n", 0644);
  HostTree tree(s.path());
  auto elf = tree.elf("/venv/bin/python");
  REQUIRE(elf);
  CHECK(to_string(*venv_version(tree, "/venv/bin/python")) == "3.13");
  MemrayFound found;
  CHECK(find_memray(tree, "/venv/bin/python", "/venv/bin/python", *elf, "", &found).empty());
  CHECK(found.extension == "/usr/lib/python3/dist-packages/memray/" + x86_ext("313"));
  // executable = names the base's build: a free-threaded one is 3.13t.
  testing::write_file(s / "venv/pyvenv.cfg", "version = 3.13.5\nexecutable = /usr/bin/python3.13t\n", 0644);
  CHECK(to_string(*venv_version(tree, "/venv/bin/python")) == "3.13t");
  CHECK_FALSE(venv_version(tree, "/usr/bin/python3"));
  testing::write_file(s / "venv/pyvenv.cfg", "home = /usr/bin\nversion_info = 3.12.8.final.0\n", 0644);  // virtualenv's
  CHECK(to_string(*venv_version(tree, "/venv/bin/python")) == "3.12");
  bool with_base = false;
  venv_dirs(tree, "/venv/bin/python", {3, 12, ""}, &with_base);
  CHECK(with_base);  // no include-system-site-packages line: site.py's default, true
}

TEST_CASE("python_user_base: PYTHONUSERBASE, else HOME/.local; off with -s, -I or PYTHONNOUSERSITE") {
  using V = std::vector<std::string>;
  CHECK(python_user_base(V{"app.py"}, "", "", "/home/app") == "/home/app/.local");
  CHECK(python_user_base(V{}, "", "/opt/base", "/home/app") == "/opt/base");
  CHECK(python_user_base(V{"-s", "app.py"}, "", "", "/home/app").empty());
  CHECK(python_user_base(V{"-I", "app.py"}, "", "", "/home/app").empty());
  CHECK(python_user_base(V{}, "1", "", "/home/app").empty());
  CHECK(python_user_base(V{}, "", "", "").empty());
  CHECK(python_user_base(V{}, "", "", "/") == "/.local");
}

TEST_CASE("find_memray: the user's site-packages comes before Debian's, and a venv without the system's leaves it out") {
  Scratch s;
  python_root(s, {"__init__.py", x86_ext("313")});
  testing::write_file(s / ("home/app/.local/lib/python3.13/site-packages/memray/" + x86_ext("311")), "x", 0644);
  MemrayFound found;
  HostTree tree(s.path());
  auto elf = tree.elf("/usr/bin/python3.13");
  REQUIRE(elf);
  auto problems = find_memray(tree, "/usr/bin/python3", "/usr/bin/python3.13", *elf, "", &found, "/home/app/.local");
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].code == "MEMRAY_WRONG_PYTHON");  // the user's, first, is for 3.11
  MemrayFound off;
  CHECK(find_memray(tree, "/usr/bin/python3", "/usr/bin/python3.13", *elf, "", &off, "").empty());
  CHECK(off.package == "/usr/lib/python3/dist-packages/memray");
}

TEST_CASE("python_install: where pip puts a package, and the headers a source build uses") {
  Scratch s;
  // Debian's python (prefix /usr, Debian's dist-packages): /usr/local's
  // dist-packages; its headers only when python3.13-dev put them there.
  python_root(s, {});
  testing::write_file(s / "usr/lib/python3/dist-packages/.keep", "", 0644);
  HostTree tree(s.path());
  auto debian = python_install(tree, "/usr/bin/python3.13", "/usr/bin/python3", {3, 13, ""});
  CHECK(debian.site_packages == "/usr/local/lib/python3.13/dist-packages");
  // python3.11-minimal alone (no dist-packages yet): its /etc/python3.11
  // says it is Debian's all the same.
  testing::write_file(s / "usr/bin/python3.11", testing::ElfBuilder().build(), 0755);
  testing::write_file(s / "etc/python3.11/sitecustomize.py", "", 0644);
  auto minimal = python_install(tree, "/usr/bin/python3.11", "/usr/bin/python3.11", {3, 11, ""});
  CHECK(minimal.site_packages == "/usr/local/lib/python3.11/dist-packages");
  CHECK(debian.include_dir == "/usr/include/python3.13");
  CHECK_FALSE(debian.headers);
  // A python: image's own build in /usr/local: its prefix's site-packages
  // and include/python3.12, here with Python.h; a free-threaded one's dirs
  // carry its flag.
  testing::write_file(s / "usr/local/bin/python3.12", testing::ElfBuilder().build(), 0755);
  testing::write_file(s / "usr/local/include/python3.12/Python.h", "/* */", 0644);
  auto local = python_install(tree, "/usr/local/bin/python3.12", "/usr/local/bin/python3", {3, 12, ""});
  CHECK(local.site_packages == "/usr/local/lib/python3.12/site-packages");
  CHECK(local.include_dir == "/usr/local/include/python3.12");
  CHECK(local.headers);
  auto ft = python_install(tree, "/opt/py/bin/python3.13t", "/opt/py/bin/python3.13t", {3, 13, "t"});
  CHECK(ft.site_packages == "/opt/py/lib/python3.13t/site-packages");
  CHECK(ft.include_dir == "/opt/py/include/python3.13t");
  // A venv: its own site-packages, whichever interpreter it was made from.
  testing::write_file(s / "venv/pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = false\n", 0644);
  testing::write_file(s / "venv/bin/python", testing::ElfBuilder().build(), 0755);
  auto venv = python_install(tree, "/usr/bin/python3.13", "/venv/bin/python", {3, 13, ""});
  CHECK(venv.site_packages == "/venv/lib/python3.13/site-packages");
  CHECK(venv.include_dir == "/usr/include/python3.13");
}

TEST_CASE("an image's venv: its pyvenv.cfg is kept from the layer, so the venv is seen as in a root") {
  // Only a script's head of most files is kept; a venv's config whole.
  std::string tar = testing::TarWriter()
                        .add("usr/bin/python3.11", testing::ElfBuilder().build(), '0', 0755)
                        .add("opt/venv/pyvenv.cfg",
                             "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.2\n"
                             "executable = /usr/bin/python3.11\ncommand = /usr/bin/python3 -m venv --without-pip "
                             "/opt/venv\n# " + std::string(300, 'x') + "\n")
                        .add("opt/venv/bin/python", "", '2', 0777, "/usr/bin/python3.11")
                        .finish();
  ImageTree tree;
  tree.apply(testing::summarize(tar));
  bool with_base = true;
  CHECK(venv_dirs(tree, "/opt/venv/bin/python", {3, 11, ""}, &with_base) ==
        std::vector<std::string>{"/opt/venv/lib/python3.11/site-packages"});
  CHECK_FALSE(with_base);
  auto in = python_install(tree, "/usr/bin/python3.11", "/opt/venv/bin/python", {3, 11, ""});
  CHECK(in.site_packages == "/opt/venv/lib/python3.11/site-packages");
  CHECK(in.include_dir == "/usr/include/python3.11");
}
