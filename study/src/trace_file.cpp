// A trace's output file: plain, or gzip through zlib when the name ends in .gz.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <ostream>
#include <streambuf>
#include <vector>

#include "strata/model/atomic_file.h"
#include "strata/model/block_streambuf.h"
#include "strata/model/error.h"
#include "strata/study/trace.h"

namespace strata {

namespace {

// Level 1: a JSON trace compresses about 10x at it, at several times the speed
// of the default level 6, which gains only a little more on this text.
constexpr const char* kGzipMode = "wb1";
constexpr size_t kBuffer = size_t{1} << 18;

// A streambuf that deflates what is written into a gzip file.
class GzipBuffer : public BlockStreambuf {
 public:
  explicit GzipBuffer(gzFile file) : BlockStreambuf(kBuffer), file_(file) {
    gzbuffer(file_, static_cast<unsigned>(kBuffer));
  }
  ~GzipBuffer() override {
    if (file_ != nullptr)
      gzclose(file_);
  }

  // Flushes and closes; false when a write or the close failed.
  bool close() {
    const bool drained = drain();
    const int rc = gzclose(file_);
    file_ = nullptr;
    return drained && rc == Z_OK;
  }

 protected:
  bool put(const char* p, size_t n) override {
    if (file_ == nullptr)
      return false;
    while (n > 0) {
      const auto chunk = static_cast<unsigned>(std::min<size_t>(n, size_t{1} << 30));
      const int written = gzwrite(file_, p, chunk);
      if (written <= 0)
        return false;
      p += written;
      n -= static_cast<size_t>(written);
    }
    return true;
  }

 private:
  gzFile file_;
};

bool endsWith(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

struct TraceFile::Impl {
  std::string option;
  bool gzip = false;
  std::unique_ptr<AtomicFile> file;
  std::unique_ptr<GzipBuffer> gz;
  std::ostream stream{nullptr};
  bool finished = false;
};

TraceFile::TraceFile(const std::string& path, std::string option) : impl_(new Impl) {
  impl_->option = std::move(option);
  impl_->gzip = endsWith(path, ".gz") || endsWith(path, ".GZ");
  impl_->file = std::make_unique<AtomicFile>(path, impl_->option);
  if (!impl_->gzip) {
    impl_->stream.rdbuf(impl_->file->stream().rdbuf());
    return;
  }
  // zlib writes the temporary file through a descriptor of its own (gzclose
  // closes it); the AtomicFile keeps its own for fsync and the rename.
  const int fd = ::dup(impl_->file->fd());
  gzFile f = fd < 0 ? nullptr : gzdopen(fd, kGzipMode);
  if (f == nullptr) {
    if (fd >= 0)
      ::close(fd);
    impl_->file->fail("gzdopen failed");
  }
  impl_->gz = std::make_unique<GzipBuffer>(f);
  impl_->stream.rdbuf(impl_->gz.get());
}

TraceFile::~TraceFile() {
  // Without finish(): the AtomicFile removes its temporary file only.
  impl_->stream.rdbuf(nullptr);
  impl_->gz.reset();
}

std::ostream& TraceFile::stream() {
  return impl_->stream;
}
bool TraceFile::compressed() const {
  return impl_->gzip;
}
const std::string& TraceFile::path() const {
  return impl_->file->path();
}

void TraceFile::finish() {
  if (impl_->finished)
    return;
  errno = 0;
  bool ok = static_cast<bool>(impl_->stream.flush());
  impl_->stream.rdbuf(nullptr);
  if (impl_->gzip) {
    const int error = errno;
    ok = impl_->gz->close() && ok;
    if (!ok)
      impl_->file->fail(errnoText(errno != 0 ? errno : error != 0 ? error : EIO));
  }
  impl_->file->commit();  // a failed plain write: its reason, from the AtomicFile
  impl_->finished = true;
}

}  // namespace strata
