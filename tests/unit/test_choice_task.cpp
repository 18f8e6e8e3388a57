// Multiple-choice tasks: HellaSwag's JSON Lines read (and refused with file:line and the field),
// the windows llm.c's scoring feeds the model, and the accuracies from per-choice losses.
#include "config/config.h"
#include "eval/choice_batches.h"
#include "eval/choice_scoring.h"
#include "eval/choice_task.h"
#include "test_support.h"

#include "doctest_check.h"

#include "usage_error.h"

using namespace spmd;

namespace {
DatasetMeta byte_vocabulary() {
  DatasetMeta meta;
  meta.vocab = VocabKind::kByte;
  meta.vocab_size = 256;
  return meta;
}

std::vector<int64_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }
}  // namespace

TEST_CASE("choice task: rows with integer or string labels are read, other fields and blank lines ignored") {
  test::TempDir dir;
  const std::string path = dir.file("task.jsonl");
  test::write_file(path, R"({"ctx": "A man", "endings": ["sits", "runs", "eats"], "label": 2, "ind": 7})" "\n\n"
                         R"({"ctx": "B", "endings": ["x", "y"], "label": "1", "split": "val"})" "\n");
  const auto rows = read_choice_task(path);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].ctx == "A man");
  CHECK(rows[0].endings == std::vector<std::string>({"sits", "runs", "eats"}));
  CHECK(rows[0].label == 2);
  CHECK(rows[0].line == 1);
  CHECK(rows[1].label == 1);
  CHECK(rows[1].line == 3);
  CHECK(read_choice_task(path, 1).size() == 1);  // --limit 1
}

TEST_CASE("choice task: a malformed line, a label out of range or an empty file names file:line and the field") {
  test::TempDir dir;
  const std::string path = dir.file("task.jsonl");
  const std::string good = R"({"ctx": "c", "endings": ["a", "b"], "label": 0})" "\n";
  const std::vector<std::pair<std::string, std::string>> cases{
      {R"({"ctx": "c", "endings": ["a", "b"], "label": 2})", ":2: field 'label': 2 is out of range for 2 endings"},
      {R"({"ctx": "c", "endings": ["a", "b"], "label": -1})", ":2: field 'label': -1 is out of range"},
      {R"({"ctx": "c", "endings": ["a", "b"], "label": "x"})", ":2: field 'label': expected an integer or a string of one"},
      {R"({"ctx": "c", "endings": ["a", "b"], "label": 0.5})", ":2: field 'label': expected an integer"},
      {R"({"ctx": "c", "endings": ["a"], "label": 0})", ":2: field 'endings': expected a list of two or more strings"},
      {R"({"ctx": "c", "endings": ["a", 3], "label": 0})", ":2: field 'endings'[1]: expected a string"},
      {R"({"ctx": 5, "endings": ["a", "b"], "label": 0})", ":2: field 'ctx': expected a string"},
      {R"({"ctx": "", "endings": ["a", "b"], "label": 0})", ":2: field 'ctx': empty"},
      {R"({"endings": ["a", "b"], "label": 0})", ":2: field 'ctx' is missing"},
      {R"({"ctx": "c", "endings": ["a", "b"]})", ":2: field 'label' is missing"},
      {R"({"ctx": "c", "endings": ["a", "b"], "label": 0)", ":2: not a JSON object"},
      {R"([1, 2])", ":2: expected a JSON object"},
  };
  for (const auto& [line, expected] : cases) {
    CAPTURE(line);
    test::write_file(path, good + line + "\n");
    const std::string message = test::usage_error_of([&] { read_choice_task(path); });
    CHECK(message.find(path + expected) == 0);
  }
  test::write_file(path, "\n  \n");
  CHECK(test::usage_error_of([&] { read_choice_task(path); }).find(path + ": no examples") == 0);
  CHECK(test::usage_error_of([&] { read_choice_task(dir.file("absent.jsonl")); }).find("cannot read") != std::string::npos);
}

TEST_CASE("choice scoring: context + ' ' + ending, scored from the first ending token, and a long sequence keeps its last block_size tokens") {
  const DatasetMeta bytes = byte_vocabulary();
  ChoiceExample example{"abcd", {"xy", "z"}, 1, 1};
  EncodedExample e = encode_example(bytes, example, 5, 16, "t:1");
  CHECK(e.index == 5);
  CHECK(e.label == 1);
  REQUIRE(e.choices.size() == 2);
  CHECK(e.choices[0].tokens == bytes_of("abcd xy"));
  CHECK(e.choices[0].first_scored == 4);  // " xy": three scored tokens
  CHECK(e.choices[0].scored() == 3);
  CHECK(e.choices[1].tokens == bytes_of("abcd z"));
  // block_size 5: "abcd xy" (7) keeps "cd xy"; the context's kept part is 2 tokens.
  e = encode_example(bytes, example, 0, 5, "t:1");
  CHECK(e.choices[0].tokens == bytes_of("cd xy"));
  CHECK(e.choices[0].first_scored == 2);
  CHECK(e.choices[1].tokens == bytes_of("bcd z"));
  CHECK(e.choices[1].first_scored == 3);
  // An ending longer than the window: its first kept token has nothing before it and is not scored.
  e = encode_example(bytes, ChoiceExample{"ab", {"wxyz", "q"}, 0, 1}, 0, 3, "t:1");
  CHECK(e.choices[0].tokens == bytes_of("xyz"));
  CHECK(e.choices[0].first_scored == 1);
  CHECK(e.choices[0].scored() == 2);
}

TEST_CASE("choice scoring: text a character vocabulary lacks names file:line and the field") {
  DatasetMeta chars;
  chars.vocab = VocabKind::kChar;
  chars.chars = {U' ', U'a', U'b'};
  chars.vocab_size = 3;
  const std::string message =
      test::usage_error_of([&] { encode_example(chars, ChoiceExample{"ab", {"a", "c"}, 0, 4}, 0, 16, "task.jsonl:4"); });
  CHECK(message.find("task.jsonl:4: field 'endings'[1]: ") == 0);
}

TEST_CASE("choice scoring: acc by the lowest sum, acc_norm by the lowest mean, ties to the lowest index") {
  CHECK(lowest({3.0, 1.0, 1.0, 2.0}) == 1);
  CHECK(lowest({0.5, 0.5}) == 0);
  std::vector<ExampleScore> examples{
      {0, 1, {4.0, 3.0}, {2.0, 3.0}},  // sum picks 1 (right), mean picks 0
      {1, 0, {1.0, 1.0}, {0.5, 0.5}},  // ties: both pick 0 (right)
      {2, 1, {5.0, 6.0}, {2.5, 2.0}},  // sum picks 0, mean picks 1 (right)
      {3, 0, {9.0, 1.0}, {9.0, 1.0}},  // both wrong
  };
  const TaskScore s = summarize(examples);
  CHECK(s.n == 4);
  CHECK(s.acc == doctest::Approx(0.5));
  CHECK(s.acc_norm == doctest::Approx(0.5));
}

TEST_CASE("choice batches: each choice is one row, and padding and other examples' rows never reach a score") {
  const DatasetMeta bytes = byte_vocabulary();
  std::vector<EncodedExample> examples;
  examples.push_back(encode_example(bytes, ChoiceExample{"ab", {"c", "dd", "e"}, 0, 1}, 0, 8, "t:1"));
  examples.push_back(encode_example(bytes, ChoiceExample{"abcdef", {"g", "h"}, 1, 2}, 1, 8, "t:2"));
  examples.push_back(encode_example(bytes, ChoiceExample{"x", {"y", "z"}, 0, 3}, 2, 8, "t:3"));
  // A stand-in forward whose row loss is the sum of (target + 1) over scored positions: every
  // scored token shows, and a padding position (target -1) adds nothing.
  int passes = 0;
  const RowLosses fake = [&](const at::Tensor& inputs, const at::Tensor& targets) {
    ++passes;
    CHECK(inputs.sizes() == targets.sizes());
    CHECK(inputs.size(0) == 2 * 3);  // two examples of up to three choices
    return (targets + 1).sum(1).to(at::kDouble);
  };
  ChoiceBatching b;
  b.examples_per_rank = 2;
  b.block_size = 8;
  const auto scores = score_examples(examples, b, fake);
  CHECK(passes == 2);
  REQUIRE(scores.size() == 3);
  auto expected = [](const std::string& scored) {
    double sum = 0;
    for (unsigned char c : scored) sum += c + 1;
    return sum;
  };
  CHECK(scores[0].sums == std::vector<double>({expected(" c"), expected(" dd"), expected(" e")}));
  CHECK(scores[0].means[1] == doctest::Approx(expected(" dd") / 3));
  CHECK(scores[1].sums == std::vector<double>({expected(" g"), expected(" h")}));
  CHECK(scores[2].sums == std::vector<double>({expected(" y"), expected(" z")}));
  CHECK(scores[2].label == 0);
}

TEST_CASE("eval config: eval.tasks is read with its defaults, survives to_yaml, and a bad entry names its key") {
  const std::string base = "mesh: {shape: [1], axes: [data]}\n";
  const Config c = parse_config(base + "eval: {tasks: [{name: hellaswag, path: h.jsonl}, "
                                       "{name: arc-e.v1, path: 'a b.jsonl', every: 7, limit: 100}]}\n",
                                "t.yaml");
  REQUIRE(c.eval.tasks.size() == 2);
  CHECK(c.eval.tasks[0].name == "hellaswag");
  CHECK(c.eval.tasks[0].every == 500);
  CHECK(c.eval.tasks[0].limit == 0);
  CHECK(c.eval.tasks[1].path == "a b.jsonl");
  CHECK(c.eval.tasks[1].every == 7);
  CHECK(c.eval.tasks[1].limit == 100);
  const Config again = parse_config(to_yaml(c), "again.yaml");
  REQUIRE(again.eval.tasks.size() == 2);
  CHECK(again.eval.tasks[1].name == "arc-e.v1");
  CHECK(again.eval.tasks[1].path == "a b.jsonl");
  CHECK(again.eval.tasks[1].every == 7);
  CHECK(parse_config(base, "t.yaml").eval.tasks.empty());
  CHECK(to_yaml(parse_config(base, "t.yaml")).find("\neval:") == std::string::npos);
  const std::vector<std::pair<std::string, std::string>> bad{
      {"eval: {tasks: [{name: 'a/b', path: x}]}", "eval.tasks[0].name"},
      {"eval: {tasks: [{path: x}]}", "eval.tasks[0].name"},
      {"eval: {tasks: [{name: a}]}", "eval.tasks[0].path"},
      {"eval: {tasks: [{name: a, path: x, every: 0}]}", "eval.tasks[0].every"},
      {"eval: {tasks: [{name: a, path: x, limit: -1}]}", "eval.tasks[0].limit"},
      {"eval: {tasks: [{name: a, path: x}, {name: a, path: y}]}", "eval.tasks[1].name: 'a' names two tasks"},
      {"eval: {tasks: [{name: a, path: x, evry: 3}]}", "evry"},
      {"eval: {tasks: {name: a}}", "eval.tasks"},
      {"eval: {task: []}", "task"},
  };
  for (const auto& [yaml, expected] : bad) {
    CAPTURE(yaml);
    const std::string message = test::usage_error_of([&] { parse_config(base + yaml + "\n", "t.yaml"); });
    CHECK(message.find("t.yaml:2:") == 0);
    CHECK(message.find(expected) != std::string::npos);
  }
}
