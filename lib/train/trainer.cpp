// The training loop, readable top to bottom: batch -> forward -> backward -> grad sync -> clip
// -> step -> log -> eval.
#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>

#include "data/loader.h"
#include "data/token_file.h"
#include "model/gpt2.h"
#include "optim/adamw.h"
#include "parallel/grad_sync.h"
#include "parallel/layout.h"
#include "parallel/parallel_ops.h"
#include "parallel/sharded_model.h"
#include "train/metrics.h"
#include "util/error.h"

namespace spmd {

namespace {
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// (rows, seq) int64 tensor over a batch's token vector (copied: the batch goes away).
at::Tensor to_tensor(const std::vector<int64_t>& tokens, int64_t rows, int64_t seq) {
  return at::from_blob(const_cast<int64_t*>(tokens.data()), {rows, seq}, at::kLong).clone();
}

// Mean over the data-parallel ranks of each rank's mean loss: the global batch's mean.
double global_mean(const at::Tensor& local_mean, const ShardedModel& model) {
  at::Tensor value = local_mean.detach().to(at::kDouble).reshape({1}).clone();
  model.comm().along(model.layout().batch_axes).all_reduce_sum(value);
  return value.item<double>() / static_cast<double>(model.layout().dp_size());
}

// The initialized global parameters as raw little-endian float32 files (vocab padding trimmed).
void dump_parameters(const ShardedModel& model, const std::string& dir) {
  std::vector<at::Tensor> full;
  for (size_t i = 0; i < model.params().size(); ++i) full.push_back(model.gather_full(i));  // collective
  if (model.comm().rank() != 0) return;
  std::filesystem::create_directories(dir);
  for (size_t i = 0; i < full.size(); ++i) {
    const auto& info = model.layout().params[i].info;
    at::Tensor t = full[i];
    for (size_t d = 0; d < info.logical.size(); ++d)
      if (info.logical[d] == "vocab") t = t.narrow(static_cast<int64_t>(d), 0, model.layout().model.vocab_size);
    t = t.contiguous();
    std::ofstream out(dir + "/" + info.name + ".f32", std::ios::binary);
    out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * 4));
  }
}
}  // namespace

int run_training(const Config& config, const RendezvousInfo& rendezvous, const TrainOptions& options) {
  const auto& tc = config.train;
  ModelLayout layout = plan_layout(config);
  std::unique_ptr<Communicator> comm = options.single_process
                                           ? std::make_unique<Communicator>(layout.mesh)
                                           : std::make_unique<Communicator>(rendezvous, layout.mesh);
  const int rank = comm->rank();
  const bool leader = rank == 0;
  const int64_t dp_size = layout.dp_size(), dp_index = layout.dp_index(rank);

  // Data first: a bad file is a usage error before any compute.
  auto train_data = TokenDataset::open(config.data.train, config.model.vocab_size);
  auto val_data = tc.eval_every > 0 ? TokenDataset::open(config.data.val, config.model.vocab_size) : nullptr;
  DataLoader loader(train_data, config.data.batch_size, config.model.block_size, tc.seed, dp_index, dp_size);
  std::unique_ptr<MetricsLog> metrics = leader ? std::make_unique<MetricsLog>(config.output.dir) : nullptr;

  ShardedModel model(std::move(layout), *comm, static_cast<uint64_t>(tc.seed));
  if (!options.dump_init_dir.empty()) dump_parameters(model, options.dump_init_dir);
  Gpt2 gpt(config.model);
  std::vector<bool> decay;
  for (const auto& p : model.layout().params) decay.push_back(p.info.weight_decay);
  AdamW optimizer(model.params(), decay, tc);

  const int64_t tokens_per_step = config.data.batch_size * config.model.block_size;
  if (leader)
    fmt::print("spmd-train: mesh {} | {} ranks | data-parallel {} | {} params | params+grads+AdamW per rank: "
               "state_bytes_per_rank={}\n",
               model.layout().mesh.describe(), model.layout().mesh.size(), dp_size,
               gpt2_num_params(config.model), (model.local_param_bytes() * 2 + optimizer.state_bytes()));

  auto evaluate = [&]() {
    at::NoGradGuard no_grad;
    double sum = 0;
    for (int64_t k = 0; k < tc.eval_batches; ++k) {
      Batch batch = eval_batch(*val_data, k, config.data.batch_size, config.model.block_size, dp_index, dp_size);
      ParallelOps ops(model, static_cast<uint64_t>(tc.seed), -1);
      at::Tensor loss = gpt.loss(to_tensor(batch.inputs, batch.rows, batch.seq),
                                 to_tensor(batch.targets, batch.rows, batch.seq), ops, false);
      sum += global_mean(loss, model);
    }
    return sum / static_cast<double>(tc.eval_batches);
  };

  const auto run_start = Clock::now();
  double last_loss = NAN;
  for (int64_t step = 0; step < tc.steps; ++step) {
    const auto step_start = Clock::now();
    Batch batch = loader.next();
    at::Tensor inputs = to_tensor(batch.inputs, batch.rows, batch.seq);
    at::Tensor targets = to_tensor(batch.targets, batch.rows, batch.seq);

    ParallelOps ops(model, static_cast<uint64_t>(tc.seed), step);
    at::Tensor loss = gpt.loss(inputs, targets, ops, true);
    if (step == options.inject_nan_at_step) loss = loss * NAN;
    for (auto& p : model.params()) p.mutable_grad() = at::Tensor();
    loss.backward();
    sync_gradients(model);
    const double grad_norm = global_grad_norm(model);
    const double mean_loss = global_mean(loss, model);
    if (!std::isfinite(mean_loss) || !std::isfinite(grad_norm)) {
      if (!tc.skip_nonfinite)
        throw RuntimeError(fmt::format("step {}: non-finite {} ({}); stopping (set train.skip_nonfinite: true "
                                       "to skip such steps)",
                                       step, std::isfinite(mean_loss) ? "gradient norm" : "loss",
                                       std::isfinite(mean_loss) ? grad_norm : mean_loss));
      if (leader) fmt::print("step {}: non-finite loss or gradient, step skipped\n", step);
      continue;
    }
    if (tc.grad_clip > 0 && grad_norm > tc.grad_clip) {
      at::NoGradGuard no_grad;
      for (auto& p : model.params()) p.mutable_grad().mul_(tc.grad_clip / (grad_norm + 1e-6));
    }
    const double lr = learning_rate_at(tc, step);
    optimizer.step(lr);
    last_loss = mean_loss;

    const double step_s = seconds_since(step_start);
    const bool eval_now = val_data && ((step + 1) % tc.eval_every == 0 || step + 1 == tc.steps);
    const bool log_now = eval_now || step % tc.log_every == 0 || step + 1 == tc.steps;
    double val_loss = eval_now ? evaluate() : NAN;
    if (leader && log_now) {
      nlohmann::json record{{"step", step},          {"loss", mean_loss},
                            {"lr", lr},              {"grad_norm", grad_norm},
                            {"tokens_per_s", static_cast<double>(tokens_per_step) / step_s},
                            {"step_ms", step_s * 1000.0}};
      if (eval_now) record["val_loss"] = val_loss;
      metrics->write(record);
      double elapsed = seconds_since(run_start);
      double eta = elapsed / static_cast<double>(step + 1) * static_cast<double>(tc.steps - step - 1);
      fmt::print("step {:>5}/{} | loss {:.4f}{} | lr {:.2e} | {:.0f} tok/s | {:.1f} ms | ETA {}\n", step + 1, tc.steps,
                 mean_loss, eval_now ? fmt::format(" | val {:.4f}", val_loss) : std::string(), lr,
                 static_cast<double>(tokens_per_step) / step_s, step_s * 1000.0, format_duration(eta));
      std::fflush(stdout);
    }
  }
  if (leader) fmt::print("done: {} steps in {}, final loss {:.4f}\n", tc.steps, format_duration(seconds_since(run_start)),
                         last_loss);
  comm->world().barrier();
  return 0;
}

}  // namespace spmd
