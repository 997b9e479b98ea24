// Writing an output file so that no failure destroys anything.
//
// Every file strata writes (traces, reports, CSV/JSON, cluster and profile
// YAML) goes first to a temporary file beside its target, in the same folder
// (".NAME.strata-tmp.XXXXXX", so one rename(2) moves it into place), and is
// renamed over the target only once it is complete, flushed and fsync'ed. A
// write that fails (a full disk), an exception on the way or an interrupt
// (SIGINT, SIGTERM) leaves the earlier file at the target as it was and no
// temporary file behind; nothing that existed before is ever removed. A
// target that exists and is not a regular file (a device such as /dev/full,
// a FIFO, a folder) is refused before any work: renaming over it would
// replace it, and writing into it is not a file the user can keep.
//
// Mistakes are typed as everywhere (model/error.h): a target that cannot be
// one (missing folder, not a regular file, a folder that refuses files) is an
// OptionError naming the option (exit 2); the operating system failing a
// write (ENOSPC, EIO, a quota) is a WriteError with its reason (exit 1).
#pragma once

#include <memory>
#include <ostream>
#include <string>
#include <string_view>

namespace strata {

// Refuses, before any work, a target that cannot be written whole: an empty
// name, a path that exists and is not a regular file (device, FIFO, folder),
// a path under something that is not a folder or under a missing folder.
// Throws OptionError naming `option` and the path. A symbolic link is
// followed: the file it points to is what is checked and later replaced.
void checkOutputFile(const std::string& path, const std::string& option);

// One output file, written to a temporary file beside `path` and renamed over
// it by commit(). Not thread-safe; one writer at a time.
class AtomicFile {
 public:
  // checkOutputFile(path, option), then creates the temporary file. Throws
  // OptionError when the folder refuses it (EACCES, EROFS, ...), WriteError
  // for other failures (ENOSPC, EMFILE, ...). The target is not touched.
  AtomicFile(std::string path, std::string option);
  // Without commit(): removes the temporary file (only that; never the
  // target, which keeps its earlier contents).
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // A buffered stream onto the temporary file; a failed write sets badbit
  // and commit() reports it with its reason.
  std::ostream& stream();
  // The temporary file's descriptor, for a writer of its own (zlib through
  // gzdopen on a dup()); such a writer closes its dup before commit().
  int fd() const;
  // The target (after following a symbolic link) and the option naming it.
  const std::string& path() const;
  const std::string& option() const;

  // Flushes stream(), fsyncs and closes the temporary file, gives it the
  // target's permissions (a new file: 0666 less the umask), renames it over
  // the target and syncs the folder. Throws WriteError "OPTION: cannot write
  // 'PATH': REASON" when any step fails; the temporary file is removed then
  // and the target is as it was. Calling it twice is an InvariantError.
  void commit();
  // Throws the WriteError commit() would for a write already failed, without
  // committing: for writers that check as they go. `reason` replaces
  // strerror when the failure is not the operating system's.
  [[noreturn]] void fail(const std::string& reason = "");
  // Removes the temporary file now (what the destructor does).
  void discard();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// `text` into `path` through an AtomicFile (errors as there).
void writeFileAtomically(const std::string& path, std::string_view text, const std::string& option);

// Removes the temporary file of every AtomicFile not yet committed or
// discarded in this process. Async-signal-safe (unlink(2) only): for signal
// handlers that end the process.
void removeTemporaryFilesNow();
// Installs handlers for SIGINT, SIGTERM and SIGHUP (each only where the
// signal's action is the default) that call removeTemporaryFilesNow() and then
// end the process by the same signal, as it would have ended without them.
// Call once, from main, before any thread starts.
void removeTemporaryFilesOnSignals();

// An errno value in words (strerror), without relying on the non-reentrant
// strerror buffer where another thread may be writing.
std::string errnoText(int error);

}  // namespace strata
