// Reading a file someone else may have put there (a cache entry of a shared layer, a model's
// config.json): only a regular file of bounded size, opened without blocking, so that a FIFO, a device
// (/dev/zero) or a directory at the path is rejected rather than waited on or read without end.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace chordrt {

enum class ReadResult { kMissing, kRead, kRejected };

// Reads the whole file into `out`; for kRejected, `problem` says why (naming the file's name).
ReadResult read_regular_file(const std::filesystem::path& path, std::string& out, uint64_t max_bytes,
                             std::string& problem);

}  // namespace chordrt
