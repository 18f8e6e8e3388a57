// Packed documents (data.document_mask) as real processes over Gloo: on a corpus whose windows
// hold several documents each, every mesh (data, FSDP, tensor and sequence parallel, pipeline
// stages, context parallelism by all-gather and by ring, recomputation and microbatches) follows
// the single-process loss curve and gradient norms, dropout on; the mask changes the numbers
// (the tests can fail); the end-of-text id comes from data.eot_token or the dataset's meta.json,
// and where there is none the run exits 2 naming data.eot_token.
#include <doctest/doctest.h>

#include <cstdint>
#include <fstream>
#include <random>

#include "training_fixture.h"

using namespace spmd::test;

namespace {
constexpr int kEot = 0;
const std::string kTpRest = "[vocab, model], [heads, model], [mlp, model], [embed, null], [kv, null]";

// `count` uint16 tokens in documents of 1 to 12 tokens, each ended by kEot: a window of 16 holds
// several documents and usually starts mid-document.
void write_packed_tokens(const std::string& path, int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> token(1, 71), length(1, 12);
  std::vector<uint16_t> tokens;
  while (static_cast<int64_t>(tokens.size()) < count) {
    for (int n = length(rng) - 1; n > 0; --n) tokens.push_back(static_cast<uint16_t>(token(rng)));
    tokens.push_back(kEot);
  }
  tokens.resize(static_cast<size_t>(count));
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
}

// The tiny run on packed documents, document_mask on with end-of-text id 0, dropout 0.1.
struct PackedRun : TinyRun {
  PackedRun() {
    write_packed_tokens(dir.file("train.bin"), 20000, 1);
    write_packed_tokens(dir.file("val.bin"), 4000, 2);
  }
  static std::vector<std::string> packed(std::vector<std::string> extra = {}) {
    return with({"--set", "data.document_mask=true", "--set", "data.eot_token=0", "--set", "model.dropout=0.1"}, extra);
  }
};

struct MeshCase {
  std::string name;
  std::vector<std::string> args;
};

// Each case against the single-process run on the same arguments: losses, validation losses
// and gradient norms to float rounding.
void check_meshes_match_one_process(const PackedRun& run, const std::vector<std::string>& common,
                                    const std::vector<MeshCase>& cases) {
  const std::string single = run.dir.file("single");
  const Curve reference = train(run, single, PackedRun::packed(common));
  REQUIRE(reference.loss.size() == 12);
  CHECK(read_summary(single)["document_eot_token"].get<int>() == kEot);
  const auto reference_norms = grad_norms(single);
  for (const MeshCase& c : cases) {
    CAPTURE(c.name);
    const std::string out = run.dir.file(c.name);
    const Curve curve = train(run, out, PackedRun::packed(with(common, c.args)));
    check_same_curve(curve, reference, kFloatRounding);
    check_same_grad_norms(out, reference_norms, kFloatRounding);
    MESSAGE(c.name << ": largest relative step-loss difference " << max_rel_diff(curve, reference));
  }
}
}  // namespace

TEST_CASE("document mask: the mask and the restarted positions change the loss curve") {
  // Without this difference the invariance tests below could pass with the mask ignored.
  PackedRun run;
  const Curve masked = train(run, run.dir.file("masked"), PackedRun::packed());
  const Curve plain = train(run, run.dir.file("plain"), {"--set", "model.dropout=0.1"});
  REQUIRE(masked.loss.size() == plain.loss.size());
  CHECK(std::abs(masked.loss[0] / plain.loss[0] - 1) > 1e-4);  // the first step: the same weights
  CHECK(max_rel_diff(masked, plain) > 1e-3);
}

TEST_CASE("document mask: data, FSDP, tensor and sequence parallel meshes and microbatches match one process") {
  PackedRun run;
  check_meshes_match_one_process(
      run, {},
      {{"dp-4", mesh_args({"", "[4,1]", "[data,model]", kTpRules})},
       {"fsdp-4", mesh_args({"", "[4]", "[fsdp]",
                             "[[batch, fsdp], [embed, fsdp], [vocab, null], [heads, null], [mlp, null], [seq, null], "
                             "[kv, null]]"})},
       {"tp-2x2", mesh_args({"", "[2,2]", "[data,model]", kTpRules})},
       {"tp-sp-1x4", mesh_args({"", "[1,4]", "[data,model]", "[[batch, data], [seq, model], " + kTpRest + "]"})},
       {"tp-2x2-microbatches-remat",
        with(mesh_args({"", "[2,2]", "[data,model]", kTpRules}),
             {"--set", "train.microbatches=2", "--set", "runtime.remat=selective"})}});
}

TEST_CASE("document mask: pipeline stages (1F1B, interleaved) match one process") {
  PackedRun run;
  const std::string stages = "[[batch, data], [layers, stage], [seq, null], " + kOthersButSeq + "]";
  check_meshes_match_one_process(
      run, {"--set", "model.n_layer=4"},
      {{"data-stage-2x2-1f1b", with(mesh_args({"", "[2,2]", "[data,stage]", stages}), {"--set", "train.microbatches=2"})},
       {"stage-2-interleaved",
        with(mesh_args({"", "[2]", "[stage]", "[[batch, null], [layers, stage], [seq, null], " + kOthersButSeq + "]"}),
             {"--set", "train.microbatches=2", "--set", "runtime.pipeline_schedule=interleaved", "--set",
              "runtime.virtual_stages=2"})}});
}

TEST_CASE("document mask: context parallelism by all-gather and by ring (cp 2 and 4) matches one process") {
  PackedRun run;
  auto context = [](int cp, bool data, const std::string& exchange) {
    const std::string p = std::to_string(cp);
    const TestMesh mesh =
        data ? TestMesh{"", "[2," + p + "]", "[data,context]", "[[batch, data], [seq, context], " + kOthersButSeq + "]"}
             : TestMesh{"", "[" + p + "]", "[context]", "[[batch, null], [seq, context], " + kOthersButSeq + "]"};
    return with(mesh_args(mesh), {"--set", "runtime.context_exchange=" + exchange});
  };
  check_meshes_match_one_process(
      run, {},
      {{"cp-2-all-gather", context(2, false, "all_gather")},
       {"cp-4-all-gather", context(4, false, "all_gather")},
       {"data-cp-2x2-ring", context(2, true, "ring")},
       {"cp-4-ring", context(4, false, "ring")},
       {"cp-2-ring-selective", with(context(2, false, "ring"), {"--set", "runtime.remat=selective"})}});
  CHECK(read_summary(run.dir.file("cp-4-ring"))["ring_attention_forwards"].get<int64_t>() > 0);
}

TEST_CASE("document mask: the end-of-text id comes from meta.json, and without one the run exits 2 naming data.eot_token") {
  TinyRun run;
  const std::vector<std::string> mask_on{"--set", "data.document_mask=true"};
  // Token files without meta.json: nothing says which id ends a document.
  auto r = run_train(run, run.dir.file("no-meta"), mask_on);
  check_failed_with(r, 2, "data.eot_token");
  CHECK(r.output.find("no meta.json") != std::string::npos);
  // An id outside the vocabulary, and a negative one other than the default.
  check_failed_with(run_train(run, run.dir.file("big"), with(mask_on, {"--set", "data.eot_token=72"})), 2,
                    "data.eot_token: 72 is not a token id");
  check_failed_with(run_train(run, run.dir.file("negative"), with(mask_on, {"--set", "data.eot_token=-2"})), 2,
                    "data.eot_token");
  // A char vocabulary has no end-of-text token.
  const std::vector<std::string> chars = prepared_data(prepare_char_corpus(run.dir, 200, "chars"), 20);
  r = run_train(run, run.dir.file("chars-out"), with(chars, mask_on));
  check_failed_with(r, 2, "data.eot_token");
  CHECK(r.output.find("without an end-of-text token") != std::string::npos);
  // A byte-level BPE dataset says its id: the run takes it.
  const auto bpe_prep = run_process({binary_path("spmd-prepare"), "--input", run.dir.file("corpus.txt"), "--out",
                                     run.dir.file("bpe"), "--vocab", "bpe:20", "--quiet"});
  REQUIRE_MESSAGE(bpe_prep.exit_code == 0, bpe_prep.output);
  const std::string meta = read_file(run.dir.file("bpe/meta.json"));
  const int64_t eot = nlohmann::json::parse(meta)["tokenizer"]["eot_token"].get<int64_t>();
  const std::string out = run.dir.file("bpe-out");
  train(run, out,
        with(mask_on, {"--set", "data.train=" + run.dir.file("bpe/train.bin"), "--set",
                       "data.val=" + run.dir.file("bpe/val.bin"), "--set", "model.vocab_size=" + std::to_string(eot + 1),
                       "--set", "train.steps=2", "--set", "train.eval_every=0"}));
  CHECK(read_summary(out)["document_eot_token"].get<int64_t>() == eot);
}
