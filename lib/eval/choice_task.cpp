// Reading HellaSwag's JSON Lines.
#include "eval/choice_task.h"

#include <charconv>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace spmd {

namespace {
using nlohmann::json;

// The label as an integer: a JSON integer, or a string holding one ("2").
int64_t read_label(const json& value, const std::string& where) {
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_string()) {
    const std::string& s = value.get_ref<const std::string&>();
    int64_t label = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), label);
    if (ec == std::errc() && end == s.data() + s.size() && !s.empty()) return label;
  }
  throw UsageError(fmt::format("{}: field 'label': expected an integer or a string of one, got {}", where, value.dump()));
}

ChoiceExample parse_example(const std::string& text, const std::string& where) {
  json row;
  try {
    row = json::parse(text);
  } catch (const json::exception& e) {  // a parse error, or a number out of range (1e400)
    throw UsageError(fmt::format("{}: not a JSON object ({})", where, e.what()));
  }
  SPMD_CHECK(row.is_object(), "{}: expected a JSON object with ctx, endings and label", where);
  for (const char* field : {"ctx", "endings", "label"})
    SPMD_CHECK(row.contains(field), "{}: field '{}' is missing", where, field);
  ChoiceExample example;
  SPMD_CHECK(row["ctx"].is_string(), "{}: field 'ctx': expected a string, got {}", where, row["ctx"].dump());
  example.ctx = row["ctx"].get<std::string>();
  SPMD_CHECK(!example.ctx.empty(), "{}: field 'ctx': empty (the choices need a context to be scored against)", where);
  const json& endings = row["endings"];
  SPMD_CHECK(endings.is_array() && endings.size() >= 2, "{}: field 'endings': expected a list of two or more strings",
             where);
  for (size_t i = 0; i < endings.size(); ++i) {
    SPMD_CHECK(endings[i].is_string(), "{}: field 'endings'[{}]: expected a string, got {}", where, i, endings[i].dump());
    example.endings.push_back(endings[i].get<std::string>());
  }
  example.label = read_label(row["label"], where);
  SPMD_CHECK(example.label >= 0 && example.label < static_cast<int64_t>(endings.size()),
             "{}: field 'label': {} is out of range for {} endings (0 to {})", where, example.label, endings.size(),
             endings.size() - 1);
  return example;
}

bool blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }
}  // namespace

std::vector<ChoiceExample> read_choice_task(const std::string& path, int64_t limit) {
  std::ifstream in(path, std::ios::binary);
  SPMD_CHECK(in, "{}: cannot read the task file", path);
  std::vector<ChoiceExample> examples;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (blank(line)) continue;
    examples.push_back(parse_example(line, fmt::format("{}:{}", path, number)));
    examples.back().line = number;
    if (limit > 0 && static_cast<int64_t>(examples.size()) == limit) break;
  }
  SPMD_CHECK(!examples.empty(), "{}: no examples (expected JSON Lines with ctx, endings and label)", path);
  return examples;
}

}  // namespace spmd
