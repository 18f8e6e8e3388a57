// Learning-rate schedules (see lr_schedule.h).
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace spmd {
namespace {

// nanoGPT's: warmup, cosine decay to min_lr at decay_steps, then min_lr.
double cosine_lr(const TrainConfig& c, int64_t step) {
  if (step < c.warmup_steps) return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps + 1);
  if (step > c.decay_steps) return c.min_lr;
  double span = static_cast<double>(std::max<int64_t>(c.decay_steps - c.warmup_steps, 1));
  double ratio = static_cast<double>(step - c.warmup_steps) / span;
  double coeff = 0.5 * (1.0 + std::cos(M_PI * ratio));
  return c.min_lr + coeff * (c.lr - c.min_lr);
}

double decay_factor(DecayShape shape, double progress) {
  switch (shape) {
    case DecayShape::kLinear: return 1.0 - progress;
    case DecayShape::kCosine: return 0.5 * (1.0 + std::cos(M_PI * 0.5 * 2.0 * progress));
    case DecayShape::kOneMinusSqrt: return 1.0 - std::sqrt(progress);
  }
  return 0;
}

}  // namespace

double wsd_multiplier(int64_t step, int64_t warmup, int64_t stable, int64_t decay, DecayShape shape, double floor) {
  // Written as transformers' _get_wsd_scheduler_lambda, operation for operation, so the numbers
  // agree to the last bit rather than to rounding.
  if (step < warmup) {
    const double progress = static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup));
    return std::max(0.0, progress * (1.0 - floor) + floor);
  }
  if (step - warmup < stable) return 1.0;
  if (step - warmup - stable < decay) {
    const double progress =
        static_cast<double>(step - warmup - stable) / static_cast<double>(std::max<int64_t>(1, decay));
    return std::max(0.0, decay_factor(shape, progress) * (1.0 - floor) + floor);
  }
  return floor;
}

double learning_rate_at(const TrainConfig& c, int64_t step) {
  const double floor = c.min_lr / c.lr;
  switch (c.lr_schedule) {
    case LrSchedule::kCosine: return cosine_lr(c, step);
    case LrSchedule::kWsd:
      return c.lr * wsd_multiplier(step, c.warmup_steps, c.steps - c.warmup_steps - c.decay_steps, c.decay_steps,
                                   c.decay_shape, floor);
    case LrSchedule::kLinear:
      return c.lr * wsd_multiplier(step, c.warmup_steps, 0, c.decay_steps - c.warmup_steps, DecayShape::kLinear, floor);
    case LrSchedule::kConstant:
      return c.lr * wsd_multiplier(step, c.warmup_steps, std::numeric_limits<int64_t>::max() / 2, 0,
                                   DecayShape::kLinear, floor);
  }
  return c.lr;
}

double muon_learning_rate(const TrainConfig& c, double lr) { return c.muon.lr * (lr / c.lr); }

}  // namespace spmd
