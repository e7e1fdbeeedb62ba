// Where an output's bytes go, apart from how they were made: the encoders
// (profile/'s pprof, SVG, text and JSON) give bytes, and a sink takes them
// to a file, a stream (standard output) or a buffer (an HTTP response's
// body). report's outputs are a list of (bytes, sink).
#pragma once

#include <ostream>
#include <string>

namespace memprofile {

class Sink {
 public:
  virtual ~Sink() = default;
  // Throws FileError naming the sink when the bytes cannot go there.
  virtual void write(const std::string& bytes) = 0;
  // For messages: the path, or what the stream is.
  virtual const std::string& name() const = 0;
};

// A file, created or replaced.
class FileSink : public Sink {
 public:
  explicit FileSink(std::string path) : path_(std::move(path)) {}
  void write(const std::string& bytes) override;
  const std::string& name() const override { return path_; }

 private:
  std::string path_;
};

// A stream the caller owns (std::cout), flushed after each write.
class StreamSink : public Sink {
 public:
  StreamSink(std::ostream& out, std::string name) : out_(out), name_(std::move(name)) {}
  void write(const std::string& bytes) override;
  const std::string& name() const override { return name_; }

 private:
  std::ostream& out_;
  std::string name_;
};

// Bytes kept for the caller to send (a response body).
class BufferSink : public Sink {
 public:
  explicit BufferSink(std::string name) : name_(std::move(name)) {}
  void write(const std::string& bytes) override { bytes_ += bytes; }
  const std::string& name() const override { return name_; }
  std::string take() { return std::move(bytes_); }

 private:
  std::string name_, bytes_;
};

}  // namespace memprofile
