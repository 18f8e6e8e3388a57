// Writing files that survive a crash: write, fsync, and fsync the directory after a rename.
#pragma once
#include <cstddef>
#include <string>

namespace spmd {

// Creates/overwrites `path` with the bytes, then fsyncs it. RuntimeError naming the path on failure.
void write_file_durably(const std::string& path, const void* data, size_t size);
void write_file_durably(const std::string& path, const std::string& contents);
// fsync a directory so that renames and creations inside it are durable.
void fsync_directory(const std::string& path);

}  // namespace spmd
