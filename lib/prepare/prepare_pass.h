// One pass of prepare over the corpus: batches (input_batches.h) go through a job on the
// workers (ordered_pipeline.h) and their results come back in the input's order, with progress
// lines and cancellation in one place.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "prepare/documents.h"
#include "prepare/ordered_pipeline.h"
#include "prepare/prepare.h"
#include "prepare/prepare_output.h"
#include "util/error.h"

namespace spmd {

// Running totals of a pass, for the progress line.
struct PassTotals {
  uint64_t text_bytes = 0;
  int64_t documents = 0;
  int64_t tokens = 0;
};

// make_job() makes one worker's job; consume(result, totals) takes the results in order.
template <class Result>
void run_corpus_pass(const PrepareOptions& options, const std::vector<std::string>& files,
                     Progress& progress,
                     const std::function<std::function<Result(InputBatch&)>()>& make_job,
                     const std::function<void(Result&, PassTotals&)>& consume) {
  struct Tagged {
    Result result;
    uint64_t file_bytes_read = 0, text_bytes = 0;
  };
  using TaggedJob = std::function<Tagged(InputBatch&)>;
  BatchReader reader(files);
  const int workers = options.workers > 0 ? options.workers : available_cores();
  OrderedPipeline<Tagged> pipeline(reader, workers, [&]() -> TaggedJob {
    return [job = make_job()](InputBatch& batch) {
      Tagged t;
      t.file_bytes_read = batch.file_bytes_read;
      t.text_bytes = batch.bytes.size();
      t.result = job(batch);
      return t;
    };
  });
  PassTotals totals;
  Tagged tagged;
  while (pipeline.next(tagged)) {
    if (options.cancelled && options.cancelled())
      throw RuntimeError("interrupted: no output was kept");
    consume(tagged.result, totals);
    totals.text_bytes += tagged.text_bytes;
    progress.update(tagged.file_bytes_read, totals.text_bytes, totals.documents, totals.tokens);
  }
}

// Counts documents, and those that are not valid UTF-8, over segments seen in order.
class DocumentTally {
 public:
  void add(bool starts_document, bool valid_utf8) {
    if (starts_document) {
      close();
      ++documents_;
    }
    current_invalid_ = current_invalid_ || !valid_utf8;
  }
  void close() {
    if (current_invalid_) ++non_utf8_;
    current_invalid_ = false;
  }
  int64_t documents() const { return documents_; }
  int64_t non_utf8() const { return non_utf8_; }

 private:
  int64_t documents_ = 0, non_utf8_ = 0;
  bool current_invalid_ = false;
};

}  // namespace spmd
