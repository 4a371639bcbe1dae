#include "model/layer.hpp"

#include <cmath>

namespace hearsay {

void init_weights(Init scheme, float* w, std::int64_t n, std::int64_t fan_in, std::int64_t fan_out,
                  Rng& rng) {
  const double in = static_cast<double>(fan_in), out = static_cast<double>(fan_out);
  switch (scheme) {
    case Init::kaiming_uniform: {  // He et al. 2015, gain sqrt(2) for ReLU
      const double bound = std::sqrt(6.0 / in);
      for (std::int64_t i = 0; i < n; ++i) w[i] = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
      break;
    }
    case Init::kaiming_normal: {
      const double std_dev = std::sqrt(2.0 / in);
      for (std::int64_t i = 0; i < n; ++i) w[i] = static_cast<float>(rng.normal() * std_dev);
      break;
    }
    case Init::kaiming_normal_fan_out: {
      const double std_dev = std::sqrt(2.0 / out);
      for (std::int64_t i = 0; i < n; ++i) w[i] = static_cast<float>(rng.normal() * std_dev);
      break;
    }
    case Init::xavier_uniform: {  // Glorot & Bengio 2010
      const double bound = std::sqrt(6.0 / (in + out));
      for (std::int64_t i = 0; i < n; ++i) w[i] = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
      break;
    }
    case Init::xavier_normal: {
      const double std_dev = std::sqrt(2.0 / (in + out));
      for (std::int64_t i = 0; i < n; ++i) w[i] = static_cast<float>(rng.normal() * std_dev);
      break;
    }
  }
}

const char* init_name(Init scheme) {
  switch (scheme) {
    case Init::kaiming_uniform:
      return "kaiming_uniform";
    case Init::kaiming_normal:
      return "kaiming_normal";
    case Init::kaiming_normal_fan_out:
      return "kaiming_normal_fan_out";
    case Init::xavier_uniform:
      return "xavier_uniform";
    case Init::xavier_normal:
      return "xavier_normal";
  }
  return "?";
}

}  // namespace hearsay
