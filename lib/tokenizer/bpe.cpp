// Byte-level BPE encoding and decoding (see bpe.h).
#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>

#include "util/error.h"

namespace spmd {

namespace {

bool is_concatenation(std::string_view whole, std::string_view left, std::string_view right) {
  return whole.size() == left.size() + right.size() && whole.substr(0, left.size()) == left &&
         whole.substr(left.size()) == right;
}

}  // namespace

BpeTokenizer::BpeTokenizer(std::vector<BpeToken> tokens, std::vector<BpeMerge> merges,
                           int32_t eot_id, const std::string& origin, BpeTextRules rules)
    : tokens_(std::move(tokens)), merges_(std::move(merges)), eot_id_(eot_id), text_rules_(std::move(rules)) {
  const auto n = static_cast<int32_t>(tokens_.size());
  SPMD_CHECK(eot_id_ >= 0 && eot_id_ < n && tokens_[eot_id_].special,
             "{}: no special {} token", origin, kEndOfText);
  std::fill(std::begin(byte_id_), std::end(byte_id_), -1);
  for (int32_t id = 0; id < n; ++id) {
    const BpeToken& t = tokens_[id];
    if (!t.special && t.bytes.size() == 1) byte_id_[static_cast<unsigned char>(t.bytes[0])] = id;
  }
  for (int b = 0; b < 256; ++b)
    SPMD_CHECK(byte_id_[b] >= 0, "{}: no token for the single byte 0x{:02X}", origin, b);
  rules_.reserve(merges_.size());
  for (size_t rank = 0; rank < merges_.size(); ++rank) {
    const BpeMerge& m = merges_[rank];
    SPMD_ASSERT(m.left >= 0 && m.left < n && m.right >= 0 && m.right < n && m.result >= 0 &&
                    m.result < n,
                "merge {} has an id outside the vocabulary", rank);
    SPMD_CHECK(!tokens_[m.left].special && !tokens_[m.right].special && !tokens_[m.result].special &&
                   is_concatenation(tokens_[m.result].bytes, tokens_[m.left].bytes, tokens_[m.right].bytes),
               "{}: merge {} does not produce the concatenation of its parts", origin, rank + 1);
    rules_.emplace(pair_key(m.left, m.right), Rule{static_cast<int32_t>(rank), m.result});
  }
  for (const int32_t id : text_rules_.added_in_text) {
    SPMD_ASSERT(id >= 0 && id < n, "added token id {} outside the vocabulary", id);
    SPMD_CHECK(!tokens_[id].bytes.empty(), "{}: added token {} is empty", origin, id);
    added_longest_first_.push_back(id);
    added_first_byte_[static_cast<unsigned char>(tokens_[id].bytes[0])] = true;
  }
  std::stable_sort(added_longest_first_.begin(), added_longest_first_.end(), [&](int32_t a, int32_t b) {
    return tokens_[a].bytes.size() > tokens_[b].bytes.size();
  });
  if (text_rules_.ignore_merges)
    for (int32_t id = 0; id < n; ++id)
      if (!tokens_[id].special) word_id_.emplace(tokens_[id].bytes, id);
}

bool BpeTokenizer::gpt2_rules() const {
  return text_rules_.pattern->is_gpt2() && text_rules_.added_in_text.empty() && !text_rules_.ignore_merges &&
         !text_rules_.eot_starts_documents && tokens_[eot_id_].bytes == kEndOfText;
}

BpeTokenizer::AddedMatch BpeTokenizer::next_added(std::string_view text, size_t from) const {
  if (added_longest_first_.empty()) return {};
  for (size_t p = from; p < text.size(); ++p) {
    if (!added_first_byte_[static_cast<unsigned char>(text[p])]) continue;
    for (const int32_t id : added_longest_first_) {
      const std::string& bytes = tokens_[id].bytes;
      if (text.compare(p, bytes.size(), bytes) == 0) return {p, bytes.size(), id};
    }
  }
  return {};
}

// Merges by rank with a heap of candidate pairs: O(L log L) per word, so a megabyte-long word
// (a run of letters with no space) stays fast. Stale candidates are skipped when popped.
void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  const auto n = static_cast<int32_t>(word.size());
  if (n == 0) return;
  if (text_rules_.ignore_merges) {
    auto it = word_id_.find(std::string(word));
    if (it != word_id_.end()) return out.push_back(it->second);
  }
  struct Symbol {
    int32_t id, next;  // next = index of the following live symbol, -1 at the end
  };
  struct Candidate {
    int32_t rank, pos, left, right;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Symbol> sym(n);
  std::vector<int32_t> prev(n);
  for (int32_t i = 0; i < n; ++i) {
    sym[i] = {byte_id_[static_cast<unsigned char>(word[i])], i + 1 < n ? i + 1 : -1};
    prev[i] = i - 1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || sym[pos].next < 0) return;
    auto it = rules_.find(pair_key(sym[pos].id, sym[sym[pos].next].id));
    if (it != rules_.end()) heap.push({it->second.rank, pos, sym[pos].id, sym[sym[pos].next].id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol& s = sym[c.pos];
    if (s.id != c.left || s.next < 0 || sym[s.next].id != c.right) continue;  // stale
    const int32_t right = s.next;
    s.id = merges_[c.rank].result;
    s.next = sym[right].next;
    if (s.next >= 0) prev[s.next] = c.pos;
    sym[right].id = -1;
    push(prev[c.pos]);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  Pretokenizer pretokenizer(text_rules_.pattern);
  std::vector<std::string_view> words;
  std::vector<int32_t> ids;
  split_added(
      text,
      [&](std::string_view piece) {
        words.clear();
        pretokenizer.split(piece, words);
        for (std::string_view w : words) encode_word(w, ids);
      },
      [&](int32_t id) { ids.push_back(id); });
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) {
    SPMD_CHECK(id >= 0 && id < vocab_size(), "token id {} is outside the vocabulary of {}", id,
               vocab_size());
    out += tokens_[static_cast<size_t>(id)].bytes;
  }
  return out;
}

BpeEncoder::BpeEncoder(const BpeTokenizer& tokenizer)
    : tokenizer_(tokenizer), pretokenizer_(tokenizer.rules().pattern), cache_(std::make_unique<WordCache>()) {}

const BpeEncoder::Ids& BpeEncoder::cached(std::string_view word) {
  auto it = cache_->ids_of.find(word);
  if (it != cache_->ids_of.end()) return it->second;
  if (cache_->ids_of.size() >= kMaxCachedWords) cache_ = std::make_unique<WordCache>();
  word_ids_.clear();
  tokenizer_.encode_word(word, word_ids_);
  auto& arena = cache_->arena;
  auto* key = static_cast<char*>(arena.allocate(word.size(), 1));
  std::copy(word.begin(), word.end(), key);
  auto* ids = static_cast<int32_t*>(arena.allocate(word_ids_.size() * sizeof(int32_t), alignof(int32_t)));
  std::copy(word_ids_.begin(), word_ids_.end(), ids);
  const Ids entry{ids, word_ids_.size()};
  return cache_->ids_of.emplace(std::string_view(key, word.size()), entry).first->second;
}

void BpeEncoder::encode(std::string_view text, std::vector<int32_t>& out) {
  tokenizer_.split_added(
      text,
      [&](std::string_view piece) {
        words_.clear();
        pretokenizer_.split(piece, words_);
        for (std::string_view w : words_) {
          const Ids& ids = cached(w);
          out.insert(out.end(), ids.data, ids.data + ids.size);
        }
      },
      [&](int32_t id) { out.push_back(id); });
}

}  // namespace spmd
