// Checkpoints as real processes: exact resume, resume onto other meshes, a crash mid-save,
// integrity errors, and the Hugging Face export.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>

#include "training_fixture.h"

using namespace spmd::test;
namespace fs = std::filesystem;

namespace {
std::vector<std::string> args(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

std::vector<std::string> ckpt_args(const std::string& dir, int steps) {
  return {"--set", "checkpoint.dir=" + dir, "--set", "checkpoint.every=10", "--set", "checkpoint.keep=3",
          "--set", "train.steps=" + std::to_string(steps), "--set", "train.decay_steps=20",
          "--set", "train.eval_every=0"};
}

}  // namespace

TEST_CASE("checkpoint: resume continues the loss curve exactly, and onto other meshes") {
  TinyRun run;
  const auto hybrid = mesh_args(test_mesh("hybrid-4x2"));
  Curve full = train(run, run.dir.file("full"), args(hybrid, ckpt_args(run.dir.file("ck-full"), 20)));
  REQUIRE(full.loss.size() == 20);
  Curve first = train(run, run.dir.file("first"), args(hybrid, ckpt_args(run.dir.file("ck"), 10)));
  REQUIRE(fs::exists(run.dir.file("ck/step_00000010/index.json")));
  // Same mesh: bit-identical.
  Curve resumed = train(run, run.dir.file("resumed"), args(hybrid, args(ckpt_args(run.dir.file("ck"), 20), {"--resume"})));
  REQUIRE(resumed.loss.size() == 10);
  for (size_t i = 0; i < 10; ++i) CHECK(resumed.loss[i] == full.loss[10 + i]);
  // Other meshes and one process, from the same step-10 checkpoint.
  const std::string step10 = run.dir.file("ck/step_00000010");
  for (const char* other : {"hybrid-2x4", "fsdp-8", "single"}) {
    CAPTURE(other);
    std::vector<std::string> mesh = std::string(other) == "single" ? std::vector<std::string>{} : mesh_args(test_mesh(other));
    std::string dir = run.dir.file(std::string("ck-") + other);
    Curve c = train(run, run.dir.file(std::string("out-") + other),
                    args(mesh, args(ckpt_args(dir, 20), {"--resume", step10})));
    check_same_curve(c, tail(full, 10), kFloatRounding);
  }
}

TEST_CASE("checkpoint: a crash during a save leaves the previous checkpoint as the latest") {
  TinyRun run;
  const auto hybrid = mesh_args(test_mesh("hybrid-2x4"));
  const std::string ck = run.dir.file("ck");
  auto crashed = run_train(run, run.dir.file("o1"), args(hybrid, ckpt_args(ck, 20)), "crash_in_save@20");
  check_failed_with(crashed, 1, "rank 0 (pid");
  CHECK_MESSAGE(crashed.output.find("exited with status 1") != std::string::npos, crashed.output);
  CHECK(fs::exists(ck + "/step_00000010/index.json"));
  CHECK_FALSE(fs::exists(ck + "/step_00000020"));
  CHECK(fs::exists(ck + "/step_00000020.tmp"));  // the half-written save, never renamed
  auto resumed = run_train(run, run.dir.file("o2"), args(hybrid, args(ckpt_args(ck, 20), {"--resume"})));
  REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.output);
  CHECK(resumed.output.find("resumed from " + ck + "/step_00000010 at step 10") != std::string::npos);
  CHECK(fs::exists(ck + "/step_00000020/index.json"));
  CHECK_FALSE(fs::exists(ck + "/step_00000020.tmp"));
}

TEST_CASE("checkpoint: bad checkpoints are refused with exit 2 naming the file, nothing overwritten") {
  // doctest runs the body once per subcase: train the good checkpoint once, for all of them.
  static TinyRun run;
  static const auto mesh = mesh_args(test_mesh("hybrid-4x2"));
  static const std::string step = [] {
    const std::string good = run.dir.file("good");
    train(run, run.dir.file("o"), args(mesh, ckpt_args(good, 10)));
    return good + "/step_00000010";
  }();
  REQUIRE(fs::exists(step + "/index.json"));

  auto resume_from = [&](const std::string& path, std::vector<std::string> extra = {}) {
    auto a = args(mesh, args(ckpt_args(run.dir.file("elsewhere"), 20), {"--resume", path}));
    return run_train(run, run.dir.file("o-bad"), args(a, extra));
  };
  auto copy_of = [&](const std::string& name) {
    std::string dir = run.dir.file(name);
    fs::copy(step, dir, fs::copy_options::recursive);
    return dir;
  };
  SUBCASE("missing rank file") {
    std::string dir = copy_of("missing");
    fs::remove(dir + "/rank_00001.safetensors");
    auto r = resume_from(dir);
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.output.find("rank_00001.safetensors is missing") != std::string::npos, r.output);
  }
  SUBCASE("truncated rank file") {
    std::string dir = copy_of("truncated");
    fs::resize_file(dir + "/rank_00000.safetensors", fs::file_size(dir + "/rank_00000.safetensors") / 2);
    auto r = resume_from(dir);
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.output.find("rank_00000.safetensors") != std::string::npos, r.output);
    CHECK(r.output.find("truncated") != std::string::npos);
  }
  SUBCASE("corrupted byte") {
    std::string dir = copy_of("corrupted");
    std::string path = dir + "/rank_00001.safetensors";
    std::string bytes = read_file(path);
    bytes[bytes.size() - 5] ^= 0x40;
    write_file(path, bytes);
    auto r = resume_from(dir);
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.output.find("checksum mismatch") != std::string::npos, r.output);
    CHECK(r.output.find("rank_00001.safetensors") != std::string::npos);
  }
  SUBCASE("a block past its array, or with an offset that would wrap around") {
    for (const int64_t bad : {int64_t{1} << 62, int64_t{-3}}) {
      CAPTURE(bad);
      std::string dir = copy_of("block-" + std::to_string(bad < 0 ? 0 : 1));
      auto index = nlohmann::json::parse(read_file(dir + "/index.json"));
      index["arrays"][0]["blocks"][0]["offset"][0] = bad;
      write_file(dir + "/index.json", index.dump(1));
      auto r = resume_from(dir);
      check_failed_with(r, 2, "does not lie inside its shape");
      CHECK(r.output.find(dir + "/index.json") != std::string::npos);
    }
  }
  SUBCASE("incompatible model shape") {
    auto r = resume_from(step, {"--set", "model.n_embd=64"});
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.output.find("model.n_embd") != std::string::npos, r.output);
    CHECK(r.output.find("index.json") != std::string::npos);
  }
  SUBCASE("no complete checkpoint") {
    fs::create_directories(run.dir.file("empty/step_00000030.tmp"));
    auto a = args(mesh, args(ckpt_args(run.dir.file("empty"), 20), {"--resume"}));
    auto r = run_train(run, run.dir.file("o-empty"), a);
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.output.find("no complete checkpoint in " + run.dir.file("empty")) != std::string::npos, r.output);
  }
  SUBCASE("the good checkpoint, never touched by the refusals above, still resumes") {
    auto ok = resume_from(step);
    CHECK_MESSAGE(ok.exit_code == 0, ok.output);
  }
}

TEST_CASE("checkpoint: export writes valid safetensors with GPT-2 names and shapes") {
  TinyRun run;
  train(run, run.dir.file("o"), args(mesh_args(test_mesh("tp-1x8")), ckpt_args(run.dir.file("ck"), 10)));
  const std::string out = run.dir.file("model.safetensors");
  auto r = run_process({binary_path("spmd-train"), "export", "--checkpoint", run.dir.file("ck/step_00000010"), "--out", out});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  std::string bytes = read_file(out);
  REQUIRE(bytes.size() > 8);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  REQUIRE(8 + n <= bytes.size());
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  // Offsets tile the data section exactly: sorted, contiguous, ending at the file's end.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    CHECK(it.value()["dtype"] == "F32");
    uint64_t numel = 1;
    for (auto s : it.value()["shape"]) numel *= s.get<uint64_t>();
    auto off = it.value()["data_offsets"];
    CHECK(off[1].get<uint64_t>() - off[0].get<uint64_t>() == numel * 4);
    ranges.push_back({off[0].get<uint64_t>(), off[1].get<uint64_t>()});
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t at = 0;
  for (auto [b, e] : ranges) {
    CHECK(b == at);
    at = e;
  }
  CHECK(8 + n + at == bytes.size());
  CHECK(header.size() == 28 + 1);
  CHECK(header["transformer.wte.weight"]["shape"] == nlohmann::json({72, 32}));  // padding dropped
  CHECK(header["transformer.wpe.weight"]["shape"] == nlohmann::json({16, 32}));
  CHECK(header["transformer.h.0.attn.c_attn.weight"]["shape"] == nlohmann::json({32, 96}));
  CHECK(header["transformer.h.0.attn.c_attn.bias"]["shape"] == nlohmann::json({96}));
  CHECK(header["transformer.h.1.attn.c_proj.weight"]["shape"] == nlohmann::json({32, 32}));
  CHECK(header["transformer.h.1.mlp.c_fc.weight"]["shape"] == nlohmann::json({32, 128}));
  CHECK(header["transformer.h.1.mlp.c_proj.weight"]["shape"] == nlohmann::json({128, 32}));
  CHECK(header["transformer.ln_f.bias"]["shape"] == nlohmann::json({32}));
  // The exported LayerNorm weights are the trained values (not all ones any more).
  auto ln = header["transformer.ln_f.weight"]["data_offsets"];
  float first = 0;
  std::memcpy(&first, bytes.data() + 8 + n + ln[0].get<uint64_t>(), 4);
  CHECK(first != 1.0f);
}
