// bench_loader: how many tokens per second the data loader delivers (batches of 12 x 64 and
// 64 x 256 by default) from a token file, with and without the prefetch thread. Training consumes
// ~10-20k tokens/s; the loader should be far (>= 50x) ahead. --blend N compares one source with a
// blend of N (the file opened N times, weights 1..N: Grain's mix picks every row's source),
// interleaved rounds. The blend comparison produces each batch on the measuring thread (prefetch 0)
// and counts that thread's CPU time: the loader's cost per token, which a loaded machine's stolen
// time does not blur as it blurs wall-clock rates.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <vector>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "data/loader.h"
#include "util/error.h"

namespace {

struct Shape {
  int64_t batch, block;
};

// Tokens per second over `seconds` of back-to-back next() calls (at least 10 batches).
double measure(spmd::DataLoader& loader, Shape shape, double seconds, int64_t* batches_out) {
  loader.next();  // warm-up: page in the mapping, fill the queue
  using clock = std::chrono::steady_clock;
  auto start = clock::now();
  int64_t batches = 0, checksum = 0;
  double elapsed = 0;
  while (batches < 10 || elapsed < seconds) {
    spmd::Batch b = loader.next();
    checksum += b.inputs[0];  // keep the work observable
    ++batches;
    elapsed = std::chrono::duration<double>(clock::now() - start).count();
  }
  *batches_out = batches + (checksum < 0);
  return static_cast<double>(batches * shape.batch * shape.block) / elapsed;
}

double measure(const std::shared_ptr<const spmd::TokenDataset>& data, Shape shape, int prefetch,
               double seconds, int64_t* batches_out) {
  spmd::DataLoader loader(data, shape.batch, shape.block, 1337, 0, 1, prefetch);
  return measure(loader, shape, seconds, batches_out);
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Tokens per CPU-second of this thread over `seconds` of CPU time of next() calls that produce
// their batch here (prefetch 0; at least 10 batches).
double measure_cpu(spmd::DataLoader& loader, Shape shape, double seconds) {
  loader.next();  // warm-up: page in the mapping
  const double start = thread_cpu_seconds();
  int64_t batches = 0, checksum = 0;
  double used = 0;
  while (batches < 10 || used < seconds) {
    spmd::Batch b = loader.next();
    checksum += b.inputs[0];
    ++batches;
    used = thread_cpu_seconds() - start;
  }
  if (checksum < 0) std::cout << "";
  return static_cast<double>(batches * shape.batch * shape.block) / used;
}

// One source against a blend of `n`, alternating, `rounds` times each, in tokens per CPU-second of
// the producing thread; prints each round and the medians' ratio.
void compare_blend(const std::shared_ptr<const spmd::TokenDataset>& data, int n, Shape shape, double seconds,
                   int rounds) {
  std::vector<spmd::BlendSource> sources;
  for (int i = 0; i < n; ++i) sources.push_back({fmt::format("s{}", i), data, static_cast<double>(i + 1)});
  std::vector<double> one, blend;
  for (int round = 0; round < rounds; ++round) {
    spmd::DataLoader single(data, shape.batch, shape.block, 1337, 0, 1, /*prefetch=*/0);
    one.push_back(measure_cpu(single, shape, seconds));
    spmd::DataLoader mixed(sources, shape.batch, shape.block, 1337, 0, 1, /*prefetch=*/0);
    blend.push_back(measure_cpu(mixed, shape, seconds));
    std::cout << fmt::format("batch {:>3} x {:>3}  round {}: one source {:>8.1f}, blend of {} {:>8.1f} M tokens per CPU-second\n",
                             shape.batch, shape.block, round + 1, one.back() / 1e6, n, blend.back() / 1e6);
  }
  std::sort(one.begin(), one.end());
  std::sort(blend.begin(), blend.end());
  const double a = one[one.size() / 2], b = blend[blend.size() / 2];
  std::cout << fmt::format("batch {:>3} x {:>3}  median: one source {:.1f}, blend of {} {:.1f} M tokens per CPU-second ({:+.1f} %)\n",
                           shape.batch, shape.block, a / 1e6, n, b / 1e6, 100 * (b / a - 1));
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = "datasets/fortunes/train.bin";
  int64_t vocab_size = 65536;
  double seconds = 2;
  int blend = 0;
  int rounds = 5;
  CLI::App app{"Measure the data loader's throughput in tokens/s."};
  app.add_option("file", path, "Token file, directory or glob of shards")->capture_default_str();
  app.add_option("--vocab-size", vocab_size, "Token ids must be below this")->capture_default_str();
  app.add_option("--seconds", seconds, "Time per measurement")->capture_default_str();
  app.add_option("--blend", blend, "Compare one source with a blend of this many (1: the blend's bookkeeping alone)")->check(CLI::Range(1, 64));
  app.add_option("--rounds", rounds, "--blend: alternating rounds")->capture_default_str()->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    auto data = spmd::TokenDataset::open(path, vocab_size);
    std::cout << fmt::format("{}: {} tokens in {} file(s)\n", path, data->num_tokens(),
                             data->files().size());
    if (blend > 0) {
      for (Shape shape : {Shape{12, 64}, Shape{64, 256}}) compare_blend(data, blend, shape, seconds, rounds);
      return 0;
    }
    for (Shape shape : {Shape{12, 64}, Shape{64, 256}}) {
      for (int prefetch : {0, 2}) {
        int64_t batches = 0;
        double rate = measure(data, shape, prefetch, seconds, &batches);
        std::cout << fmt::format(
            "batch {:>3} x {:>3}  prefetch {}: {:>8.1f} M tokens/s  ({} batches, {:.0f}x a "
            "20k tokens/s trainer)\n",
            shape.batch, shape.block, prefetch, rate / 1e6, batches, rate / 20000);
      }
    }
    return 0;
  } catch (const spmd::UsageError& e) {
    std::cerr << "bench_loader: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "bench_loader: error: " << e.what() << "\n";
    return 1;
  }
}
