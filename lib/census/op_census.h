// The census of a stretch of code's ops: a libtorch RecordFunction observer that keeps each op a
// GPU would launch as one kernel (op_cost.h's atomic ops and the ops with a kernel of their own for
// a device, whole; otherwise the leaves that are not views), the region each ran for (the innermost user scope, RECORD_USER_SCOPE, in
// forward; in backward the region of the forward op whose autograd node it is), host syncs, and
// the forward outputs still alive when backward begins (what the autograd graph saved).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "census/op_cost.h"

namespace spmd::census {

struct Launch {
  std::string name;    // "aten::mm"
  // The user scope ("block.3", "head", "embed"); outside any: "other", or "optimizer" after the
  // last backward node (gradient norm, clipping, the update).
  std::string region;
  bool backward = false;  // ran in the backward pass
  OpCost cost;
  std::vector<TensorInfo> inputs, outputs;  // their pointers are identities only
};

// A forward output's storage (one per storage) alive when backward began.
struct SavedTensor {
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;  // of the output that made the storage
  int64_t bytes = 0;           // the storage's
  std::string region;
};

struct CensusLog {
  std::vector<Launch> launches;              // in the order they ended
  std::map<std::string, int64_t> host_syncs;  // by op name; none counted inside atomic ops
  std::vector<SavedTensor> saved;            // empty when no backward ran
  bool backward_ran = false;
  // Ops begun on another thread outside any recorded op (a CPU kernel's parallel region): not counted.
  int64_t off_thread_ops = 0;
};

// Records from construction to finish(), on every thread; one census at a time per process.
class OpCensus {
 public:
  OpCensus();
  ~OpCensus();
  OpCensus(const OpCensus&) = delete;
  OpCensus& operator=(const OpCensus&) = delete;
  // Stops recording and returns what was recorded (once).
  CensusLog finish();

 private:
  uint64_t handle_ = 0;
  bool active_ = false;
};

}  // namespace spmd::census
