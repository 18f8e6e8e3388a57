// Document starts by a running maximum: each token after an end-of-text token marks its own
// position, every other token 0, and the running maximum along the row is the latest start.
#include "train/documents.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "data/dataset_tokenizer.h"
#include "data/meta.h"
#include "util/error.h"

namespace spmd {

namespace {
// Fine-tuning data's document-end id (its meta.json's fine_tuning.document_end), else -1.
int64_t fine_tuning_document_end(const std::string& meta) {
  return meta.empty() ? -1 : read_meta_fine_tuning(meta).document_end;
}
}  // namespace

int64_t document_eot_token(const Config& config) {
  const DataConfig& d = config.data;
  const std::string& data = tokenizer_data_path(d);  // data.train, or a blend's first source
  const std::string meta = dataset_meta_path(data);
  // Packed fine-tuning examples always take the mask: no example attends to another.
  const int64_t example_end = fine_tuning_document_end(meta);
  if (!d.document_mask && example_end < 0) return -1;
  if (d.eot_token >= 0) return d.eot_token;
  if (example_end >= 0) return example_end;
  SPMD_CHECK(!meta.empty(),
             "data.eot_token: data.document_mask needs the id that ends a document, and {} has no meta.json beside "
             "it to take the tokenizer's end-of-text id from; set data.eot_token",
             data);
  const int64_t eot = read_meta(meta).eot_token;
  SPMD_CHECK(eot >= 0,
             "data.eot_token: data.document_mask needs the id that ends a document, and {} describes a vocabulary "
             "without an end-of-text token (only byte-level BPE has one); set data.eot_token",
             meta);
  return eot;
}

at::Tensor document_starts(const at::Tensor& ids, int64_t eot) {
  SPMD_ASSERT(ids.dim() == 2, "document_starts: ids must be (B, T), got {}", ids.sizes().vec());
  const int64_t T = ids.size(1);
  const at::Tensor positions = at::arange(T, ids.options().dtype(at::kLong));  // (T,)
  at::Tensor marks = at::zeros(ids.sizes(), positions.options());
  if (T > 1) {  // token t starts a document where token t - 1 ends one
    const at::Tensor after_eot = ids.narrow(1, 0, T - 1) == eot;
    marks.narrow(1, 1, T - 1).copy_(at::where(after_eot, positions.narrow(0, 1, T - 1), 0));
  }
  return std::get<0>(at::cummax(marks, 1));
}

}  // namespace spmd
