// dump_batches: the training batches a config's loader yields, in order, as one uint16 file of
// rows of block_size + 1 tokens (the inputs and the last target). With bench/nanogpt_eager.py
// --batches it lets eager PyTorch train on exactly spmd-train's data (bench/compare_with_eager.sh
// --full). One data-parallel rank: the global batch. data.train or a blend (data.sources), in the
// order training reads it.
#include <cstdint>
#include <fstream>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "config/config.h"
#include "data/loader.h"
#include "train/training_data.h"
#include "util/error.h"
#include "util/guarded_main.h"

int main(int argc, char** argv) {
  return spmd::guarded_main("dump_batches", [&] {
    std::string config_path, out_path;
    std::vector<std::string> overrides;
    int64_t steps = 0;
    CLI::App app{"dump_batches: write a config's training batches, in loader order, as uint16 rows"};
    app.add_option("--config", config_path, "YAML config")->required();
    app.add_option("--set", overrides, "override a key: dotted.key=YAML_VALUE (repeatable)");
    app.add_option("--steps", steps, "batches to write (default: train.steps)");
    app.add_option("--out", out_path, "output file")->required();
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      int code = app.exit(e);
      return code == 0 ? 0 : 2;
    }
    const spmd::Config c = spmd::load_config(config_path, overrides);
    if (steps <= 0) steps = c.train.steps;
    SPMD_CHECK(c.model.vocab_size <= 65536, "model.vocab_size {} has ids past uint16, the rows' type (nanogpt_eager.py "
               "reads uint16)", c.model.vocab_size);
    std::unique_ptr<spmd::DataLoader> loader = spmd::make_training_loader(c, 0, 1, /*prefetch=*/0);
    std::ofstream out(out_path, std::ios::binary);
    SPMD_CHECK(out.good(), "cannot write {}", out_path);
    std::vector<uint16_t> row;
    for (int64_t s = 0; s < steps; ++s) {
      spmd::Batch b = loader->next();
      for (int64_t r = 0; r < b.rows; ++r) {
        row.assign(b.inputs.begin() + r * b.seq, b.inputs.begin() + (r + 1) * b.seq);
        row.push_back(static_cast<uint16_t>(b.targets[(r + 1) * b.seq - 1]));
        out.write(reinterpret_cast<const char*>(row.data()), static_cast<std::streamsize>(row.size() * 2));
      }
    }
    SPMD_CHECK(out.good(), "writing {} failed", out_path);
    fmt::print("dump_batches: {} batches of {} x {} tokens -> {}\n", steps, c.data.batch_size, c.model.block_size + 1,
               out_path);
    return 0;
  });
}
