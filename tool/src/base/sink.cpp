#include "base/sink.h"

#include "base/stream.h"

namespace memprofile {

void FileSink::write(const std::string& bytes) { write_whole_file(path_, bytes); }

// As report always printed: a reader that went away (a pipe closed early)
// is no error of the report's.
void StreamSink::write(const std::string& bytes) {
  out_ << bytes;
  out_.flush();
}

}  // namespace memprofile
