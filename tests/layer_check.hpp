// The gradient check every layer test uses: a layer's fp32 forward against a
// double-precision reference, and its fp32 analytic backward against central finite
// differences of that reference, for parameters and inputs.
#pragma once
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <span>
#include <vector>

#include "base/rng.hpp"
#include "model/flat_buffer.hpp"
#include "model/layer.hpp"
#include "reference_layers.hpp"

namespace hearsay::testing {

using reference::Vec;
using RefForward = std::function<Vec(const Vec& params, const Vec& x)>;

inline Vec to_double(const float* p, std::int64_t n) { return Vec(p, p + n); }

// Checks up to `limit` evenly spread indices of v (all of them when v is small).
inline std::vector<std::size_t> sample_indices(std::size_t size, std::size_t limit) {
  std::vector<std::size_t> idx;
  const std::size_t step = size <= limit ? 1 : size / limit;
  for (std::size_t i = 0; i < size; i += step) idx.push_back(i);
  return idx;
}

// Binds the layer to a fresh state (random parameters, then its buffers at their starting
// values, or as `set_buffers` leaves them) and checks one forward and backward of `pass`.
// ref sees the parameters only.
inline void check_layer(Layer& layer, Shape in, const RefForward& ref, std::uint64_t seed,
                        Pass pass = Pass::train, const std::function<void(float*)>& set_buffers = {}) {
  INFO(layer.describe() << (layer.fused_relu() ? "+relu" : "") << " on input " << in.str());
  Rng rng(seed);
  const std::int64_t n_params = layer.param_count();
  FlatBuffer state(static_cast<std::size_t>(n_params + layer.buffer_count())),
      grads(static_cast<std::size_t>(std::max<std::int64_t>(1, n_params)));
  layer.bind(state.data(), 0, n_params);
  layer.init_buffers();
  if (set_buffers) set_buffers(state.data() + n_params);
  const std::span<float> params = state.span().first(static_cast<std::size_t>(n_params));
  for (auto& v : params) v = static_cast<float>(rng.normal() * 0.5);
  std::vector<float> x(static_cast<std::size_t>(in.numel()));
  for (auto& v : x) v = static_cast<float>(rng.normal());
  const Shape out = layer.output_shape(in);
  std::vector<float> y(static_cast<std::size_t>(out.numel()));
  FlatBuffer scratch(static_cast<std::size_t>(std::max<std::int64_t>(1, layer.scratch_floats(in))));

  layer.forward(ConstTensorView{x.data(), in}, TensorView{y.data(), out}, scratch.data(), pass);
  const Vec p_ref = to_double(params.data(), n_params);
  const Vec x_ref = to_double(x.data(), in.numel());
  const Vec y_ref = ref(p_ref, x_ref);
  REQUIRE(y_ref.size() == y.size());
  // fp32 sums of at most a few hundred O(1) products: error well under 1e-4.
  for (std::size_t i = 0; i < y.size(); ++i)
    REQUIRE(std::abs(y[i] - y_ref[i]) <= 1e-4 * (1 + std::abs(y_ref[i])));

  // L = sum_i r_i * y_i, so dL/dy = r.
  Vec r(y.size());
  for (auto& v : r) v = rng.normal();
  std::vector<float> dy(r.begin(), r.end());
  std::vector<float> dx(x.size());
  layer.backward(ConstTensorView{x.data(), in}, ConstTensorView{y.data(), out}, TensorView{dy.data(), out},
                 dx.data(), grads.data(), scratch.data());

  auto loss = [&](const Vec& p, const Vec& xv) {
    const Vec yv = ref(p, xv);
    double s = 0;
    for (std::size_t i = 0; i < yv.size(); ++i) s += r[i] * yv[i];
    return s;
  };
  // Central differences of the double reference. The layers are linear or piecewise
  // linear in each variable, so the difference quotient is exact up to double rounding
  // (~1e-10 here); what remains is the fp32 error of the analytic gradient, whose sums
  // run over at most a few thousand terms: 1e-4 relative leaves a wide margin while a
  // wrong index or a missing term gives O(1) errors. Winograd convolutions mix the
  // entries of a tile in their transforms, so their error is relative to the largest
  // gradient entry rather than to each one (a few 1e-6 of it, tests/test_conv_kernels.cpp):
  // the bound adds 2e-5 of the largest sampled entry.
  const double h = 1e-5;
  auto compare = [&](const char* what, const float* analytic, std::size_t size, auto&& numeric_at) {
    const auto indices = sample_indices(size, 300);
    std::vector<double> numeric(indices.size());
    double largest = 0.0;
    for (std::size_t j = 0; j < indices.size(); ++j) {
      numeric[j] = numeric_at(indices[j]);
      largest = std::max(largest, std::abs(numeric[j]));
    }
    for (std::size_t j = 0; j < indices.size(); ++j) {
      INFO(what << " " << indices[j] << " (largest sampled gradient " << largest << ")");
      REQUIRE(std::abs(analytic[indices[j]] - numeric[j]) <=
              1e-4 * (1 + std::abs(numeric[j])) + 2e-5 * largest);
    }
  };
  compare("parameter", grads.data(), p_ref.size(), [&](std::size_t i) {
    Vec plus = p_ref, minus = p_ref;
    plus[i] += h;
    minus[i] -= h;
    return (loss(plus, x_ref) - loss(minus, x_ref)) / (2 * h);
  });
  compare("input", dx.data(), x_ref.size(), [&](std::size_t i) {
    Vec plus = x_ref, minus = x_ref;
    plus[i] += h;
    minus[i] -= h;
    return (loss(p_ref, plus) - loss(p_ref, minus)) / (2 * h);
  });
}

}  // namespace hearsay::testing
