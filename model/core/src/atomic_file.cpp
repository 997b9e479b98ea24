// AtomicFile: an output file written beside its target and renamed into place.
#include "strata/model/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <streambuf>
#include <vector>

#include "strata/model/block_streambuf.h"
#include "strata/model/error.h"

namespace strata {

namespace {

// ---- temporary files to remove on a signal --------------------------------
// A fixed table of the paths of the temporary files not yet committed: a
// signal handler may read it (atomic loads of pointers to strings that stay
// alive while registered) and unlink(2) each. A process has a handful of open
// outputs; past the table's size a file is only not removed on a signal.
constexpr size_t kSlots = 64;
std::array<std::atomic<const char*>, kSlots> gTemporaries{};

int registerTemporary(const char* path) {
  for (size_t i = 0; i < kSlots; ++i) {
    const char* expected = nullptr;
    if (gTemporaries[i].compare_exchange_strong(expected, path))
      return static_cast<int>(i);
  }
  return -1;
}

void unregisterTemporary(int slot) {
  if (slot >= 0)
    gTemporaries[static_cast<size_t>(slot)].store(nullptr);
}

extern "C" void onEndingSignal(int signal) {
  removeTemporaryFilesNow();
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

// ---- a streambuf onto a file descriptor -----------------------------------
// std::ofstream cannot give its descriptor (for fsync) nor the errno of a
// failed write; this one keeps the first error.
class FdBuffer : public BlockStreambuf {
 public:
  explicit FdBuffer(int fd) : BlockStreambuf(size_t{1} << 16), fd_(fd) {}
  int error() const { return error_; }

 protected:
  bool put(const char* p, size_t n) override {
    if (error_ != 0)
      return false;
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0) {
        error_ = w < 0 ? errno : EIO;
        return false;
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }

 private:
  int fd_;
  int error_ = 0;
};

std::string folderOf(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string nameOf(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// What a path that is not a regular file is, in words.
const char* kindOf(mode_t mode) {
  if (S_ISDIR(mode))
    return "a folder";
  if (S_ISCHR(mode) || S_ISBLK(mode))
    return "a device";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a regular file";
}

// The file a symbolic link points to (the target is replaced, not the link);
// any other path as given.
std::string followLink(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode))
    return path;
  char* real = ::realpath(path.c_str(), nullptr);
  if (real == nullptr)
    return path;  // a dangling link: the write makes a file in its place
  std::string out(real);
  std::free(real);
  return out;
}

// Errors of open(2)/mkstemp(3) that say the place is wrong, not the system.
bool placeMistake(int error) {
  return error == ENOENT || error == ENOTDIR || error == EACCES || error == EPERM ||
         error == EROFS || error == EISDIR || error == ENAMETOOLONG || error == ELOOP;
}

// Flushes the folder's entry of a renamed file. Best effort: the rename is
// done and the file whole either way; some file systems refuse fsync on a
// folder.
void syncFolder(const std::string& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return;
  (void)::fsync(fd);
  ::close(fd);
}

}  // namespace

std::string errnoText(int error) {
  char buffer[256] = {};
  // GNU strerror_r returns the text (maybe not in buffer), XSI's fills buffer.
  struct Text {
    static std::string of(const char* text, const char*) { return text; }
    static std::string of(int rc, const char* buffer) { return rc == 0 ? buffer : "unknown error"; }
  };
  return Text::of(strerror_r(error, buffer, sizeof buffer), buffer);
}

void checkOutputFile(const std::string& path, const std::string& option) {
  if (path.empty())
    throw OptionError(option, "empty file name");
  const std::string target = followLink(path);
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      throw OptionError(option, "'" + path + "' exists and is " + kindOf(st.st_mode) +
                                    ", not a regular file: strata writes its outputs whole "
                                    "and renames them into place; give a file name");
    return;
  }
  const int error = errno;
  if (error != ENOENT)
    throw OptionError(option, "cannot write '" + path + "': " + errnoText(error));
  const std::string folder = folderOf(target);
  if (::stat(folder.c_str(), &st) != 0)
    throw OptionError(option,
                      "cannot write '" + path + "': folder '" + folder + "': " + errnoText(errno));
  if (!S_ISDIR(st.st_mode))
    throw OptionError(option, "cannot write '" + path + "': '" + folder + "' is not a folder");
}

struct AtomicFile::Impl {
  std::string path, option, temporary;
  int fd = -1;
  int slot = -1;
  bool committed = false;
  std::unique_ptr<FdBuffer> buffer;
  std::ostream stream{nullptr};

  void removeTemporary() {
    stream.rdbuf(nullptr);
    buffer.reset();
    if (fd >= 0)
      ::close(fd);
    fd = -1;
    if (!temporary.empty())
      ::unlink(temporary.c_str());
    unregisterTemporary(slot);
    slot = -1;
    temporary.clear();
  }
  [[noreturn]] void fail(int error, const std::string& reason) {
    removeTemporary();
    throw WriteError(option + ": cannot write '" + path +
                     "': " + (reason.empty() ? errnoText(error) : reason));
  }
};

AtomicFile::AtomicFile(std::string path, std::string option) : impl_(new Impl) {
  checkOutputFile(path, option);
  impl_->option = std::move(option);
  impl_->path = followLink(path);
  // A name of at most NAME_MAX (255): the target's name cut to 200.
  const std::string name = nameOf(impl_->path).substr(0, 200);
  // Registered before mkstemp(3) creates it: a signal that comes as the file
  // appears (on any thread) finds its name in the table. Registering after
  // left a window in which SIGINT left the file behind. Before mkstemp has
  // opened a name, unlink(2) of it finds nothing, unless another strata's
  // temporary took that very name (one chance in 62^6).
  impl_->temporary = folderOf(impl_->path) + "/." + name + ".strata-tmp.XXXXXX";
  impl_->slot = registerTemporary(impl_->temporary.c_str());
  const int fd = ::mkstemp(impl_->temporary.data());
  if (fd < 0) {
    const int error = errno;
    unregisterTemporary(impl_->slot);
    impl_->slot = -1;
    impl_->temporary.clear();
    const std::string why = "cannot write '" + impl_->path + "': cannot create a file in '" +
                            folderOf(impl_->path) + "': " + errnoText(error);
    if (placeMistake(error))
      throw OptionError(impl_->option, why);
    throw WriteError(impl_->option + ": " + why);
  }
  (void)::fcntl(fd, F_SETFD, FD_CLOEXEC);
  impl_->fd = fd;
  impl_->buffer = std::make_unique<FdBuffer>(fd);
  impl_->stream.rdbuf(impl_->buffer.get());
}

AtomicFile::~AtomicFile() {
  if (!impl_->committed)
    impl_->removeTemporary();
}

std::ostream& AtomicFile::stream() {
  return impl_->stream;
}
int AtomicFile::fd() const {
  return impl_->fd;
}
const std::string& AtomicFile::path() const {
  return impl_->path;
}
const std::string& AtomicFile::option() const {
  return impl_->option;
}

void AtomicFile::fail(const std::string& reason) {
  impl_->fail(impl_->buffer ? impl_->buffer->error() : 0, reason);
}

void AtomicFile::discard() {
  if (!impl_->committed)
    impl_->removeTemporary();
}

void AtomicFile::commit() {
  Impl& f = *impl_;
  STRATA_ENFORCE(!f.committed && f.fd >= 0);
  f.stream.flush();
  if (!f.stream || f.buffer->error() != 0)
    f.fail(f.buffer->error() != 0 ? f.buffer->error() : EIO, "");
  // The target's permissions, or a new file's (0666 less the umask: what
  // open(2) would have given it; mkstemp made it 0600).
  mode_t mode = 0;
  struct stat st {};
  if (::stat(f.path.c_str(), &st) == 0) {
    mode = st.st_mode & 07777;
  } else {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  if (::fchmod(f.fd, mode) != 0)
    f.fail(errno, "");
  if (::fsync(f.fd) != 0)
    f.fail(errno, "");
  const int fd = f.fd;
  f.fd = -1;
  if (::close(fd) != 0)
    f.fail(errno, "");
  if (::rename(f.temporary.c_str(), f.path.c_str()) != 0)
    f.fail(errno, "");
  unregisterTemporary(f.slot);
  f.slot = -1;
  f.temporary.clear();
  f.stream.rdbuf(nullptr);
  f.buffer.reset();
  f.committed = true;
  syncFolder(folderOf(f.path));
}

void writeFileAtomically(const std::string& path, std::string_view text,
                         const std::string& option) {
  AtomicFile file(path, option);
  file.stream().write(text.data(), static_cast<std::streamsize>(text.size()));
  file.commit();
}

void removeTemporaryFilesNow() {
  for (auto& slot : gTemporaries)
    if (const char* p = slot.load())
      ::unlink(p);
}

void removeTemporaryFilesOnSignals() {
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(signal, nullptr, &old) != 0 || old.sa_handler != SIG_DFL)
      continue;  // ignored (nohup, a background job) or someone else's: leave it
    struct sigaction a {};
    a.sa_handler = onEndingSignal;
    sigemptyset(&a.sa_mask);
    a.sa_flags = SA_RESETHAND;
    ::sigaction(signal, &a, nullptr);
  }
}

}  // namespace strata
