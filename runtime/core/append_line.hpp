// Appending one line to a log that several processes may write at once (CHORD_RECORD_MISSES,
// CHORD_LAUNCH_LOG): the file is opened with O_APPEND and the line goes out in one write(), so lines of
// different processes never interleave.
#pragma once

#include <string>
#include <string_view>

namespace chordrt {

// Appends `line` and a newline to `path` (created with mode 0644). False, with errno set, when it cannot.
bool append_line(const std::string& path, std::string_view line);

}  // namespace chordrt
