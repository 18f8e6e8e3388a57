// Weighted blends: Grain's integer proportions, each row being its source's own sample, the split
// over data-parallel ranks, exact resume, and a resume with new weights (no sample repeated or
// skipped, the new mix from the resume step on). The order itself is checked against grain in
// tests/oracle/test_blend_order.py.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/blend.h"
#include "data/loader.h"
#include "test_support.h"
#include "util/error.h"

namespace {

using spmd::Batch;
using spmd::BlendSource;
using spmd::DataLoader;
using spmd::LoaderState;
using spmd::test::TempDir;

constexpr int64_t kBatch = 8, kBlock = 16, kSeed = 77;

struct Corpora {
  TempDir dir;
  std::vector<std::shared_ptr<const spmd::TokenDataset>> data;
  Corpora() {
    const int64_t sizes[] = {3000, 5200, 1900};  // 187, 324 and 118 windows
    for (int i = 0; i < 3; ++i) {
      const std::string path = dir.file("s" + std::to_string(i) + ".bin");
      spmd::test::write_token_file(path, sizes[i], 500, 10 + i);
      data.push_back(spmd::TokenDataset::open(path, 500));
    }
  }
  std::vector<BlendSource> blend(const std::vector<double>& weights) const {
    const char* names[] = {"web", "code", "books"};
    std::vector<BlendSource> sources;
    for (size_t i = 0; i < weights.size(); ++i) sources.push_back({names[i], data[i], weights[i]});
    return sources;
  }
};

std::unique_ptr<DataLoader> loader(std::vector<BlendSource> sources, int64_t dp_index = 0, int64_t dp_size = 1) {
  return std::make_unique<DataLoader>(std::move(sources), kBatch, kBlock, kSeed, dp_index, dp_size, /*prefetch=*/1);
}

// Rows as (source, sample index within it, window, first input token), for comparison.
struct Row {
  int64_t source, sample, window, first_token;
  bool operator==(const Row& o) const {
    return source == o.source && sample == o.sample && window == o.window && first_token == o.first_token;
  }
};
// A failed comparison of rows prints them.
std::ostream& operator<<(std::ostream& os, const Row& r) {
  return os << "{source " << r.source << ", sample " << r.sample << ", window " << r.window << ", first token "
            << r.first_token << "}";
}
std::vector<Row> rows_of(const Batch& b) {
  std::vector<Row> rows;
  for (int64_t r = 0; r < b.rows; ++r)
    rows.push_back({b.source_ids[r], b.source_samples[r], b.window_ids[r], b.inputs[r * b.seq]});
  return rows;
}
std::vector<Row> read_steps(DataLoader& l, int steps) {
  std::vector<Row> rows;
  for (int s = 0; s < steps; ++s)
    for (const Row& r : rows_of(l.next())) rows.push_back(r);
  return rows;
}

}  // namespace

TEST_CASE("data blend: Grain's integer proportions, and the picks' counts") {
  CHECK(spmd::mix_proportions({0.7, 0.3}) == std::vector<int64_t>{233, 100});
  CHECK(spmd::mix_proportions({1.0, 2.7, 0.37}) == std::vector<int64_t>{270, 729, 100});
  CHECK(spmd::mix_proportions({5, 5}) == std::vector<int64_t>{100, 100});
  CHECK_THROWS_AS(spmd::mix_proportions({1, 0}), spmd::UsageError);
  CHECK_THROWS_AS(spmd::mix_proportions({1, 2e10}), spmd::UsageError);
  // Every source's picks are numbered 0, 1, 2, ... in order, and mix_counts counts them.
  const std::vector<int64_t> p = spmd::mix_proportions({1.0, 2.7, 0.37});
  std::vector<int64_t> next(3, 0);
  for (int64_t k = 0; k < 5000; ++k) {
    const spmd::MixPick pick = spmd::mix_pick(k, p);
    CHECK(pick.index == next[pick.source]);
    ++next[pick.source];
    if (k % 997 == 0) CHECK(spmd::mix_counts(k + 1, p) == next);
  }
  // The tabulated period gives the same picks, over several periods and far out.
  const spmd::MixOrder order(p);
  for (int64_t k : {int64_t{0}, int64_t{1098}, int64_t{1099}, int64_t{5000}, int64_t{123456789}, int64_t{1} << 45})
    for (int64_t d = 0; d < 50; ++d) {
      const spmd::MixPick a = order.pick(k + d), b = spmd::mix_pick(k + d, p);
      CHECK((a.source == b.source && a.index == b.index));
    }
  // A batch's consecutive picks, across period ends, equal the picks one at a time.
  for (int64_t k : {int64_t{0}, int64_t{1090}, int64_t{123456789}}) {
    std::vector<spmd::MixPick> run(30);
    order.picks(k, run);
    for (int64_t d = 0; d < 30; ++d) {
      const spmd::MixPick b = spmd::mix_pick(k + d, p);
      CHECK((run[static_cast<size_t>(d)].source == b.source && run[static_cast<size_t>(d)].index == b.index));
    }
  }
  // Far into a long run, without overflow: the counts still follow the proportions.
  const std::vector<int64_t> far = spmd::mix_counts(int64_t{1} << 50, p);
  CHECK(far[0] + far[1] + far[2] == int64_t{1} << 50);
  CHECK(static_cast<double>(far[1]) / static_cast<double>(far[0]) == doctest::Approx(729.0 / 270.0));
}

TEST_CASE("data blend: each row is sample j of its source's own order, and the ranks split the global batch") {
  Corpora c;
  auto blend = loader(c.blend({0.5, 0.3, 0.2}));
  const std::vector<Row> rows = read_steps(*blend, 120);  // 960 samples: every source wraps an epoch
  std::map<int64_t, std::vector<Row>> alone;
  for (int64_t s = 0; s < 3; ++s) {
    DataLoader single(c.data[s], kBatch, kBlock, kSeed, 0, 1, 0);
    alone[s] = read_steps(single, 100);
  }
  std::vector<int64_t> drawn(3, 0);
  for (const Row& r : rows) {
    CAPTURE(r.source);
    CHECK(r.sample == drawn[r.source]++);
    const Row& own = alone[r.source][static_cast<size_t>(r.sample)];
    CHECK(r.window == own.window);
    CHECK(r.first_token == own.first_token);
  }
  CHECK(drawn[0] > 187);  // a wrapped epoch
  // Two data-parallel ranks read the two halves of each global batch.
  auto first = loader(c.blend({0.5, 0.3, 0.2}), 0, 2), second = loader(c.blend({0.5, 0.3, 0.2}), 1, 2);
  for (int step = 0; step < 30; ++step) {
    std::vector<Row> both = rows_of(first->next());
    for (const Row& r : rows_of(second->next())) both.push_back(r);
    CHECK(std::equal(both.begin(), both.end(), rows.begin() + step * kBatch));
  }
}

TEST_CASE("data blend: the position goes through JSON and resumes exactly, on another data-parallel split") {
  Corpora c;
  auto whole = loader(c.blend({0.5, 0.3, 0.2}));
  const std::vector<Row> want = read_steps(*whole, 40);
  auto first = loader(c.blend({0.5, 0.3, 0.2}));
  read_steps(*first, 17);
  const nlohmann::json j = first->state();
  CHECK(j.at("samples") == 17 * kBatch);
  CHECK(j.at("sources").size() == 3);
  const LoaderState saved = j.get<LoaderState>();
  CHECK(saved == first->state());
  auto a = loader(c.blend({0.5, 0.3, 0.2}), 0, 2), b = loader(c.blend({0.5, 0.3, 0.2}), 1, 2);
  a->restore(saved);
  b->restore(saved);
  CHECK(a->reweight_note().empty());
  for (int step = 17; step < 40; ++step) {
    std::vector<Row> both = rows_of(a->next());
    for (const Row& r : rows_of(b->next())) both.push_back(r);
    CHECK(std::equal(both.begin(), both.end(), want.begin() + step * kBatch));
  }
  // Weights that scale to the same proportions are the same blend: no new segment.
  auto same = loader(c.blend({5, 3, 2}));
  same->restore(saved);
  CHECK(same->reweight_note().empty());
  // One source's position cannot resume a blend, nor the other way round.
  DataLoader single(c.data[0], kBatch, kBlock, kSeed, 0, 1, 0);
  CHECK_THROWS_AS(single.restore(saved), spmd::UsageError);
  CHECK_THROWS_AS(same->restore(single.state()), spmd::UsageError);
}

TEST_CASE("data blend: new weights on resume restart the mix there, each source going on from its next sample") {
  Corpora c;
  auto before = loader(c.blend({0.5, 0.3, 0.2}));
  const std::vector<Row> first_part = read_steps(*before, 11);
  auto after = loader(c.blend({0.1, 0.1, 0.8}));
  after->restore(before->state());
  CHECK(after->reweight_note().find("from step 12 (sample 88)") != std::string::npos);
  CHECK(after->reweight_note().find("[web 0.5, code 0.3, books 0.2] to [web 0.1, code 0.1, books 0.8]") != std::string::npos);
  const std::vector<Row> second_part = read_steps(*after, 20);
  // The sources from the resume step on are those a fresh blend with the new weights picks from its start.
  auto fresh = loader(c.blend({0.1, 0.1, 0.8}));
  const std::vector<Row> fresh_rows = read_steps(*fresh, 20);
  for (size_t k = 0; k < second_part.size(); ++k) CHECK(second_part[k].source == fresh_rows[k].source);
  // No sample repeated or skipped: each source's samples run 0, 1, 2, ... across the change.
  std::vector<int64_t> drawn(3, 0);
  for (const auto* part : {&first_part, &second_part})
    for (const Row& r : *part) CHECK(r.sample == drawn[r.source]++);
  // Resumed again from the reweighted state with the same new weights: continues exactly.
  auto again = loader(c.blend({0.1, 0.1, 0.8}));
  auto reference = loader(c.blend({0.1, 0.1, 0.8}));
  reference->restore(before->state());
  read_steps(*reference, 5);
  again->restore(reference->state());
  CHECK(again->reweight_note().empty());
  CHECK(read_steps(*again, 15) == std::vector<Row>(second_part.begin() + 5 * kBatch, second_part.end()));
  // A source new to the blend starts at its first sample.
  auto grown = loader(c.blend({0.5, 0.3, 0.2}));
  auto two = loader(c.blend({0.5, 0.5}));
  read_steps(*two, 3);
  grown->restore(two->state());
  std::vector<int64_t> next(3, -1);
  for (const Row& r : read_steps(*grown, 10))
    if (next[r.source] < 0) next[r.source] = r.sample;
  CHECK(next[2] == 0);
  CHECK(next[0] > 0);
}
