// bench_bpe: byte-level BPE encoding throughput (MB/s, one thread) of a tokenizer directory on a
// text file: the first pass starts with an empty word cache (cold), later passes reuse it (warm).
// Usage: bench_bpe TOKENIZER_DIR TEXT_FILE [passes=3]
#include <chrono>
#include <cstdio>
#include <string>

#include "tokenizer/bpe.h"
#include "tokenizer/bpe_files.h"
#include "util/mapped_file.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_bpe TOKENIZER_DIR TEXT_FILE [passes=3]\n");
    return 2;
  }
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const spmd::BpeTokenizer tokenizer = spmd::read_tokenizer_dir(argv[1]);
  const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const spmd::MappedFile file(argv[2]);
  const std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
  const int passes = argc > 3 ? std::stoi(argv[3]) : 3;
  std::printf("vocab %lld ids, %zu merges, loaded in %.3f s; text %.2f MB\n",
              static_cast<long long>(tokenizer.vocab_size()), tokenizer.merges().size(), load_s,
              text.size() / 1e6);
  spmd::BpeEncoder encoder(tokenizer);
  std::vector<int32_t> ids;
  for (int pass = 0; pass < passes; ++pass) {
    ids.clear();
    const auto start = Clock::now();
    encoder.encode(text, ids);
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("pass %d (%s cache): %zu tokens, %.3f s, %.1f MB/s, %.2f bytes/token\n", pass + 1,
                pass == 0 ? "cold" : "warm", ids.size(), s, text.size() / 1e6 / s,
                double(text.size()) / ids.size());
  }
  return 0;
}
