// A meta.json beside the data that spmd-prepare did not write gets a message that says so and what
// to do, never a JSON library's text.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "data/meta.h"
#include "test_support.h"
#include "usage_error.h"

using namespace spmd;

TEST_CASE("dataset meta: another tool's meta.json is named as not ours, with what to do") {
  test::TempDir dir;
  const std::string path = dir.file("meta.json");
  for (const char* text : {R"({"vocab_size": 65, "itos": {"0": "a"}, "stoi": {"a": 0}})", R"([1, 2, 3])",
                           R"({"vocabulary": "byte", "vocab_size": "256"})"}) {
    CAPTURE(text);
    test::write_file(path, text);
    const std::string message = test::usage_error_of([&] { read_meta(path); });
    CHECK(message.find(path + ": not a dataset meta written by spmd-prepare") == 0);
    CHECK(message.find("spmd-prepare (docs/data.md)") != std::string::npos);
    CHECK(message.find("json.exception") == std::string::npos);
  }
}
