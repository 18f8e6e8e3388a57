// Weighted blends (data.sources) as real processes: every mesh reads the blend's rows (losses equal
// one process), per-source validation losses, resume onto another mesh, and new weights on resume.
#include <doctest/doctest.h>

#include <filesystem>

#include "training_fixture.h"

using namespace spmd::test;

namespace {

// The tiny run's data.train replaced by a blend of three corpora (the second with its own val).
std::vector<std::string> blend_args(const TinyRun& run, const std::string& weights = "0.6, 0.3, 0.1") {
  write_token_file(run.dir.file("code.bin"), 9000, 72, 7);
  write_token_file(run.dir.file("code-val.bin"), 3000, 72, 8);
  write_token_file(run.dir.file("books.bin"), 5000, 72, 9);
  double w[3];
  REQUIRE(std::sscanf(weights.c_str(), "%lf, %lf, %lf", &w[0], &w[1], &w[2]) == 3);
  const std::string sources = "[{name: web, path: " + run.dir.file("train.bin") + ", weight: " + std::to_string(w[0]) +
                              "}, {name: code, path: " + run.dir.file("code.bin") + ", weight: " + std::to_string(w[1]) +
                              ", val: " + run.dir.file("code-val.bin") + "}, {name: books, path: " +
                              run.dir.file("books.bin") + ", weight: " + std::to_string(w[2]) + "}]";
  return {"--set", "data.train=null", "--set", "data.sources=" + sources};
}

const std::vector<std::string> kDp2{"--set", "mesh.shape=[2,1]"};
const std::vector<std::string> kDp2Tp2{"--set", "mesh.shape=[2,2]"};

std::vector<double> source_val_losses(const std::string& metrics, const std::string& name) {
  std::vector<double> values;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("val_loss/" + name)) values.push_back(j["val_loss/" + name].get<double>());
  }
  return values;
}


}  // namespace

TEST_CASE("blend: every mesh reads the blend's rows (losses equal one process), and val_loss/<name> per source") {
  TinyRun run;
  const auto blend = blend_args(run);
  const Curve one = train(run, run.dir.file("one"), blend);
  REQUIRE(one.loss.size() == 12);
  const std::vector<double> code_val = source_val_losses(run.dir.file("one/metrics.jsonl"), "code");
  CHECK(code_val.size() == one.val_loss.size());  // at every evaluation, beside val_loss
  CHECK(code_val.size() == 2);
  CHECK(source_val_losses(run.dir.file("one/metrics.jsonl"), "web").empty());  // no val given for web
  // Not the single-source run: the blend reads other rows.
  const Curve single = train(run, run.dir.file("single"), {});
  CHECK(single.loss[1] != one.loss[1]);
  for (const auto& mesh : {kDp2, kDp2Tp2}) {
    CAPTURE(mesh[1]);
    const std::string out = run.dir.file("mesh-" + mesh[1].substr(11, 3));
    check_same_curve(train(run, out, with(mesh, blend)), one, kFloatRounding);
    const std::vector<double> got = source_val_losses(out + "/metrics.jsonl", "code");
    REQUIRE(got.size() == code_val.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] / code_val[i] - 1) <= kFloatRounding);
  }
}

TEST_CASE("blend: resume on another mesh reads the uninterrupted run's batches, and new weights restart the mix there") {
  TinyRun run;
  const auto blend = blend_args(run);
  const std::vector<std::string> ck{"--set", "checkpoint.dir=" + run.dir.file("ck"), "--set", "checkpoint.every=6",
                                    "--set", "checkpoint.keep=3", "--set", "train.eval_every=0"};
  const Curve full = train(run, run.dir.file("full"), with(blend, ck));
  REQUIRE(full.loss.size() == 12);
  const std::string step6 = run.dir.file("ck/step_00000006");
  REQUIRE(std::filesystem::exists(step6 + "/index.json"));
  // Two processes of another layout, from the one-process checkpoint.
  const std::vector<std::string> resume{"--set", "train.eval_every=0", "--resume", step6};
  auto resumed = run_train(run, run.dir.file("resumed"), with(kDp2Tp2, with(blend, resume)));
  REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.output);
  CHECK(resumed.output.find("data blend: weights changed") == std::string::npos);
  check_same_curve(read_metrics(run.dir.file("resumed/metrics.jsonl")), tail(full, 6), kFloatRounding);
  // Other weights: the run says so when it resumes, and trains on.
  auto reweighted = run_train(run, run.dir.file("reweighted"), with(kDp2, with(blend_args(run, "0.1, 0.1, 0.8"), resume)));
  REQUIRE_MESSAGE(reweighted.exit_code == 0, reweighted.output);
  CHECK_MESSAGE(reweighted.output.find("data blend: weights changed from [web 0.6, code 0.3, books 0.1] to [web 0.1, "
                                       "code 0.1, books 0.8]: from step 7 (sample 48)") != std::string::npos,
                reweighted.output);
  const Curve after = read_metrics(run.dir.file("reweighted/metrics.jsonl"));
  REQUIRE(after.loss.size() == 6);
  CHECK(after.loss[0] != full.loss[6]);  // other rows than the old weights' step 7
}

TEST_CASE("blend: a config with data.train and data.sources, or sources of another tokenizer, exits 2 naming the key") {
  TinyRun run;
  auto both = run_train(run, run.dir.file("both"),
                        {"--set", "data.sources=[{name: web, path: " + run.dir.file("train.bin") + ", weight: 1}]"});
  check_failed_with(both, 2, "data.sources: give data.train or data.sources, not both");
  auto bad_weight = run_train(run, run.dir.file("w"), {"--set", "data.train=null", "--set",
                              "data.sources=[{name: web, path: " + run.dir.file("train.bin") + ", weight: 0}]"});
  check_failed_with(bad_weight, 2, "data.sources[0].weight: expected a positive number");
  auto twice = run_train(run, run.dir.file("n"), {"--set", "data.train=null", "--set",
                         "data.sources=[{name: a, path: " + run.dir.file("train.bin") + "}, {name: a, path: " +
                         run.dir.file("val.bin") + "}]"});
  check_failed_with(twice, 2, "data.sources[1].name: expected a name no other source has");
  // A source with a meta.json beside it and one without: not the same tokenizer.
  std::filesystem::create_directories(run.dir.file("prepared"));
  write_token_file(run.dir.file("prepared/train.bin"), 5000, 72, 3);
  write_file(run.dir.file("prepared/meta.json"), R"({"vocab": "byte", "vocab_size": 256})");
  auto mixed = run_train(run, run.dir.file("m"), {"--set", "data.train=null", "--set",
                         "data.sources=[{name: raw, path: " + run.dir.file("train.bin") + "}, {name: prepared, path: " +
                         run.dir.file("prepared/train.bin") + "}]"});
  check_failed_with(mixed, 2, "data.sources[1] (prepared)");
  const auto missing = run_train(run, run.dir.file("x"), {"--set", "data.train=null", "--set",
                                 "data.sources=[{name: gone, path: " + run.dir.file("nothing.bin") + "}]"});
  check_failed_with(missing, 2, "data.sources[0] (gone)");
}
