// Rotary frequencies, angles and the rotation.
#include "model/rope.h"

#include "model/model_ops.h"

#include <cmath>
#include <vector>

namespace spmd {

namespace {
// Llama 3: wavelengths longer than original / low_freq_factor are stretched by factor, those
// shorter than original / high_freq_factor kept, and those between blended linearly in
// original / wavelength.
double scaled(double inverse_frequency, const RopeScaling& s) {
  const double wavelength = 2 * M_PI / inverse_frequency;
  const double original = static_cast<double>(s.original_max_position_embeddings);
  if (wavelength > original / s.low_freq_factor) return inverse_frequency / s.factor;
  if (wavelength < original / s.high_freq_factor) return inverse_frequency;
  const double smooth = (original / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1 - smooth) * inverse_frequency / s.factor + smooth * inverse_frequency;
}
}  // namespace

at::Tensor rope_inverse_frequencies(const ModelConfig& config) {
  const int64_t D = config.head_dim();
  std::vector<float> out;
  for (int64_t i = 0; i < D / 2; ++i) {
    // As Hugging Face computes it: the exponent in float32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(D);
    double f = 1.0 / std::pow(config.rope_theta, static_cast<double>(exponent));
    if (config.rope_scaling.factor > 0) f = scaled(f, config.rope_scaling);
    out.push_back(static_cast<float>(f));
  }
  return at::tensor(out, at::kFloat);
}

RopeAngles rope_angles(const at::Tensor& positions, const at::Tensor& inverse_frequencies) {
  const at::Tensor f = inverse_frequencies.to(positions.device());
  const at::Tensor half = positions.to(at::kFloat).unsqueeze(-1) * f;  // (P, T, D/2)
  const at::Tensor angles = at::cat({half, half}, -1).unsqueeze(2);    // (P, T, 1, D)
  return {angles.cos(), angles.sin()};
}

at::Tensor apply_rope(const at::Tensor& x, const RopeAngles& angles) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  // In float32 (the angles'), the result in x's dtype: bf16 q and k stay bf16 for attention.
  return (x * angles.cos + rotated * angles.sin).to(x.scalar_type());
}

at::Tensor ModelOps::rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return apply_rope(x, {cos, sin});
}

}  // namespace spmd
