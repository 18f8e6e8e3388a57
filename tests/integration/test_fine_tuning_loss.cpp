// Fine-tuning's loss as real processes over Gloo: on packed examples whose targets are deliberately
// unbalanced (windows holding one long, learnable answer among windows of short random ones), the
// loss is the sum of the targets' losses over the step's targets, so every layout (data, FSDP,
// tensor and sequence parallel, a pipeline of 4 microbatches, a context-parallel ring) and every
// microbatch count (1, 2, 4) gives one process's losses, validation losses and gradient norms to
// float rounding; a per-rank mean (the averaging that depends on the layout, switched on by a test
// hook) does not, so the tests can fail.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>

#include "training_fixture.h"

using namespace spmd::test;

namespace {
constexpr int kBlock = 16, kVocab = 72, kEnd = 0;

// `windows` packed windows of kBlock tokens and their target bytes, then one padding token:
// a quarter hold one example with a 13-token counting answer (13 targets), the rest four examples
// of a 2-token prompt and a 1-token random answer (1 target each), separated by kEnd.
void write_fine_tuning_file(const std::string& bin, int windows, uint32_t seed, bool all_targets = false) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> token(1, kVocab - 1), kind(0, 3);
  std::vector<uint16_t> ids;
  std::vector<uint8_t> marks;
  auto put = [&](int id, bool target) {
    ids.push_back(static_cast<uint16_t>(id));
    marks.push_back(target ? 1 : 0);
  };
  for (int w = 0; w < windows; ++w) {
    if (kind(rng) == 0) {
      const int base = token(rng);
      put(token(rng), false), put(token(rng), false);
      for (int i = 0; i < 13; ++i) put(1 + (base + i) % (kVocab - 1), true);
      put(kEnd, false);
    } else {
      for (int e = 0; e < 4; ++e) put(token(rng), false), put(token(rng), false), put(token(rng), true), put(kEnd, false);
    }
  }
  put(kEnd, false);
  if (all_targets) marks.assign(marks.size(), 1);
  std::ofstream(bin, std::ios::binary)
      .write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 2));
  const std::string targets = bin.substr(0, bin.size() - 4) + ".targets.bin";
  std::ofstream(targets, std::ios::binary)
      .write(reinterpret_cast<const char*>(marks.data()), static_cast<std::streamsize>(marks.size()));
}

// A fine-tuning dataset as spmd-prepare --format writes it: a char vocabulary of kVocab ids, the
// windows packed for kBlock, examples ended by kEnd.
struct FineTuningRun : TinyRun {
  explicit FineTuningRun(bool all_targets = false) {
    const std::string data = dir.file("sft");
    std::filesystem::create_directories(data);
    write_fine_tuning_file(data + "/train.bin", 300, 1, all_targets);
    write_fine_tuning_file(data + "/val.bin", 40, 2, all_targets);
    nlohmann::json chars = nlohmann::json::array();
    for (int i = 0; i < kVocab; ++i) chars.push_back(std::string(1, static_cast<char>('0' + i)));
    const nlohmann::json meta{{"format", "spmd-prepare/1"}, {"dtype", "uint16"}, {"vocabulary", chars},
                              {"vocab_size", kVocab}, {"train", "train.bin"}, {"val", "val.bin"},
                              {"fine_tuning", {{"format", "chat"}, {"train_on", "assistant"}, {"block_size", kBlock},
                                               {"document_end", kEnd}}}};
    write_file(data + "/meta.json", meta.dump());
  }
  std::vector<std::string> args(std::vector<std::string> extra = {}) const {
    return with({"--set", "data.train=" + dir.file("sft/train.bin"), "--set", "data.val=" + dir.file("sft/val.bin")},
                extra);
  }
};

struct LayoutCase {
  std::string name;
  std::vector<std::string> args;
};

const std::string kFineTuningTpRest = "[vocab, model], [heads, model], [mlp, model], [embed, null], [kv, null]";

// Each case against one process on the same arguments: losses, validation losses, gradient norms.
void check_layouts_match_one_process(const FineTuningRun& run, const std::vector<std::string>& common,
                                     const std::vector<LayoutCase>& cases, const std::string& hooks = "") {
  const std::string single = run.dir.file("single");
  const Curve reference = train(run, single, run.args(common));
  REQUIRE(reference.loss.size() == 12);
  REQUIRE(reference.val_loss.size() == 2);
  CHECK(read_summary(single)["document_eot_token"].get<int>() == kEnd);  // the mask is on by itself
  const auto reference_norms = grad_norms(single);
  for (const LayoutCase& c : cases) {
    CAPTURE(c.name);
    const std::string out = run.dir.file(c.name);
    const auto r = run_train(run, out, run.args(with(common, c.args)), hooks);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    const Curve curve = read_metrics(out + "/metrics.jsonl");
    check_same_curve(curve, reference, kFloatRounding);
    check_same_grad_norms(out, reference_norms, kFloatRounding);
    MESSAGE(c.name << ": largest relative step-loss difference " << max_rel_diff(curve, reference));
  }
}
}  // namespace

TEST_CASE("fine-tuning: data, FSDP, TP+SP layouts and 2 or 4 microbatches give one process's loss over the step's targets") {
  FineTuningRun run;
  check_layouts_match_one_process(
      run, {},
      {{"microbatches-2", {"--set", "train.microbatches=2"}},
       {"microbatches-4", {"--set", "train.microbatches=4"}},
       {"dp-4", mesh_args({"", "[4,1]", "[data,model]", kTpRules})},
       {"fsdp-4", mesh_args({"", "[4]", "[fsdp]",
                             "[[batch, fsdp], [embed, fsdp], [vocab, null], [heads, null], [mlp, null], [seq, null], "
                             "[kv, null]]"})},
       {"dp-2-microbatches-2", with(mesh_args({"", "[2,1]", "[data,model]", kTpRules}), {"--set", "train.microbatches=2"})},
       {"tp-sp-1x4", mesh_args({"", "[1,4]", "[data,model]", "[[batch, data], [seq, model], " + kFineTuningTpRest + "]"})}});
}

TEST_CASE("fine-tuning: a pipeline of 4 microbatches and a context-parallel ring give one process's loss over the step's targets") {
  FineTuningRun run;
  check_layouts_match_one_process(
      run, {"--set", "model.n_layer=4"},
      {{"data-stage-2x2-4-microbatches",
        with(mesh_args({"", "[2,2]", "[data,stage]", "[[batch, data], [layers, stage], [seq, null], " + kOthersButSeq + "]"}),
             {"--set", "train.microbatches=4"})},
       {"cp-2-ring", with(mesh_args({"", "[2]", "[context]", "[[batch, null], [seq, context], " + kOthersButSeq + "]"}),
                          {"--set", "runtime.context_exchange=ring"})}});
}

TEST_CASE("fine-tuning: a per-rank mean of the targets' losses differs from one process on unbalanced examples") {
  // The averaging the loss must not do: each rank's own targets. Were the examples balanced, it
  // would land within the mesh tolerance and prove nothing.
  FineTuningRun run;
  const Curve reference = train(run, run.dir.file("single"), run.args());
  const auto r = run_train(run, run.dir.file("dp-4-per-rank"), run.args(mesh_args({"", "[4,1]", "[data,model]", kTpRules})),
                           "loss_per_rank_mean");
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const Curve wrong = read_metrics(run.dir.file("dp-4-per-rank") + "/metrics.jsonl");
  MESSAGE("per-rank mean: largest relative step-loss difference " << max_rel_diff(wrong, reference));
  CHECK(max_rel_diff(wrong, reference) > 100 * kFloatRounding);
  // The same hook on one process is the right loss: it is the averaging over ranks that differs.
  const auto one = run_train(run, run.dir.file("single-hook"), run.args(), "loss_per_rank_mean");
  REQUIRE_MESSAGE(one.exit_code == 0, one.output);
  check_same_curve(read_metrics(run.dir.file("single-hook") + "/metrics.jsonl"), reference, kFloatRounding);
}

TEST_CASE("fine-tuning: packed data refuses another block_size or a window stride, exit 2") {
  FineTuningRun run;
  check_failed_with(run_train(run, run.dir.file("block-32"), run.args({"--set", "model.block_size=32"})), 2,
                    "fine_tuning.block_size");
  check_failed_with(run_train(run, run.dir.file("stride"), run.args({"--set", "data.window_stride=8"})), 2,
                    "fine_tuning.block_size");
}

TEST_CASE("fine-tuning: where every token is a target the losses are pretraining's, bit for bit") {
  // The factor is exactly 1 then and never applied: the same run as pretraining on these tokens
  // with the document mask (which fine-tuning data turns on) gives identical numbers.
  FineTuningRun run(/*all_targets=*/true);
  const Curve marked = train(run, run.dir.file("marked"), run.args());
  std::filesystem::create_directories(run.dir.file("plain"));
  std::filesystem::copy_file(run.dir.file("sft/train.bin"), run.dir.file("plain/train.bin"));
  std::filesystem::copy_file(run.dir.file("sft/val.bin"), run.dir.file("plain/val.bin"));
  const Curve plain = train(run, run.dir.file("pretraining"),
                            {"--set", "data.train=" + run.dir.file("plain/train.bin"), "--set",
                             "data.val=" + run.dir.file("plain/val.bin"), "--set", "data.document_mask=true", "--set",
                             "data.eot_token=0"});
  REQUIRE(marked.loss.size() == plain.loss.size());
  REQUIRE(marked.val_loss.size() == plain.val_loss.size());
  for (size_t i = 0; i < plain.loss.size(); ++i) CHECK(marked.loss[i] == plain.loss[i]);
  for (size_t i = 0; i < plain.val_loss.size(); ++i) CHECK(marked.val_loss[i] == plain.val_loss[i]);
  CHECK((grad_norms(run.dir.file("marked")) == grad_norms(run.dir.file("pretraining"))));
}

TEST_CASE("fine-tuning: spmd-prepare's fine-tuning options without --format, rows without a tokenizer or block size, and corpus options exit 2") {
  TempDir dir;
  write_file(dir.file("rows.jsonl"), "{\"prompt\": \"a\", \"completion\": \"b\"}\n");
  const std::string prepare = binary_path("spmd-prepare");
  check_failed_with(run_process({prepare, "--input", dir.file("rows.jsonl"), "--out", dir.file("o1"), "--block-size", "8"},
                                {}, 60),
                    2, "--format prompt-completion|chat");
  check_failed_with(run_process({prepare, "--input", dir.file("rows.jsonl"), "--out", dir.file("o2"), "--format", "chat",
                                 "--block-size", "8"},
                                {}, 60),
                    2, "needs --tokenizer");
  check_failed_with(run_process({prepare, "--input", dir.file("rows.jsonl"), "--out", dir.file("o3"), "--format",
                                 "prompt-completion", "--tokenizer", dir.path()},
                                {}, 60),
                    2, "needs --block-size");
  check_failed_with(run_process({prepare, "--input", dir.file("rows.jsonl"), "--out", dir.file("o4"), "--format",
                                 "prompt-completion", "--tokenizer", dir.path(), "--block-size", "8", "--shard-tokens",
                                 "100"},
                                {}, 60),
                    2, "are for text corpora, not --format prompt-completion");
  CHECK(!std::filesystem::exists(dir.file("o2")));
}

TEST_CASE("fine-tuning: sample --chat from a checkpoint whose data was not prepared from chats exits 2") {
  TinyRun run;
  const std::string data = prepare_char_corpus(run.dir, 400, "chars");
  const std::string checkpoint = run.dir.file("ckpt");
  train(run, run.dir.file("out"),
        with(prepared_data(data, 20), {"--set", "train.steps=2", "--set", "train.eval_every=0", "--set",
                                       "checkpoint.every=2", "--set", "checkpoint.dir=" + checkpoint}));
  const auto r = run_process({binary_path("spmd-train"), "sample", "--checkpoint", checkpoint, "--chat", "hi"}, {}, 120);
  check_failed_with(r, 2, "--chat: the tokenizer's dataset was not prepared from chats");
}

TEST_CASE("fine-tuning: a blend of two fine-tuning sets on data parallel and microbatches gives one process's loss") {
  // The targets travel with a blend's rows as with one source's, and every rank counts the blend's
  // whole step alike.
  FineTuningRun run;
  const std::string second = run.dir.file("sft2");
  std::filesystem::create_directories(second);
  write_fine_tuning_file(second + "/train.bin", 200, 3);
  std::filesystem::copy_file(run.dir.file("sft/meta.json"), second + "/meta.json");
  const std::vector<std::string> blend{
      "--set", "data.train=null", "--set",
      "data.sources=[{name: a, path: " + run.dir.file("sft/train.bin") + ", weight: 1}, {name: b, path: " +
          second + "/train.bin, weight: 3}]"};
  check_layouts_match_one_process(
      run, blend,
      {{"blend-dp-4", mesh_args({"", "[4,1]", "[data,model]", kTpRules})},
       {"blend-dp-2-microbatches-2", with(mesh_args({"", "[2,1]", "[data,model]", kTpRules}), {"--set", "train.microbatches=2"})}});
  // The blend was read: its rows, not data.train's alone.
  const Curve one_source = train(run, run.dir.file("one-source"), run.args());
  CHECK(max_rel_diff(read_metrics(run.dir.file("single") + "/metrics.jsonl"), one_source) > 1e-4);
}
