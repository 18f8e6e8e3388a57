// A pipeline stage's view of its neighbours: which blocks each of its chunks runs, and the
// point-to-point transfers of activations (forward, to the next virtual stage) and their gradients
// (backward, to the previous one) along the stage axis's line of ranks. Virtual stage u runs on
// stage u mod p, so with chunks the line is a ring: the last stage's chunk k feeds the first
// stage's chunk k + 1. Without stages it is the only stage and moves nothing.
//
// The transfers go over Gloo, through host memory: on a GPU a copy each way, through pinned
// buffers, queued on the stream with one wait before Gloo reads a send. Under NCCL they use
// the line's Gloo twin: a NCCL send and receive between two ranks queue on one stream and must
// pair up in the same order on both sides, which 1F1B's order does not give without batching.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include <ATen/ATen.h>

#include "comm/communicator.h"
#include "parallel/layout.h"

namespace spmd {

class StageLink {
 public:
  // Creates the stage line's host group (every rank, in the same order).
  StageLink(const ModelLayout& layout, Communicator& comm);

  int64_t stage() const { return stage_; }
  int64_t stages() const { return stages_; }
  int64_t chunks() const { return layout_.pipeline.chunks; }
  bool is_first() const { return stage_ == 0; }
  bool is_last() const { return stage_ + 1 == stages_; }
  // Whether `chunk` of this stage is the first virtual stage (it embeds) or the last (its head
  // gives the loss).
  bool embeds(int64_t chunk) const { return virtual_stage(chunk) == 0; }
  bool ends(int64_t chunk) const { return virtual_stage(chunk) + 1 == stages_ * chunks(); }
  int64_t layer_begin(int64_t chunk) const { return layout_.pipeline.chunk_begin(stage_, chunk); }  // [begin, end)
  int64_t layer_end(int64_t chunk) const { return layout_.pipeline.chunk_end(stage_, chunk); }

  // The local shape of the residual stream between blocks for `rows` local batch rows of
  // `seq` positions: what crosses between stages.
  std::vector<int64_t> activation_shape(int64_t rows, int64_t seq) const;

  // Sends start and return at once (finish_sends waits for them); receives block, each bounded
  // by the runtime timeout. Messages match by microbatch and chunk. Receiving a gradient releases
  // the send buffer of the activation it answers (the next stage had it before it could answer).
  void send_activation(int64_t microbatch, int64_t chunk, const at::Tensor& x);
  at::Tensor receive_activation(int64_t microbatch, int64_t chunk, at::IntArrayRef shape,
                                const at::TensorOptions& options);
  void send_gradient(int64_t microbatch, int64_t chunk, const at::Tensor& grad);
  at::Tensor receive_gradient(int64_t microbatch, int64_t chunk, at::IntArrayRef shape, const at::TensorOptions& options);
  void finish_sends();

  // Posts now the receive that receive_activation / receive_gradient of (microbatch, chunk) will
  // take later (`shape`: the stream's local shape, fp32), so that the message moves while this
  // stage computes: Gloo's TCP transport sends a message's bytes only once the receiver says its
  // receive is posted, a round trip of both ranks' I/O threads if posted only when needed.
  void post_receive_activation(int64_t microbatch, int64_t chunk, at::IntArrayRef shape);
  void post_receive_gradient(int64_t microbatch, int64_t chunk, at::IntArrayRef shape);

  // A value known on the last stage (zeros of its shape elsewhere), summed over the stage line so that
  // every stage has it.
  at::Tensor from_last_stage(const at::Tensor& value) const;

  // Milliseconds spent blocked in receives since construction: the bubble as this stage sees it.
  double receive_wait_ms() const { return receive_wait_ms_; }

 private:
  int64_t virtual_stage(int64_t chunk) const { return chunk * stages_ + stage_; }
  // Tags name the boundary between virtual stages u and u + 1 that a message crosses.
  int activation_tag(int64_t microbatch, int64_t boundary) const;
  int gradient_tag(int64_t microbatch, int64_t boundary) const { return activation_tag(microbatch, boundary) + 1; }
  int next_stage() const { return static_cast<int>((stage_ + 1) % stages_); }
  int previous_stage() const { return static_cast<int>((stage_ + stages_ - 1) % stages_); }
  at::Tensor receive(int peer, int tag, at::IntArrayRef shape, const at::TensorOptions& options);
  void post_receive(int peer, int tag, at::IntArrayRef shape);  // fp32, taken by receive()
  at::Tensor to_p2p(const at::Tensor& t) const;  // in host memory (Gloo's send/recv)

  const ModelLayout& layout_;
  const Group* line_;  // the ranks along the stage axis with this rank's other coordinates
  const Group* p2p_;   // the same ranks over Gloo (line_ itself when the backend is Gloo)
  c10::Device device_;
  int64_t stage_ = 0, stages_ = 1;
  std::map<std::pair<int64_t, int64_t>, PendingCollective> activation_sends_;  // by (microbatch, chunk)
  std::vector<PendingCollective> gradient_sends_;
  double receive_wait_ms_ = 0;
  struct PostedReceive {
    at::Tensor buffer;
    PendingCollective work;
  };
  std::map<int, PostedReceive> posted_;  // by tag
};

}  // namespace spmd
