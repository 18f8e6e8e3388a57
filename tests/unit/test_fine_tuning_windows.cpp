// Fine-tuning data in the loader and the loss's arithmetic: targets that are not marked become -1
// in every row, whatever the data-parallel split, in a blend too; every rank counts the whole
// step's targets alike; windows of another size are refused. And the averaging: on unbalanced
// examples the step's loss over its targets (each microbatch's mean over its positions times
// positions / targets of the step) equals the targets' mean, where a mean of per-microbatch target
// means does not.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <numeric>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "test_support.h"
#include "util/error.h"

namespace {

using spmd::test::TempDir;

constexpr int64_t kFtBlock = 8, kFtVocab = 50;

// `windows` windows of kFtBlock tokens (+1 padding token): token i is i % kFtVocab, marked a target
// when i % 3 == 1, with window w's tokens all targets when w % 4 == 0 (one long answer among short).
std::shared_ptr<const spmd::TokenDataset> write_marked(const TempDir& dir, const std::string& name, int64_t windows) {
  const int64_t n = windows * kFtBlock + 1;
  std::vector<uint16_t> ids(static_cast<size_t>(n));
  std::string marks(static_cast<size_t>(n), '\0');
  for (int64_t i = 0; i < n; ++i) {
    ids[static_cast<size_t>(i)] = static_cast<uint16_t>(i % kFtVocab);
    const bool long_answer = (i / kFtBlock) % 4 == 0 && i % kFtBlock != 0;
    marks[static_cast<size_t>(i)] = (i + 1 < n && (long_answer || i % 3 == 1)) ? 1 : 0;
  }
  spmd::test::write_file(dir.file(name + ".bin"), std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 2));
  spmd::test::write_file(dir.file(name + ".targets.bin"), marks);
  nlohmann::json chars = nlohmann::json::array();
  for (int i = 0; i < kFtVocab; ++i) chars.push_back(std::string(1, static_cast<char>('0' + i)));
  spmd::test::write_file(dir.file("meta.json"),
                         nlohmann::json{{"vocabulary", chars}, {"vocab_size", kFtVocab}, {"dtype", "uint16"},
                                        {"fine_tuning", {{"format", "chat"}, {"train_on", "assistant"},
                                                         {"block_size", kFtBlock}, {"document_end", 0}}}}
                             .dump());
  return spmd::TokenDataset::open(dir.file(name + ".bin"), kFtVocab);
}

// Every rank's rows of one step, in global order, and each rank's step_targets.
spmd::Batch global_rows(std::vector<spmd::BlendSource> sources, int64_t batch, int64_t dp_size,
                        std::vector<int64_t>& step_targets) {
  spmd::Batch all;
  for (int64_t d = 0; d < dp_size; ++d) {
    spmd::DataLoader loader(sources, batch, kFtBlock, 5, d, dp_size, 0);
    loader.next();  // the second step: a shuffled position, not the start
    spmd::Batch b = loader.next();
    step_targets.push_back(b.step_targets);
    all.inputs.insert(all.inputs.end(), b.inputs.begin(), b.inputs.end());
    all.targets.insert(all.targets.end(), b.targets.begin(), b.targets.end());
  }
  return all;
}

int64_t count_targets(const std::vector<int64_t>& targets) {
  return std::count_if(targets.begin(), targets.end(), [](int64_t t) { return t >= 0; });
}

}  // namespace

TEST_CASE("fine-tuning windows: unmarked targets are -1, and every rank counts the step's targets alike") {
  TempDir dir;
  const auto data = write_marked(dir, "train", 64);
  for (const bool blend : {false, true}) {
    CAPTURE(blend);
    std::vector<spmd::BlendSource> sources{{blend ? "a" : "", data, 1.0}};
    if (blend) sources.push_back({"b", data, 2.0});
    std::vector<int64_t> one_rank, four_ranks;
    const spmd::Batch whole = global_rows(sources, 8, 1, one_rank);
    const spmd::Batch split = global_rows(sources, 8, 4, four_ranks);
    CHECK((whole.inputs == split.inputs));
    CHECK((whole.targets == split.targets));  // the marks travel with the rows
    const int64_t marked = count_targets(whole.targets);
    CHECK(marked > 0);
    CHECK(marked < static_cast<int64_t>(whole.targets.size()));
    CHECK(one_rank[0] == marked);
    for (int64_t n : four_ranks) CHECK(n == marked);
    for (size_t i = 0; i < whole.targets.size(); ++i) {  // a target keeps its id, the rest are -1
      const int64_t next = (whole.inputs[i] + 1) % kFtVocab;
      CHECK((whole.targets[i] == next || whole.targets[i] == -1));
    }
  }
}

TEST_CASE("fine-tuning windows: pretraining data has no step_targets, and packed data refuses another window") {
  TempDir dir;
  const auto data = write_marked(dir, "train", 16);
  CHECK_THROWS_WITH_AS(spmd::DataLoader(data, 4, kFtBlock * 2, 1, 0, 1, 0), doctest::Contains("fine_tuning.block_size"),
                       spmd::UsageError);
  CHECK_THROWS_WITH_AS(spmd::DataLoader(data, 4, kFtBlock, 1, 0, 1, 0, 4), doctest::Contains("fine_tuning.block_size"),
                       spmd::UsageError);
  TempDir plain_dir;
  spmd::test::write_file(plain_dir.file("p.bin"), std::string(2 * 200, '\0'));
  spmd::DataLoader plain(spmd::TokenDataset::open(plain_dir.file("p.bin"), kFtVocab), 4, kFtBlock, 1, 0, 1, 0);
  const spmd::Batch b = plain.next();
  CHECK(b.step_targets == -1);
  CHECK(count_targets(b.targets) == static_cast<int64_t>(b.targets.size()));
}

TEST_CASE("fine-tuning loss: positions / step targets times each microbatch's mean is the targets' mean, and a mean of microbatch means is not") {
  // Token losses of an unbalanced step: microbatch 0 holds one long, well-learned answer (many
  // targets of low loss), microbatch 1 a few short answers of high loss.
  const int64_t positions = 16;  // per microbatch
  const std::vector<std::vector<std::pair<double, bool>>> microbatches{
      std::vector<std::pair<double, bool>>(positions, {0.3, true}),
      {{5.0, true}, {4.0, false}, {4.5, true}, {3.0, false}, {6.0, true}, {1.0, false}, {2.0, false}, {2.0, false},
       {2.0, false}, {2.0, false}, {2.0, false}, {2.0, false}, {2.0, false}, {2.0, false}, {2.0, false}, {2.0, false}}};
  double sum = 0, per_microbatch = 0;
  int64_t targets = 0;
  for (const auto& m : microbatches) {
    double s = 0;
    int64_t t = 0;
    for (const auto& [loss, target] : m) s += target ? loss : 0, t += target;
    sum += s, targets += t, per_microbatch += s / static_cast<double>(t) / static_cast<double>(microbatches.size());
  }
  const double right = sum / static_cast<double>(targets);
  // What the step computes: each microbatch's head mean over its positions (the sum of its
  // targets' losses over positions), scaled, averaged over the microbatches.
  const double scale = static_cast<double>(positions * 2) / static_cast<double>(targets);
  double step = 0;
  for (const auto& m : microbatches) {
    double s = 0;
    for (const auto& [loss, target] : m) s += target ? loss : 0;
    step += s / static_cast<double>(positions) * scale / 2;
  }
  CHECK(step == doctest::Approx(right).epsilon(1e-12));
  CHECK(std::abs(per_microbatch / right - 1) > 1.0);  // ~(0.3 + 5.17) / 2 against 0.82: far from it
}
