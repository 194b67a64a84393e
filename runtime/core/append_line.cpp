#include "runtime/core/append_line.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace chordrt {

bool append_line(const std::string& path, std::string_view line) {
  std::string text;
  text.reserve(line.size() + 1);
  text.append(line);
  text += '\n';
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int write_errno = errno;
  ::close(fd);
  if (n == static_cast<ssize_t>(text.size())) return true;
  // A short write to a regular file sets no errno: the disk is full.
  errno = n < 0 ? write_errno : ENOSPC;
  return false;
}

}  // namespace chordrt
