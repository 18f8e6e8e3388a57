// DirectFile writes exactly the bytes appended (O_DIRECT's padding truncated away), and whole
// blocks reach the file at every append, on the temp dir's filesystem and on tmpfs.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>

#include "skip.h"
#include "test_support.h"
#include "util/direct_file.h"
#include "util/error.h"

using spmd::test::read_file;
using spmd::test::TempDir;

namespace {
// Pieces of awkward sizes around the 4 KiB block and the 8 MiB buffer.
std::string write_pieces(const std::string& path, bool& direct) {
  std::mt19937 rng(7);
  std::string all;
  spmd::DirectFile file(path);
  direct = file.direct();
  for (size_t size : {size_t{1}, size_t{8}, size_t{4095}, size_t{4097}, size_t{9} << 20, size_t{3}, size_t{8} << 20,
                      size_t{12345}}) {
    std::string piece(size, '\0');
    for (auto& c : piece) c = static_cast<char>(rng());
    file.append(piece.data(), piece.size());
    all += piece;
    struct stat st {};
    REQUIRE(stat(path.c_str(), &st) == 0);
    CHECK(static_cast<size_t>(st.st_size) == all.size() / 4096 * 4096);  // every whole block, no more
  }
  file.finish();
  return all;
}
}  // namespace

TEST_CASE("direct file: the bytes appended, whole blocks written at every append") {
  TempDir dir;
  bool direct = false;
  const std::string expected = write_pieces(dir.file("shard"), direct);
  MESSAGE("O_DIRECT on " << dir.path() << ": " << std::string(direct ? "yes" : "no (page cache)"));
  CHECK(read_file(dir.file("shard")) == expected);
}

TEST_CASE("direct file: tmpfs gets the same bytes (through the page cache where it refuses O_DIRECT)") {
  if (!std::filesystem::is_directory("/dev/shm")) {
    SPMD_SKIP("no /dev/shm (tmpfs) on this machine");
  }
  const std::string path = "/dev/shm/spmd-direct-file-test-" + std::to_string(::getpid());
  bool direct = false;
  const std::string expected = write_pieces(path, direct);
  // Linux 6.6 and later take O_DIRECT on tmpfs; earlier kernels refuse it and the page cache serves.
  MESSAGE("O_DIRECT on /dev/shm: " << std::string(direct ? "yes" : "no (page cache)"));
  CHECK(read_file(path) == expected);
  std::filesystem::remove(path);
}

TEST_CASE("direct file: a path that cannot be created is a RuntimeError naming it") {
  TempDir dir;
  const std::string path = dir.file("missing/shard");
  CHECK_THROWS_WITH_AS(spmd::DirectFile{path}, doctest::Contains(path.c_str()), spmd::RuntimeError);
}
