// BPE training with incremental pair counts (see bpe_train.h). Every word holds its current token
// ids; a pair's count is the sum over the words containing it of (occurrences x word count). A
// merge only touches the words that contain its pair. The best pair comes from a max-heap whose
// entries may be stale: counts of existing pairs only fall, so a popped entry whose count is out
// of date is pushed back with the current count.
#include "tokenizer/bpe_train.h"

#include <algorithm>
#include <queue>

#include "util/error.h"

namespace spmd {
namespace {

using Pair = std::pair<int32_t, int32_t>;

struct PairHash {
  size_t operator()(const Pair& p) const {
    return std::hash<uint64_t>()((uint64_t(uint32_t(p.first)) << 32) | uint32_t(p.second));
  }
};

struct Word {
  std::vector<int32_t> ids;
  int64_t count;
};

class MergeLearner {
 public:
  explicit MergeLearner(const std::unordered_map<std::string, int64_t>& counts);
  // Merges the best pair into a new token; false when no pair is left.
  bool merge_best();
  std::vector<BpeToken>& tokens() { return tokens_; }
  std::vector<BpeMerge>& merges() { return merges_; }

 private:
  struct Entry {
    int64_t count;
    Pair pair;
  };
  // Heap order: higher count first, then the smaller (left bytes, right bytes).
  bool worse(const Entry& a, const Entry& b) const {
    if (a.count != b.count) return a.count < b.count;
    const std::string& al = tokens_[a.pair.first].bytes;
    const std::string& bl = tokens_[b.pair.first].bytes;
    if (al != bl) return al > bl;  // std::string compares chars as unsigned (char_traits)
    return tokens_[a.pair.second].bytes > tokens_[b.pair.second].bytes;
  }
  void add_pairs(int32_t w, int64_t sign);
  auto cmp() const {
    return [this](const Entry& a, const Entry& b) { return worse(a, b); };
  }
  void push(const Pair& p) {
    heap_.push_back({counts_[p], p});
    std::push_heap(heap_.begin(), heap_.end(), cmp());
  }

  std::vector<BpeToken> tokens_;
  std::vector<BpeMerge> merges_;
  std::vector<Word> words_;
  std::unordered_map<Pair, int64_t, PairHash> counts_;
  std::unordered_map<Pair, std::vector<int32_t>, PairHash> where_;  // words that had the pair
  std::vector<Entry> heap_;
  std::vector<int64_t> visited_;  // per word: the merge that last rewrote it
};

MergeLearner::MergeLearner(const std::unordered_map<std::string, int64_t>& counts) {
  for (int b = 0; b < 256; ++b) tokens_.push_back({std::string(1, static_cast<char>(b)), false});
  // Sorted words make the pair lists (and so the run) independent of hash order.
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());
  for (const auto& [text, count] : sorted) {
    Word w{{}, count};
    for (unsigned char c : text) w.ids.push_back(c);
    words_.push_back(std::move(w));
  }
  visited_.assign(words_.size(), -1);
  for (int32_t w = 0; w < static_cast<int32_t>(words_.size()); ++w) add_pairs(w, +1);
  for (const auto& [pair, count] : counts_) heap_.push_back({count, pair});
  std::make_heap(heap_.begin(), heap_.end(), cmp());
}

// Adds (sign +1) or removes (-1) the pairs of word w; new occurrences are listed in where_.
void MergeLearner::add_pairs(int32_t w, int64_t sign) {
  const Word& word = words_[w];
  for (size_t i = 0; i + 1 < word.ids.size(); ++i) {
    Pair p{word.ids[i], word.ids[i + 1]};
    counts_[p] += sign * word.count;
    if (sign > 0) {
      auto& list = where_[p];
      if (list.empty() || list.back() != w) list.push_back(w);
    }
  }
}

bool MergeLearner::merge_best() {
  Pair best;
  for (;;) {
    if (heap_.empty()) return false;
    std::pop_heap(heap_.begin(), heap_.end(), cmp());
    Entry e = heap_.back();
    heap_.pop_back();
    const int64_t now = counts_[e.pair];
    if (now == e.count && now > 0) {
      best = e.pair;
      break;
    }
    if (now > 0) push(e.pair);  // stale: its count fell since it was pushed
  }
  const auto id = static_cast<int32_t>(tokens_.size());
  const auto rank = static_cast<int64_t>(merges_.size());
  tokens_.push_back({tokens_[best.first].bytes + tokens_[best.second].bytes, false});
  merges_.push_back({best.first, best.second, id});
  std::vector<Pair> fresh;  // pairs containing the new id
  for (int32_t w : std::vector<int32_t>(where_[best])) {
    if (visited_[w] == rank) continue;
    visited_[w] = rank;
    std::vector<int32_t>& ids = words_[w].ids;
    add_pairs(w, -1);
    size_t out = 0;
    for (size_t i = 0; i < ids.size(); ++i) {  // left to right, non-overlapping
      if (i + 1 < ids.size() && ids[i] == best.first && ids[i + 1] == best.second) {
        ids[out++] = id;
        ++i;
      } else {
        ids[out++] = ids[i];
      }
    }
    ids.resize(out);
    add_pairs(w, +1);
    for (size_t i = 0; i + 1 < ids.size(); ++i)
      if (ids[i] == id || ids[i + 1] == id) fresh.push_back({ids[i], ids[i + 1]});
  }
  where_.erase(best);
  std::sort(fresh.begin(), fresh.end());
  fresh.erase(std::unique(fresh.begin(), fresh.end()), fresh.end());
  for (const Pair& p : fresh) push(p);
  return true;
}

}  // namespace

void BpeTrainer::add_text(std::string_view text) {
  words_.clear();
  pretokenizer_.split(text, words_);
  for (std::string_view w : words_) ++counts_[std::string(w)];
}

BpeTokenizer BpeTrainer::train(int64_t num_merges,
                               const std::function<void(const std::string&)>& progress) const {
  SPMD_CHECK(num_merges >= 0, "bpe:N needs N >= 0 merges, got {}", num_merges);
  MergeLearner learner(counts_);
  for (int64_t m = 0; m < num_merges; ++m) {
    if (!learner.merge_best()) {
      if (progress)
        progress(fmt::format("bpe training: stopped after {} merges: no adjacent pair is left", m));
      break;
    }
    if (progress && (m + 1) % 1000 == 0)
      progress(fmt::format("bpe training: {} / {} merges", m + 1, num_merges));
  }
  std::vector<BpeToken> tokens = std::move(learner.tokens());
  tokens.push_back({kEndOfText, true});
  const auto eot = static_cast<int32_t>(tokens.size() - 1);
  return BpeTokenizer(std::move(tokens), std::move(learner.merges()), eot, "bpe training");
}

}  // namespace spmd
