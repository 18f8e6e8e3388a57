// The readers that need libtorch, fuzzed in the sanitized build of the whole tool
// (SPMD_SANITIZE=ON, scripts/check-sanitized): our checkpoints (index.json and the rank shards,
// through restore_parameters, what --resume, sample and eval read, and through export) and a
// Hugging Face folder (config.json and model.safetensors, through the launcher's init_from check
// and the collective load). Seeds are real files: a checkpoint the sanitized spmd-train wrote and
// its export. Every mutant either loads or is a UsageError naming the file; anything else (another
// exception, a sanitizer report, an abort) fails. Deterministic: case i uses the seed 0x...+i.
#include <filesystem>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_restore.h"
#include "ckpt/safetensors.h"
#include "comm/backend.h"
#include "comm/communicator.h"
#include "config/config.h"
#include "fuzz_support.h"
#include "hf/hf_export.h"
#include "hf/hf_import.h"
#include "parallel/layout.h"
#include "parallel/sharded_model.h"
#include "training_fixture.h"

namespace fs = std::filesystem;
using namespace spmd::fuzz;
using spmd::test::read_file;
using spmd::test::TempDir;
using spmd::test::TinyRun;
using spmd::test::write_file;

namespace {

// Values that break naive size arithmetic, and JSON of the wrong type.
const std::vector<std::string> kJsonValues = {
    "0", "-1", "1", "7", "4294967296", "4611686018427387904", "9223372036854775807", "18446744073709551615",
    "-9223372036854775808", "1e400", "0.5", "null", "true", "\"x\"", "\"F16\"", "\"BF16\"", "\"I64\"", "[]",
    "{}", "[4611686018427387904, 4611686018427387904]", "[-1]", "[0, 0]", "[1, 2, 3, 4, 5, 6, 7, 8, 9]",
    "\"\\ud800\"", "\"\xff\xfe\""};
const std::vector<std::string> kInserts = {"\"", "{", "}", "[", "]", ",", ":", "null", "-", "\xc3", "\n", "\\"};

// A random element of a JSON document (object members and array items, depth first).
nlohmann::json* random_node(nlohmann::json& j, Rng& rng, int depth = 0) {
  if (!j.is_structured() || j.empty() || (depth > 0 && rng.percent(30))) return &j;
  auto it = j.begin();
  std::advance(it, static_cast<long>(rng.below(j.size())));
  return random_node(*it, rng, depth + 1);
}

// One edit of a JSON text: a value replaced by an extreme or ill-typed one, a member dropped or
// duplicated (by text), or raw bytes inserted, deleted or flipped.
void mutate_json(std::string& text, Rng& rng) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded() && rng.percent(60)) {
    nlohmann::json* node = random_node(j, rng);
    if (rng.percent(80)) *node = nlohmann::json::parse(rng.pick(kJsonValues), nullptr, false);
    else if (node->is_object() && !node->empty()) node->erase(node->begin());
    else if (node->is_array() && !node->empty()) node->erase(node->begin() + static_cast<long>(rng.below(node->size())));
    text = j.dump();
    if (!j.is_discarded()) return;
  }
  const size_t at = text.empty() ? 0 : rng.below(text.size());
  switch (rng.below(4)) {
    case 0: if (!text.empty()) text[at] = static_cast<char>(text[at] ^ (1 << rng.below(8))); break;
    case 1: text.erase(at, 1 + rng.below(16)); break;
    case 2: text.insert(at, rng.pick(kInserts)); break;
    default: {  // a member twice: `"k": v, "k": v`
      const size_t colon = text.find("\":", at);
      if (colon != std::string::npos) text.insert(at, text.substr(colon > 20 ? colon - 20 : 0, 24));
    }
  }
}

// One edit of a safetensors file: its 8-byte header length, its JSON header, a cut at a
// boundary, or flipped bytes in the data (caught by the checksums where there are any).
void mutate_safetensors(std::string& bytes, Rng& rng) {
  uint64_t header_len = 0;
  for (int i = 0; i < 8 && i < static_cast<int>(bytes.size()); ++i)
    header_len |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  const size_t data_start = std::min<size_t>(bytes.size(), 8 + header_len);
  switch (rng.below(5)) {
    case 0: {  // the length field
      static const std::vector<uint64_t> lengths = {0, 1, 7, 2, header_len - 1, header_len + 1, bytes.size(),
                                                    uint64_t{1} << 32, uint64_t{1} << 62, ~uint64_t{0}};
      const uint64_t v = rng.pick(lengths);
      for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((v >> (8 * i)) & 0xff);
      break;
    }
    case 1:
    case 2: {  // the header's JSON, padded back to its length (or not)
      const size_t room = data_start > 8 ? data_start - 8 : 0;  // the header's bytes in the file
      std::string header = bytes.substr(std::min<size_t>(8, bytes.size()), room);
      while (!header.empty() && header.back() == ' ') header.pop_back();
      mutate_json(header, rng);
      if (header.size() <= room && rng.percent(80)) header.resize(room, ' ');
      const uint64_t n = header.size();
      std::string out(8, '\0');
      for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
      bytes = out + header + bytes.substr(data_start);
      break;
    }
    case 3: {  // cut short: inside the length, the header, at the data's start, inside the data
      const std::vector<size_t> cuts = {0, 4, 8, data_start / 2 + 4, data_start, data_start + 1,
                                        (data_start + bytes.size()) / 2, bytes.size() - 1};
      bytes.resize(std::min(bytes.size(), rng.pick(cuts)));
      break;
    }
    default:
      for (int n = 1 + static_cast<int>(rng.below(4)); n > 0 && bytes.size() > data_start; --n) {
        const size_t at = data_start + rng.below(bytes.size() - data_start);
        bytes[at] = static_cast<char>(bytes[at] ^ (1 << rng.below(8)));
      }
  }
}

void copy_dir(const std::string& from, const std::string& to) {
  fs::copy(from, to, fs::copy_options::recursive);
}

// The tiny run's checkpoint after 2 steps, written by the (sanitized) spmd-train, and its model.
struct Seeds {
  TinyRun run;
  std::string checkpoint;  // step_00000002
  spmd::Config config;
  Seeds() {
    const std::string ck = run.dir.file("ck");
    const auto r = spmd::test::run_train(run, run.dir.file("out"),
                                         {"--set", "train.steps=2", "--set", "train.eval_every=0", "--set",
                                          "checkpoint.dir=" + ck, "--set", "checkpoint.every=2"});
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    checkpoint = ck + "/step_00000002";
    REQUIRE(fs::exists(checkpoint + "/index.json"));
    config = spmd::load_config(run.config);
  }
};

// A one-process model of the tiny config that restore and load read into.
struct OneProcessModel {
  spmd::ModelLayout layout;
  spmd::Communicator comm;
  spmd::ShardedModel model;
  explicit OneProcessModel(const spmd::Config& config)
      : layout(spmd::plan_layout(config)),
        comm(layout.mesh, spmd::resolve_runtime(config.runtime)),
        model(layout, comm, 1) {}
};

// The files of a checkpoint directory that a mutant may change.
std::string pick_checkpoint_file(const std::string& dir, Rng& rng) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  return rng.percent(50) ? "index.json" : rng.pick(files);
}

}  // namespace

TEST_CASE("checkpoint: mutated index.json and shard files through restore and export") {
  Seeds seeds;
  OneProcessModel target(seeds.config);
  Tally tally;
  constexpr int kCases = 300;
  for (int i = 0; i < kCases; ++i) {
    Rng rng(0xc4ec0000u + static_cast<uint64_t>(i));
    TempDir tmp;
    const std::string dir = tmp.file("step_00000002");
    copy_dir(seeds.checkpoint, dir);
    const std::string name = pick_checkpoint_file(dir, rng);
    std::string bytes = read_file(dir + "/" + name);
    for (int edits = 1 + static_cast<int>(rng.below(2)); edits > 0; --edits) {
      if (name.size() > 12 && name.substr(name.size() - 12) == ".safetensors") mutate_safetensors(bytes, rng);
      else mutate_json(bytes, rng);
    }
    write_file(dir + "/" + name, bytes);
    const std::string label = fmt::format("checkpoint case {} ({})", i, name);
    // Both readers see the same mutant; a UsageError must name the checkpoint's directory.
    run_reader_case(tally, i, label, {dir}, [&] { spmd::restore_parameters(target.model, dir); }, "restore");
    run_reader_case(tally, i, label, {dir}, [&] { spmd::export_hf(dir, tmp.file("out.safetensors")); }, "export");
  }
  check_reader_pass(tally, 2 * kCases, "checkpoint files");
}

TEST_CASE("hf: mutated config.json and model.safetensors through the init_from check and the load") {
  Seeds seeds;
  TempDir seed_dir;
  spmd::export_hf(seeds.checkpoint, seed_dir.file("model.safetensors"));
  const auto& m = seeds.config.model;
  write_file(seed_dir.file("config.json"),
             nlohmann::json{{"model_type", "gpt2"}, {"architectures", {"GPT2LMHeadModel"}}, {"n_layer", m.n_layer},
                            {"n_head", m.n_head}, {"n_embd", m.n_embd}, {"vocab_size", m.vocab_size},
                            {"n_positions", m.block_size}, {"layer_norm_epsilon", 1e-5}}
                 .dump(2));
  {  // the seed itself loads: a mutant's failure is the mutation's
    spmd::Config config = seeds.config;
    config.train.init_from = seed_dir.path();
    spmd::check_hf_checkpoint(config);
  }
  OneProcessModel target(seeds.config);
  Tally tally;
  constexpr int kCases = 300;
  for (int i = 0; i < kCases; ++i) {
    Rng rng(0x4f000000u + static_cast<uint64_t>(i));
    TempDir tmp;
    copy_dir(seed_dir.path(), tmp.path() + "/hf");
    const std::string dir = tmp.path() + "/hf";
    const bool weights = rng.percent(60);
    const std::string file = dir + (weights ? "/model.safetensors" : "/config.json");
    std::string bytes = read_file(file);
    for (int edits = 1 + static_cast<int>(rng.below(2)); edits > 0; --edits) {
      if (weights) mutate_safetensors(bytes, rng);
      else mutate_json(bytes, rng);
    }
    write_file(file, bytes);
    spmd::Config config = seeds.config;
    config.train.init_from = dir;
    run_reader_case(tally, i, fmt::format("hf case {}", i), {dir}, [&] {
      spmd::check_hf_checkpoint(config);
      spmd::load_hf_checkpoint(target.model, dir);
    });
  }
  check_reader_pass(tally, kCases, "Hugging Face folders");
}
