#include "gossip/mixing/algorithms/quasi_global_momentum.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace hearsay::algorithms {

QuasiGlobalMomentum::QuasiGlobalMomentum(double beta, std::size_t values) : beta_(beta), values_(values) {
  if (!(beta >= 0 && beta < 1))
    throw std::invalid_argument("quasi-global momentum: the momentum must be in [0, 1), not " +
                                std::to_string(beta));
}

void QuasiGlobalMomentum::before_round(std::span<float> buffer) {
  if (last_.empty()) return;
  const std::size_t n = std::min(values_, buffer.size());
  const float beta = static_cast<float>(beta_);
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) buffer[i] -= beta * velocity_[i];
}

void QuasiGlobalMomentum::after_round(std::span<const float> buffer) {
  const std::size_t n = std::min(values_, buffer.size());
  if (last_.size() != n) {  // the first round: x_t starts here
    last_.assign(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(n));
    velocity_.assign(n, 0.0f);
    return;
  }
  const float beta = static_cast<float>(beta_), rest = static_cast<float>(1 - beta_);
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) {
    velocity_[i] = beta * velocity_[i] + rest * (last_[i] - buffer[i]);
    last_[i] = buffer[i];
  }
}

}  // namespace hearsay::algorithms
