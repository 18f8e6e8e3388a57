// read_json_file: the one reader of checkpoint indexes, manifests and config.json.
#include <doctest/doctest.h>

#include "test_support.h"
#include "usage_error.h"
#include "util/json_file.h"

using namespace spmd::test;

TEST_CASE("json file: a document reads back, and missing or malformed files are usage errors naming the file") {
  TempDir dir;
  write_file(dir.file("good.json"), R"({"n_embd": 768, "names": ["a", "b"]})");
  const nlohmann::json j = spmd::read_json_file(dir.file("good.json"), "config");
  CHECK(j.at("n_embd") == 768);
  CHECK(j.at("names").size() == 2);

  std::string msg = usage_error_of([&] { spmd::read_json_file(dir.file("absent.json"), "checkpoint index"); });
  CHECK(msg == "checkpoint index " + dir.file("absent.json") + " is missing or unreadable");

  write_file(dir.file("torn.json"), R"({"n_embd": 7)");
  msg = usage_error_of([&] { spmd::read_json_file(dir.file("torn.json"), "train.init_from: config"); });
  CHECK_MESSAGE(msg.rfind("train.init_from: config " + dir.file("torn.json") + " is not valid JSON: ", 0) == 0, msg);
}
