// Memory that one image may take, and strings stored compactly.
//
// An image is untrusted input: a layer of a million tiny entries, or names
// a few kilobytes long, must not grow memprofile without bound. Everything
// kept per file (names, nodes, kept contents) is charged to one budget per
// run, and a run that would cross it stops with one clear line instead.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"

namespace memprofile {

// What the kept summary of one run may take: file names, tree nodes and
// kept contents of every layer. With the decoders' own buffers and the
// program itself this keeps a run under 64 MiB (docs/preflight.md, Limits).
constexpr uint64_t kDefaultMemoryBudget = 44ull << 20;

class MemoryBudget {
 public:
  explicit MemoryBudget(uint64_t limit = kDefaultMemoryBudget) : limit_(limit) {}
  // Takes `bytes` from the budget, or throws FileError naming `where` and
  // `what` needed them. Safe from several threads at once.
  void charge(uint64_t bytes, const std::string& where, const char* what) {
    uint64_t now = used_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    if (now > limit_) {
      used_.fetch_sub(bytes, std::memory_order_relaxed);
      throw FileError(where, std::string(what) + " need more than " + std::to_string(limit_ >> 20) +
                                 " MiB of memory (memprofile's limit for one run; docs/preflight.md, Limits)");
    }
  }
  void release(uint64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  uint64_t limit() const { return limit_; }

 private:
  uint64_t limit_;
  std::atomic<uint64_t> used_{0};
};

// Bytes held from a budget, given back when the holder goes. A copy holds
// its own share (it charges again), so a summary copied for a second use is
// never given back twice.
class Charge {
 public:
  Charge() = default;
  explicit Charge(std::shared_ptr<MemoryBudget> budget) : budget_(std::move(budget)) {}
  Charge(const Charge& o) : budget_(o.budget_) {
    if (budget_ && o.bytes_) budget_->charge(o.bytes_, "copy", "the layers' summaries");
    bytes_ = o.bytes_;
  }
  Charge(Charge&& o) noexcept : budget_(std::move(o.budget_)), bytes_(o.bytes_) { o.bytes_ = 0; }
  Charge& operator=(Charge o) noexcept {
    std::swap(budget_, o.budget_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~Charge() {
    if (budget_ && bytes_) budget_->release(bytes_);
  }
  void add(uint64_t bytes, const std::string& where, const char* what) {
    if (!budget_) return;
    budget_->charge(bytes, where, what);
    bytes_ += bytes;
  }
  void give_back(uint64_t bytes) {
    bytes = std::min(bytes, bytes_);
    if (budget_) budget_->release(bytes);
    bytes_ -= bytes;
  }
  uint64_t bytes() const { return bytes_; }

 private:
  std::shared_ptr<MemoryBudget> budget_;
  uint64_t bytes_ = 0;
};

// Strings stored back to back in blocks that never move, so a string_view
// into the arena stays valid as long as the arena lives. Images hold
// hundreds of thousands of paths: one std::string each would cost a heap
// block and 32 bytes on top of the characters.
class StringArena {
 public:
  std::string_view add(std::string_view s) {
    if (s.empty()) return {};
    if (s.size() > kBlock / 16) {  // a long string gets a block of its own
      blocks_.emplace_back(new char[s.size()]);
      bytes_ += s.size();
      std::memcpy(blocks_.back().get(), s.data(), s.size());
      return {blocks_.back().get(), s.size()};
    }
    if (!current_ || used_ + s.size() > block_) {
      // Blocks grow from 4 KiB: an image of hundreds of small layers must
      // not cost a large block per layer.
      if (current_) block_ = std::min(kBlock, block_ * 2);
      blocks_.emplace_back(new char[block_]);
      current_ = blocks_.back().get();
      used_ = 0;
      bytes_ += block_;
    }
    char* at = current_ + used_;
    std::memcpy(at, s.data(), s.size());
    used_ += s.size();
    return {at, s.size()};
  }
  // Bytes the arena holds from the heap.
  uint64_t bytes() const { return bytes_; }

 private:
  static constexpr size_t kBlock = 64 << 10;
  std::vector<std::unique_ptr<char[]>> blocks_;
  char* current_ = nullptr;
  size_t block_ = 4 << 10, used_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace memprofile
