// Packed documents (data.document_mask, docs/packing.md): which end-of-text id ends a document,
// and each token's document start within its window, derived from the batch's tokens. The model
// takes the starts as data, as it takes the targets: attention stays inside a document and
// positions count from its start.
#pragma once
#include <cstdint>

#include <ATen/ATen.h>

#include "config/config.h"

namespace spmd {

// The id that ends a document under data.document_mask: data.eot_token, else the end-of-text id
// of data.train's tokenizer (its meta.json); -1 when document_mask is off. UsageError naming
// data.eot_token where there is none.
int64_t document_eot_token(const Config& config);

// ids (B, T) int64 -> (B, T) int64: the window position where each token's document starts. An
// `eot` token belongs to the document it ends; the next token starts a new one; a window that
// begins mid-document starts one at 0. Non-decreasing along each row, starts[b, t] <= t.
at::Tensor document_starts(const at::Tensor& ids, int64_t eot);

}  // namespace spmd
