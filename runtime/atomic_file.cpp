#include "runtime/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

namespace tandem {
namespace {

std::function<void(const std::filesystem::path&, AtomicWritePoint)>& hook() {
  static std::function<void(const std::filesystem::path&, AtomicWritePoint)> h;
  return h;
}

void notify(const std::filesystem::path& target, AtomicWritePoint point) {
  if (hook()) hook()(target, point);
}

[[noreturn]] void fail(const std::string& what, const std::filesystem::path& path, int error) {
  throw FileError(what + " '" + path.string() + "': " + std::strerror(error));
}

std::filesystem::path directory_of(const std::filesystem::path& target) {
  const std::filesystem::path parent = target.parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}

void close_or_throw(int fd, const std::filesystem::path& path) {
  // POSIX leaves the descriptor's state after a failed close unspecified; Linux always frees
  // it, so it is never retried.
  if (::close(fd) != 0) fail("cannot close", path, errno);
}

}  // namespace

AtomicFile::AtomicFile(std::filesystem::path target) : target_(std::move(target)) {
  if (target_.filename().empty()) {
    throw FileError("cannot write '" + target_.string() + "': not a file name");
  }
  static std::atomic<unsigned long> counter{0};
  // Appended piecewise: GCC 12 at -O3 reports a false -Wrestrict on `"." + std::string`.
  std::string name = ".";
  name += target_.filename().string();
  name += ".tmp-";
  name += std::to_string(::getpid());
  name += '-';
  name += std::to_string(counter++);
  temporary_ = directory_of(target_) / name;
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create temporary file", temporary_, errno);
}

AtomicFile::~AtomicFile() {
  discard();
}

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
    ::unlink(temporary_.c_str());
  }
}

void AtomicFile::write(std::span<const std::byte> bytes) {
  if (fd_ < 0) throw FileError("write to '" + target_.string() + "' after commit");
  const std::byte* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", temporary_, errno);
    }
    p += n;
    left -= static_cast<std::size_t>(n);
    written_ += static_cast<std::size_t>(n);
  }
  notify(target_, AtomicWritePoint::wrote_bytes);
}

void AtomicFile::write(std::string_view text) {
  write(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

void AtomicFile::commit() {
  if (fd_ < 0) throw FileError("commit of '" + target_.string() + "' twice");
  if (::fsync(fd_) != 0) {
    const int error = errno;
    discard();
    fail("cannot fsync", temporary_, error);
  }
  const int fd = std::exchange(fd_, -1);
  try {
    close_or_throw(fd, temporary_);
    notify(target_, AtomicWritePoint::before_rename);
    if (::rename(temporary_.c_str(), target_.c_str()) != 0) {
      fail("cannot rename '" + temporary_.string() + "' to", target_, errno);
    }
  } catch (...) {
    ::unlink(temporary_.c_str());
    throw;
  }
  fsync_directory(directory_of(target_));
  notify(target_, AtomicWritePoint::after_rename);
}

void write_file_atomically(const std::filesystem::path& target, std::span<const std::byte> bytes) {
  AtomicFile file(target);
  file.write(bytes);
  file.commit();
}

void write_file_atomically(const std::filesystem::path& target, std::string_view text) {
  AtomicFile file(target);
  file.write(text);
  file.commit();
}

void fsync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("cannot open directory", dir, errno);
  if (::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    fail("cannot fsync directory", dir, error);
  }
  close_or_throw(fd, dir);
}

void set_atomic_write_hook_for_testing(
    std::function<void(const std::filesystem::path& target, AtomicWritePoint point)> h) {
  hook() = std::move(h);
}

}  // namespace tandem
