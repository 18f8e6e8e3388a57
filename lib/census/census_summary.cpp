// The sums behind census_summary.h.
#include "census/census_summary.h"

#include <algorithm>
#include <tuple>

#include <c10/core/ScalarType.h>

namespace spmd::census {

namespace {

void add_kinds(CensusSummary& sum, const CensusLog& log) {
  std::map<std::string, KindRow> kinds;
  for (const Launch& l : log.launches) {
    KindRow& k = kinds[l.name];
    k.name = l.name;
    ++k.calls;
    for (const auto* list : {&l.inputs, &l.outputs})
      for (const TensorInfo& t : *list) k.dtypes.insert(c10::toString(t.dtype));
    k.flops += l.cost.flops;
    k.bytes_read += l.cost.bytes_read;
    k.bytes_written += l.cost.bytes_written;
    k.product = l.cost.product;
  }
  for (auto& [name, k] : kinds) {
    k.time = k.product ? roofline(sum.gpu, k.flops, 0)
                       : roofline(sum.gpu, 0, static_cast<double>(k.bytes_read + k.bytes_written));
    sum.kinds.push_back(k);
  }
  std::stable_sort(sum.kinds.begin(), sum.kinds.end(),
                   [](const KindRow& a, const KindRow& b) { return a.time.ms() > b.time.ms(); });
}

void add_regions(CensusSummary& sum, const CensusLog& log) {
  std::vector<RegionRow> rows;
  for (const Launch& l : log.launches) {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const RegionRow& r) { return r.name == l.region; });
    if (it == rows.end()) {
      it = rows.insert(rows.end(), RegionRow());
      it->name = l.region;
    }
    ++it->launches;
    it->flops += l.cost.flops;
    if (!l.cost.product) it->bytes_outside += l.cost.bytes_read + l.cost.bytes_written;
  }
  for (RegionRow& r : rows) r.time = roofline(sum.gpu, r.flops, static_cast<double>(r.bytes_outside));
  // The model's regions first, in the order they ran; then the rest.
  std::stable_partition(rows.begin(), rows.end(),
                        [](const RegionRow& r) { return r.name != "other" && r.name != "optimizer"; });
  sum.regions = rows;
}

void add_shape(std::vector<ShapeCount>& into, const std::string& where, at::ScalarType dtype,
               const std::vector<int64_t>& shape, int64_t bytes) {
  const std::string d = c10::toString(dtype);
  for (ShapeCount& s : into)
    if (s.where == where && s.dtype == d && s.shape == shape) {
      ++s.count;
      s.bytes += bytes;
      return;
    }
  into.push_back({where, d, shape, 1, bytes});
}

void add_memory(CensusSummary& sum, const CensusLog& log) {
  for (const SavedTensor& t : log.saved) {
    sum.saved_bytes_by_dtype[c10::toString(t.dtype)] += t.bytes;
    add_shape(sum.saved, t.region.rfind("block.", 0) == 0 ? "blocks" : t.region, t.dtype, t.shape, t.bytes);
  }
  for (const Launch& l : log.launches)
    if (!l.backward && l.region.rfind("block.", 0) == 0)
      for (const TensorInfo& t : l.outputs) add_shape(sum.block_outputs, l.name, t.dtype, t.shape, t.bytes);
}

// The rows of a (rows..., width) tensor, or 0 for any other.
int64_t logit_rows(const TensorInfo& t, int64_t width) {
  if (t.shape.size() < 2 || t.shape.back() != width) return 0;
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < t.shape.size(); ++i) rows *= t.shape[i];
  return rows;
}

// Whether t is a chunk's logits, or their transpose (width, rows): the weight gradient's operand.
bool is_logit_chunk(const TensorInfo& t, int64_t width, const std::set<int64_t>& chunk_rows) {
  if (chunk_rows.count(logit_rows(t, width))) return true;
  return t.shape.size() == 2 && t.shape[0] == width && chunk_rows.count(t.shape[1]) > 0;
}

LogitPasses logit_passes(const CensusLog& log, int64_t width) {
  LogitPasses p;
  for (const Launch& l : log.launches)  // the widest head product, when not told
    if (width == 0 && l.region == "head" && !l.backward && l.cost.product)
      for (const TensorInfo& t : l.outputs)
        if (!t.shape.empty()) p.width = std::max(p.width, t.shape.back());
  if (width > 0) p.width = width;
  std::set<int64_t> chunk_rows;
  for (const Launch& l : log.launches)
    if (l.region == "head" && !l.backward && l.cost.product)
      for (const TensorInfo& t : l.outputs)
        if (const int64_t rows = logit_rows(t, p.width)) {
          chunk_rows.insert(rows);
          ++p.chunks;
        }
  for (const Launch& l : log.launches) {
    if (l.region != "head") continue;
    bool touches = false;
    for (const auto* list : {&l.inputs, &l.outputs})
      for (const TensorInfo& t : *list) touches = touches || is_logit_chunk(t, p.width, chunk_rows);
    p.launches += touches;
  }
  return p;
}

}  // namespace

CensusSummary summarize(const CensusLog& log, const GpuSpec& gpu, int64_t logits_width) {
  CensusSummary sum;
  sum.gpu = gpu;
  sum.launches = static_cast<int64_t>(log.launches.size());
  for (const Launch& l : log.launches) {
    sum.product_flops += l.cost.flops;
    if (!l.cost.product) sum.bytes_outside += l.cost.bytes_read + l.cost.bytes_written;
  }
  sum.estimate = roofline(gpu, sum.product_flops, static_cast<double>(sum.bytes_outside));
  sum.mfu = roofline_mfu(gpu, sum.product_flops, sum.estimate);
  add_kinds(sum, log);
  add_regions(sum, log);
  add_memory(sum, log);
  sum.host_syncs = log.host_syncs;
  sum.logits = logit_passes(log, logits_width);
  sum.backward_ran = log.backward_ran;
  sum.off_thread_ops = log.off_thread_ops;
  return sum;
}

}  // namespace spmd::census
