// `memprofile check FILE... [--root DIR] [--preload LIB] [--json]`: judge
// ELF files (verdict/checker.cpp) one by one, or every file of a root, in
// parallel batches printed in order.
#include "base/json_text.h"
#include "cli/commands.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <iostream>
#include <memory>

#include "verdict/checker.h"
#include "base/error.h"
#include "base/parallel.h"
#include "image/file_tree.h"
#include "verdict/render.h"

namespace memprofile {

namespace {

struct CheckOptions {
  std::vector<std::string> files;
  std::string root;     // "" = judge each file on its own
  std::string preload;  // "" = no preload library to check
  std::string ld_library_path;
  bool json = false;
  unsigned jobs = 0;  // 0 = one per core
};


std::string current_dir() {
  char buf[PATH_MAX];
  if (!getcwd(buf, sizeof buf)) throw Error(std::string("cannot get the current directory: ") + std::strerror(errno));
  return buf;
}

// Maps a command-line path to a path inside the tree. Absolute paths are
// taken inside the root (as the container sees them) unless they name the
// root directory itself on the host; relative ones are host paths and must
// lie under the root directory.
std::string tree_path(const std::string& arg, const std::string& root, const std::string& cwd) {
  if (root.empty()) return arg.empty() || arg[0] == '/' ? arg : cwd + "/" + arg;
  bool absolute = !arg.empty() && arg[0] == '/';
  std::string host = normalize_path(absolute ? arg : cwd + "/" + arg);
  std::vector<std::string> roots{normalize_path(root[0] == '/' ? root : cwd + "/" + root)};
  if (char* real = realpath(root.c_str(), nullptr)) {
    roots.push_back(real);
    free(real);
  }
  for (const auto& r : roots) {
    if (host == r) return "/";
    if (r == "/") return host;
    if (host.compare(0, r.size() + 1, r + "/") == 0) return host.substr(r.size());
  }
  if (absolute) return arg;
  throw FileError(arg, "is outside --root " + root + "; name it as the container sees it (e.g. /usr/bin/app)");
}

// What a non-ELF file is, for the error message.
std::string describe_non_elf(const FileTree& tree, const std::string& path) {
  auto head = tree.read(path, 256);
  if (!head || head->empty()) return "empty file";
  if (head->rfind("#!", 0) == 0) {
    std::string line = head->substr(2, head->find('\n') == std::string::npos ? std::string::npos : head->find('\n') - 2);
    size_t b = line.find_first_not_of(" \t");
    line = b == std::string::npos ? "" : line.substr(b);
    return "not an ELF file: a script run by '" + line + "'; check that interpreter instead";
  }
  if (head->rfind("!<arch>", 0) == 0) return "not an ELF file: an ar archive (static library)";
  return "not an ELF file";
}

struct Outcome {
  enum class Kind { Pending, NotElf, Checked, Failed } kind = Kind::Pending;
  std::optional<FileVerdict> report;
  std::string error;
};

// Files judged in batches, in parallel within a batch and printed in order,
// so a scan of a whole tree runs in bounded memory.
class BatchScan {
 public:
  BatchScan(const HostTree& tree, const Checker& checker, const CheckOptions& opts)
      : tree_(tree), checker_(checker), opts_(opts), jobs_(worker_count(opts.jobs)),
        color_(!opts.json && isatty(STDOUT_FILENO)) {}

  void add(const std::string& path, bool explicit_arg) {
    batch_.emplace_back(path, explicit_arg);
    if (batch_.size() >= kBatch) flush();
  }

  void flush() {
    judge();
    print();
    batch_.clear();
  }

  // "N ELF files checked: ..." for a scan of several files.
  void summary(std::ostream& out, size_t files) const {
    if (files <= 1 && not_elf_ == 0) return;
    out << "memprofile: " << checked_ << " ELF file" << (checked_ == 1 ? "" : "s") << " checked: " << good_
        << " profilable, " << checked_ - good_ << " not";
    if (not_elf_) out << "; " << not_elf_ << " non-ELF file" << (not_elf_ == 1 ? "" : "s") << " skipped";
    if (failed_) out << "; " << failed_ << " unreadable";
    out << "\n";
  }

  bool failed() const { return failed_ > 0; }
  bool all_good() const { return good_ == checked_; }

 private:
  static constexpr size_t kBatch = 2048;

  // Each file's error is its own outcome: one bad file stops nothing.
  void judge() {
    out_.assign(batch_.size(), Outcome{});
    unsigned n = static_cast<unsigned>(std::min<size_t>(jobs_, batch_.size() / 64 + 1));
    parallel_for(batch_.size(), n, [&](size_t i) { out_[i] = judge_one(batch_[i].first, batch_[i].second); });
  }

  Outcome judge_one(const std::string& path, bool explicit_arg) const {
    Outcome o;
    try {
      auto elf = tree_.elf_once(path);
      if (!elf) {
        if (explicit_arg) throw FileError(tree_.display(path), describe_non_elf(tree_, path));
        o.kind = Outcome::Kind::NotElf;
        return o;
      }
      o.report = checker_.check(path, elf);
      o.kind = Outcome::Kind::Checked;
    } catch (const Error& e) {
      o.kind = Outcome::Kind::Failed;
      o.error = e.what();
    } catch (const std::bad_alloc&) {
      o.kind = Outcome::Kind::Failed;
      o.error = tree_.display(path) + ": out of memory";
    }
    return o;
  }

  void print() {
    for (const auto& o : out_) {
      switch (o.kind) {
        case Outcome::Kind::NotElf:
          ++not_elf_;
          break;
        case Outcome::Kind::Failed:
          ++failed_;
          std::cerr << "memprofile: " << o.error << "\n";
          break;
        case Outcome::Kind::Checked:
          ++checked_;
          good_ += o.report->profilable();
          if (opts_.json)
            std::cout << json_text(to_json(*o.report)) << "\n";
          else
            print_human(std::cout, *o.report, color_);
          break;
        case Outcome::Kind::Pending:
          break;
      }
    }
  }

  const HostTree& tree_;
  const Checker& checker_;
  const CheckOptions& opts_;
  const unsigned jobs_;
  const bool color_;
  std::vector<std::pair<std::string, bool>> batch_;  // canonical path, named on the command line
  std::vector<Outcome> out_;
  size_t checked_ = 0, good_ = 0, not_elf_ = 0, failed_ = 0;
};

// One command-line argument into the scan: a file, or a directory's every
// file, each counted in `files` as it is added.
void add_argument(BatchScan& scan, const HostTree& tree, const std::string& arg, const CheckOptions& opts,
                  const std::string& cwd, size_t& files) {
  std::string p = tree_path(arg, opts.root, cwd);
  auto r = resolve(tree, p);
  if (!r) throw FileError(arg, "no such file or directory" + (opts.root.empty() ? "" : " in " + opts.root));
  if (r->node.kind == FsNode::Kind::Directory) {
    tree.walk(r->path, [&](const std::string& f) {
      ++files;
      scan.add(f, false);
    });
  } else if (r->node.kind == FsNode::Kind::Regular) {
    ++files;
    scan.add(r->path, true);
  } else {
    throw FileError(arg, "not a regular file or directory");
  }
}

ExitCode run_check(const CheckOptions& opts) {
  const std::string cwd = current_dir();
  HostTree tree(opts.root.empty() ? "/" : opts.root);
  CheckerOptions co;
  co.use_root = !opts.root.empty();
  co.ld_library_path = opts.ld_library_path;
  if (!opts.preload.empty()) co.preload = tree_path(opts.preload, opts.root, cwd);
  co.judge_default_backend = opts.preload.empty();
  Checker checker(tree, co);
  BatchScan scan(tree, checker, opts);
  bool arg_error = false;
  size_t files = 0;
  for (const auto& arg : opts.files) {
    try {
      add_argument(scan, tree, arg, opts, cwd, files);
    } catch (const Error& e) {
      std::cout.flush();
      std::cerr << "memprofile: " << e.what() << "\n";
      arg_error = true;
    }
  }
  scan.flush();
  scan.summary(opts.json ? std::cerr : std::cout, files);
  std::cout.flush();
  if (arg_error || scan.failed()) return ExitCode::InputError;
  return scan.all_good() ? ExitCode::Ok : ExitCode::NotProfilable;
}

}  // namespace

void setup_check(CLI::App& app, ExitCode& exit_code) {
  auto opts = std::make_shared<CheckOptions>();
  CLI::App* cmd = app.add_subcommand(
      "check", "Say, from the ELF file itself, whether an LD_PRELOAD heap profiler can attach to it, and why not");
  cmd->add_option("files", opts->files, "ELF files or directories (scanned recursively)")->required();
  cmd->add_option("--root", opts->root,
                  "judge the files against this root filesystem: resolve the loader, libraries and glibc "
                  "versions inside it (absolute FILE paths are taken inside the root)");
  cmd->add_option("--preload", opts->preload,
                  "also check this preload library against each file (inside --root when given)");
  cmd->add_option("--ld-library-path", opts->ld_library_path, "LD_LIBRARY_PATH the program would run with");
  cmd->add_flag("--json", opts->json, "print one JSON object per file (JSON Lines) instead of the report");
  cmd->add_option("-j,--jobs", opts->jobs, "parallel workers for directory scans (default: one per core)");
  cmd->callback([opts, &exit_code] { exit_code = run_check(*opts); });
}

}  // namespace memprofile
