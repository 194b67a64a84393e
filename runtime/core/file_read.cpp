#include "runtime/core/file_read.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace chordrt {

ReadResult read_regular_file(const std::filesystem::path& path, std::string& out, uint64_t max_bytes,
                             std::string& problem) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return ReadResult::kMissing;
    problem = fmt::format("{} cannot be opened ({})", path.filename().string(), std::strerror(errno));
    return ReadResult::kRejected;
  }
  struct stat st {};
  ReadResult result = ReadResult::kRead;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    problem = fmt::format("{} is not a regular file", path.filename().string());
    result = ReadResult::kRejected;
  } else if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    problem = fmt::format("{} is {} bytes, more than the {} allowed", path.filename().string(), st.st_size, max_bytes);
    result = ReadResult::kRejected;
  } else {
    out.assign(static_cast<size_t>(st.st_size), '\0');
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    out.resize(done);  // a file truncated meanwhile reads short; its checks fail on the content
  }
  ::close(fd);
  return result;
}

}  // namespace chordrt
