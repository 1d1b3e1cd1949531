#pragma once
// Files that are either wholly old or wholly new on disk, whatever kills the writer: the bytes go
// to a temporary name in the target's directory, are fsynced, and the temporary is renamed over
// the target (rename is atomic within a file system); the directory is fsynced so the rename
// itself survives a power loss. Checkpoints are built from these.
#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tandem {

// Carries the path and the system's errno text.
class FileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One atomic replacement of `target`. Bytes written go to a temporary file beside it (named
// ".<target name>.tmp-<pid>-<n>", so concurrent writers in one directory never collide);
// commit() makes them the target. Destroyed without commit() (an exception on the way), it
// removes the temporary and leaves the target as it was. A process killed before commit()
// returns can leave the temporary behind, never a partial target.
class AtomicFile {
 public:
  // Creates the temporary; throws FileError naming it (directory missing, not writable).
  explicit AtomicFile(std::filesystem::path target);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends; retries short writes and EINTR. Throws FileError (disk full, I/O error).
  void write(std::span<const std::byte> bytes);
  void write(std::string_view text);
  // fsync, close, rename over the target, fsync the directory. Throws FileError; the
  // temporary is gone either way.
  void commit();

  const std::filesystem::path& target() const { return target_; }
  const std::filesystem::path& temporary() const { return temporary_; }
  std::size_t bytes_written() const { return written_; }

 private:
  void discard() noexcept;

  std::filesystem::path target_;
  std::filesystem::path temporary_;
  int fd_ = -1;
  std::size_t written_ = 0;
};

// Writes the whole file atomically (one AtomicFile).
void write_file_atomically(const std::filesystem::path& target, std::span<const std::byte> bytes);
void write_file_atomically(const std::filesystem::path& target, std::string_view text);

// fsync of a directory, so entries created or renamed in it are durable. Throws FileError.
void fsync_directory(const std::filesystem::path& dir);

// Points in an atomic write where a test can stop the writer (kill tests): after each write()
// into the temporary, after the temporary is fsynced but before the rename, and after the
// rename and the directory's fsync.
enum class AtomicWritePoint { wrote_bytes, before_rename, after_rename };
// Called at those points with the target. Tests only: one process-wide hook, not thread-safe
// to change while writes run; an empty function removes it.
void set_atomic_write_hook_for_testing(
    std::function<void(const std::filesystem::path& target, AtomicWritePoint point)> hook);

}  // namespace tandem
