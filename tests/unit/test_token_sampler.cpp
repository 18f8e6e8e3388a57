// choose_token: greedy, top-k, temperature, and draws that follow the softmax.
#include <cmath>
#include <vector>

#include "generate/token_sampler.h"

#include "doctest_check.h"

using spmd::choose_token;
using spmd::SamplingOptions;

TEST_CASE("token sampler: temperature 0 is the argmax, the lowest id among equals") {
  at::Tensor logits = at::tensor({0.5, 2.0, -1.0, 2.0, 1.9}, at::kFloat);
  SamplingOptions greedy{0.0, 0, 1};
  for (int64_t position = 0; position < 10; ++position) CHECK(choose_token(logits, greedy, position) == 1);
}

TEST_CASE("token sampler: top-k 1 is greedy whatever the draw, the same (seed, position) draws the same token") {
  at::Tensor logits = at::randn({50}, at::kFloat);
  const int64_t best = logits.argmax().item<int64_t>();
  for (int64_t position = 0; position < 20; ++position) {
    CHECK(choose_token(logits, SamplingOptions{1.0, 1, 9}, position) == best);
    const int64_t a = choose_token(logits, SamplingOptions{1.0, 0, 9}, position);
    CHECK(choose_token(logits.to(at::kDouble), SamplingOptions{1.0, 0, 9}, position) == a);
  }
}

TEST_CASE("token sampler: draws follow softmax(logits / T) over the top k") {
  at::Tensor logits = at::tensor({1.0, 0.0, 2.0, -3.0, 0.5}, at::kDouble);
  const double temperature = 0.8;
  const int64_t k = 3;  // ids 2, 0, 4
  std::vector<double> counts(5, 0.0);
  const int64_t draws = 20000;
  for (int64_t position = 0; position < draws; ++position)
    counts[static_cast<size_t>(choose_token(logits, SamplingOptions{temperature, k, 42}, position))] += 1;
  CHECK(counts[1] == 0);
  CHECK(counts[3] == 0);
  const double z = std::exp(2.0 / temperature) + std::exp(1.0 / temperature) + std::exp(0.5 / temperature);
  const std::vector<std::pair<int, double>> expected{{2, std::exp(2.0 / temperature) / z},
                                                     {0, std::exp(1.0 / temperature) / z},
                                                     {4, std::exp(0.5 / temperature) / z}};
  for (const auto& [id, p] : expected) {
    const double sigma = std::sqrt(p * (1 - p) / draws);
    CHECK_MESSAGE(std::abs(counts[static_cast<size_t>(id)] / draws - p) < 5 * sigma, "id ", id);
  }
  // Another seed, another sequence.
  int64_t differ = 0;
  for (int64_t position = 0; position < 100; ++position)
    differ += choose_token(logits, SamplingOptions{temperature, k, 42}, position) !=
              choose_token(logits, SamplingOptions{temperature, k, 43}, position);
  CHECK(differ > 20);
}
