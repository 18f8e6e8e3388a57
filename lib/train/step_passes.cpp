// Microbatch passes through a pipeline stage: receive, compute this stage's blocks, send.
#include "train/step_passes.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <memory>
#include <optional>

#include <ATen/core/grad_mode.h>

#include "parallel/parallel_ops.h"
#include "parallel/pipeline_schedule.h"
#include "train/documents.h"
#include "train/expert_routing.h"
#include "util/caching_cpu_allocator.h"
#include "util/elapsed.h"
#include "util/test_hooks.h"

namespace spmd {

namespace {
using Clock = std::chrono::steady_clock;

// This thread's CPU time: a pass's compute, not its waits or another process's turn on a shared core.
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// One chunk's share of a forward: the embeddings of `ids` on the first virtual stage, else the
// activation received from the previous one (for microbatch `m`; in `received`, a leaf that
// collects its gradient when training), then the chunk's blocks. Packed documents: every stage
// derives the document starts from the microbatch's ids, which every stage holds.
at::Tensor chunk_forward(TrainState& s, ModelOps& ops, const at::Tensor& ids, int64_t m, int64_t chunk, bool training,
                         at::Tensor& received) {
  StageLink& link = *s.stage_link;
  const at::Tensor starts = s.document_eot >= 0 ? document_starts(ids, s.document_eot) : at::Tensor();
  at::Tensor x;
  if (link.embeds(chunk)) {
    x = s.net->embed(ids, ops, training, 0, starts);
  } else {
    received = link.receive_activation(m, chunk, link.activation_shape(ids.size(0), ids.size(1)),
                                       at::TensorOptions().dtype(at::kFloat).device(ids.device()));
    if (training) received.requires_grad_(true);
    x = received;
  }
  return s.net->blocks(x, link.layer_begin(chunk), link.layer_end(chunk), ops, training, starts);
}

// The step's routing ahead of its passes (train/expert_routing.h): every microbatch forward
// through the stages without gradients, each pass's routing summed into one tally.
RoutingTally tally_routing_ahead(TrainState& s, const at::Tensor& inputs, int64_t microbatches) {
  at::NoGradGuard no_grad;
  StageLink& link = *s.stage_link;
  RoutingTally tally = empty_routing_tally(s);
  const int64_t rows = inputs.size(0) / microbatches;
  for (int64_t m = 0; m < microbatches; ++m) {
    // The training passes' dropout masks: the same routing as theirs.
    ParallelOps ops(*s.model, static_cast<uint64_t>(s.config.train.seed), s.step, Microbatch{m, microbatches});
    for (int64_t chunk = 0; chunk < link.chunks(); ++chunk) {  // sends do not block
      at::Tensor received;
      const at::Tensor x = chunk_forward(s, ops, inputs.narrow(0, m * rows, rows), m, chunk, true, received);
      if (!link.ends(chunk)) link.send_activation(m, chunk, x.to(at::kFloat));
    }
    s.model->fsdp_prefetcher().drain();
    if (ops.pass_routing()) tally += *ops.pass_routing();
  }
  link.finish_sends();
  return tally;
}

// A microbatch between its forward and its backward on one chunk of this stage.
struct InFlight {
  std::unique_ptr<ParallelOps> ops;  // its graph's FSDP and dropout context
  at::Tensor input;                  // the received activation (a leaf), except on the first stage
  at::Tensor output;                 // the loss on the last stage, else the activation sent on
  int64_t graph_bytes = 0;
};

class StepPasses {
 public:
  StepPasses(TrainState& s, const at::Tensor& inputs, const at::Tensor& targets, StepResult& result)
      : s_(s), link_(*s.stage_link), inputs_(inputs), targets_(targets), result_(result),
        microbatches_(s.config.train.microbatches), rows_(inputs.size(0) / microbatches_),
        live_(static_cast<size_t>(microbatches_ * link_.chunks())) {}

  at::Tensor run() {
    loss_sum_ = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(inputs_.device()));
    start_routing();
    s_.grad_sync->begin(microbatches_);
    const PipelineShape shape{s_.config.runtime.pipeline_schedule, link_.stages(), link_.chunks(), microbatches_};
    const std::vector<PipelinePass> passes = stage_passes(shape, link_.stage());
    for (size_t i = 0; i < passes.size(); ++i) {
      const PipelinePass& pass = passes[i];
      if (i + 1 < passes.size()) post_receive(passes[i + 1]);  // lands while this pass computes
      const double cpu_start = thread_cpu_ms(), wait_start = link_.receive_wait_ms();
      const auto start = Clock::now();
      if (pass.kind == PipelinePass::kForward) forward(pass.microbatch, pass.chunk);
      else backward(pass.microbatch, pass.chunk);
      result_.timings.pass_busy_ms.push_back(ms_since(start) - (link_.receive_wait_ms() - wait_start));
      result_.timings.pass_cpu_ms.push_back(thread_cpu_ms() - cpu_start);
    }
    link_.finish_sends();
    finish_routing();
    return link_.from_last_stage(loss_sum_);
  }

 private:
  // The receive a pass will start with, posted ahead (the stream's shape both ways).
  void post_receive(const PipelinePass& pass) {
    const auto shape = link_.activation_shape(rows_, inputs_.size(1));
    if (pass.kind == PipelinePass::kForward && !link_.embeds(pass.chunk))
      link_.post_receive_activation(pass.microbatch, pass.chunk, shape);
    if (pass.kind == PipelinePass::kBackward && !link_.ends(pass.chunk))
      link_.post_receive_gradient(pass.microbatch, pass.chunk, shape);
  }

  // Sparse layers: the step's routing, tallied ahead of the passes or by them (settled after the
  // only forward when that one is all there is, else after the last).
  void start_routing() {
    routing_ = new_step_routing(s_);
    if (!routing_) return;
    if (routes_ahead(s_)) settle_step_routing(s_, tally_routing_ahead(s_, inputs_, microbatches_), *routing_);
    else tally_.emplace(empty_routing_tally(s_));
  }
  void note_routing(const ParallelOps& ops) {
    if (!routing_ || routing_->settled()) return;
    if (ops.pass_routing()) *tally_ += *ops.pass_routing();
    if (live_.size() == 1) settle_step_routing(s_, *tally_, *routing_);  // before its backward reads it
  }
  void finish_routing() {
    if (!routing_) return;
    if (!routing_->settled()) settle_step_routing(s_, *tally_, *routing_);
    result_.aux_loss = routing_->aux_loss();
    result_.aux_loss_coef = routing_->coef();
    result_.expert_loads = routing_->loads();
    result_.expert_counts = routing_->counts();
  }

  InFlight& in_flight(int64_t m, int64_t chunk) { return live_[static_cast<size_t>(m * link_.chunks() + chunk)]; }

  void forward(int64_t m, int64_t chunk) {
    const auto start = Clock::now();
    const int64_t live_before = caching_cpu_allocator_stats().live_bytes;
    InFlight& f = in_flight(m, chunk);
    f.ops = std::make_unique<ParallelOps>(*s_.model, static_cast<uint64_t>(s_.config.train.seed), s_.step,
                                          Microbatch{m, microbatches_}, s_.config.runtime.remat);
    if (routing_) f.ops->use_step_routing(routing_.get());
    const at::Tensor x = chunk_forward(s_, *f.ops, inputs_.narrow(0, m * rows_, rows_), m, chunk, true, f.input);
    if (link_.ends(chunk)) {
      f.output = s_.net->head_loss(x, targets_.narrow(0, m * rows_, rows_), *f.ops);
      if (s_.target_loss_scale != 1.0) f.output = f.output * s_.target_loss_scale;  // fine-tuning: over the step's targets
      if (test_hooks().nan_loss_at_step == s_.step) f.output = f.output * NAN;
      loss_sum_ += f.output.detach().to(at::kDouble);
    } else {
      f.output = x;
      link_.send_activation(m, chunk, x.detach().to(at::kFloat));
    }
    note_routing(*f.ops);
    // The last FSDP unit's gathered weights are not the graph's: drop them (and a gather still in
    // flight, should the forward have left its recorded order) before measuring it.
    s_.model->fsdp_prefetcher().drain();
    note_graph(f, live_before);
    result_.timings.forward_ms += ms_since(start);
  }

  void backward(int64_t m, int64_t chunk) {
    const auto start = Clock::now();
    InFlight& f = in_flight(m, chunk);
    // The last backward communicates; the chunks whose last backward came earlier just
    // accumulated, and GradientSync::finish reduces them.
    if (++backwards_done_ == static_cast<int64_t>(live_.size())) s_.grad_sync->arm();
    s_.model->fsdp_prefetcher().begin_backward();  // recomputed blocks gather in the backward's order
    if (link_.ends(chunk)) {
      f.output.backward();
    } else {
      at::Tensor grad = link_.receive_gradient(m, chunk, f.output.sizes(), f.output.options());
      f.output.backward(grad);
    }
    if (!link_.embeds(chunk)) link_.send_gradient(m, chunk, f.input.grad());
    s_.model->fsdp_prefetcher().release();
    in_flight_bytes_ -= f.graph_bytes;
    f = InFlight{};  // its graph goes
    result_.timings.backward_ms += ms_since(start);
  }

  // Bytes a forward's graph holds (as the caching CPU allocator counts them; -1 without it), and
  // the most held by the graphs in flight at once.
  void note_graph(InFlight& f, int64_t live_before) {
    const auto stats = caching_cpu_allocator_stats();
    if (!stats.installed || !inputs_.device().is_cpu()) return;
    f.graph_bytes = stats.live_bytes - live_before;
    in_flight_bytes_ += f.graph_bytes;
    result_.graph_bytes = std::max(result_.graph_bytes, in_flight_bytes_);
  }

  TrainState& s_;
  StageLink& link_;
  const at::Tensor& inputs_;
  const at::Tensor& targets_;
  StepResult& result_;
  const int64_t microbatches_, rows_;
  std::vector<InFlight> live_;
  at::Tensor loss_sum_;
  std::unique_ptr<StepRouting> routing_;  // null without experts
  std::optional<RoutingTally> tally_;     // the passes' own routing, where not tallied ahead
  int64_t backwards_done_ = 0;
  int64_t in_flight_bytes_ = 0;
};
}  // namespace

at::Tensor run_step_passes(TrainState& state, const at::Tensor& inputs, const at::Tensor& targets, StepResult& result) {
  return StepPasses(state, inputs, targets, result).run();
}

namespace {
// One forward without gradients through the stages; `head` runs on the last one and gives a
// tensor of shape `shape` (zeros of it on the other stages until the stage line sums them).
template <class Head>
at::Tensor forward_passes(TrainState& s, const at::Tensor& inputs, at::IntArrayRef shape, at::ScalarType dtype,
                          Head head) {
  at::NoGradGuard no_grad;
  StageLink& link = *s.stage_link;
  ParallelOps ops(*s.model, static_cast<uint64_t>(s.config.train.seed), -1);
  at::Tensor value = at::zeros(shape, at::TensorOptions().dtype(dtype).device(inputs.device()));
  for (int64_t chunk = 0; chunk < link.chunks(); ++chunk) {  // sends do not block: no chunk waits on a later one
    at::Tensor received;
    const at::Tensor x = chunk_forward(s, ops, inputs, 0, chunk, false, received);
    if (link.ends(chunk)) value = head(x, ops).to(dtype);
    else link.send_activation(0, chunk, x.to(at::kFloat));
  }
  link.finish_sends();
  return link.from_last_stage(value);
}
}  // namespace

at::Tensor evaluate_passes(TrainState& s, const at::Tensor& inputs, const at::Tensor& targets) {
  return forward_passes(s, inputs, {}, at::kDouble,
                        [&](const at::Tensor& x, ParallelOps& ops) { return s.net->head_loss(x, targets, ops); });
}

at::Tensor row_losses_passes(TrainState& s, const at::Tensor& inputs, const at::Tensor& targets) {
  return forward_passes(s, inputs, {inputs.size(0)}, at::kFloat,
                        [&](const at::Tensor& x, ParallelOps& ops) { return s.net->head_row_losses(x, targets, ops); });
}

}  // namespace spmd
