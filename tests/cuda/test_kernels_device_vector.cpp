// The CUDA optimizer, vector and wire dtype kernels on a device against kernels/cpu:
// odd sizes, every alignment phase, guards around every output. All of them are
// bit-identical to kernels/cpu by construction (the same IEEE operations in the same
// order, products and sums never fused, and for the dtypes the same integer
// arithmetic), so they are compared exactly.
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "base/rng.hpp"
#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/optim.hpp"
#include "kernels/cpu/vector.hpp"
#include "kernels/cuda/convert.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/optim.hpp"
#include "kernels/cuda/vector.hpp"
#include "tests/cuda/cuda_test_util.hpp"

using namespace hearsay;
using namespace hearsay::cuda_test;

namespace {

constexpr float kGuard = -12345.0f;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
const std::size_t kSizes[] = {1, 3, 1029, (std::size_t{1} << 20) + 3};

}  // namespace

TEST_CASE("cuda sgd_update matches cpu::sgd_update bit for bit", "[cuda][kernels]") {
  // Exact: sgd_element is cpu::sgd_update's expression with unfused single roundings.
  cuda::Stream stream;
  for (const std::size_t n : kSizes) {
    const std::vector<float> param = random_normal(n, 1), grad = random_normal(n, 2, 0.1f),
                             buf = random_normal(n, 3);
    for (const float momentum : {0.0f, 0.9f})
      for (const float dampening : {0.0f, 0.1f})
        for (const bool nesterov : {false, true})
          for (const bool first : {false, true}) {
            std::vector<float> want_p = param, want_b = buf;
            cpu::sgd_update(n, want_p.data(), grad.data(), want_b.data(), 0.05f, momentum, dampening, 5e-4f,
                            nesterov, first);
            for (std::size_t phase = 0; phase < 4; phase += (n > 2000 ? 3 : 1)) {
              INFO("n=" << n << " momentum=" << momentum << " dampening=" << dampening
                        << " nesterov=" << nesterov << " first=" << first << " phase=" << phase);
              Guarded<float> p(param, phase, kGuard), g(grad, phase, kGuard), b(buf, phase, kGuard);
              cuda::sgd_update(n, p.data(), g.data(), momentum != 0.0f ? b.data() : nullptr, 0.05f, momentum,
                               dampening, 5e-4f, nesterov, first, stream);
              stream.synchronize();
              CHECK(differences(p.values(), want_p, same_bits<float>) == "");
              CHECK(differences(b.values(), want_b, same_bits<float>) == "");
              CHECK(p.guards_touched() + b.guards_touched() == 0);
            }
          }
  }
}

TEST_CASE("cuda adamw_update matches cpu::adamw_update bit for bit", "[cuda][kernels]") {
  // Exact: the step's scalars are computed on the host as cpu does, and the element
  // update uses unfused single roundings, IEEE division and the correctly rounded
  // sqrtf (nvcc's defaults -prec-div=true -prec-sqrt=true -ftz=false).
  cuda::Stream stream;
  for (const std::size_t n : kSizes) {
    const std::vector<float> param = random_normal(n, 5), grad = random_normal(n, 6, 0.1f),
                             m = random_normal(n, 7, 0.01f);
    std::vector<float> v = random_normal(n, 8, 0.01f);
    for (auto& x : v) x *= x;
    for (const std::int64_t step : {1, 2, 1000}) {
      std::vector<float> want_p = param, want_m = m, want_v = v;
      cpu::adamw_update(n, want_p.data(), grad.data(), want_m.data(), want_v.data(), 1e-3f, 0.9f, 0.999f,
                        1e-8f, 0.01f, step);
      for (std::size_t phase = 0; phase < 4; ++phase) {
        INFO("n=" << n << " step=" << step << " phase=" << phase);
        Guarded<float> p(param, phase, kGuard), g(grad, phase, kGuard), dm(m, phase, kGuard),
            dv(v, phase, kGuard);
        cuda::adamw_update(n, p.data(), g.data(), dm.data(), dv.data(), 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f,
                           step, stream);
        stream.synchronize();
        CHECK(differences(p.values(), want_p, same_bits<float>) == "");
        CHECK(differences(dm.values(), want_m, same_bits<float>) == "");
        CHECK(differences(dv.values(), want_v, same_bits<float>) == "");
        CHECK(p.guards_touched() + dm.guards_touched() + dv.guards_touched() == 0);
      }
    }
  }
}

TEST_CASE("cuda weighted_sum, fill, add and scale match kernels/cpu bit for bit", "[cuda][kernels]") {
  cuda::Stream stream;
  for (const std::size_t n : kSizes) {
    for (const std::size_t k : {std::size_t{1}, std::size_t{2}, std::size_t{5}, std::size_t{16}}) {
      std::vector<std::vector<float>> inputs;
      std::vector<const float*> host_ptrs;
      for (std::size_t j = 0; j < k; ++j) inputs.push_back(random_normal(n, 10 * k + j));
      for (const auto& in : inputs) host_ptrs.push_back(in.data());
      const std::vector<float> w = random_normal(k, k, 0.5f);
      std::vector<float> want(n);
      cpu::weighted_sum(n, k, host_ptrs.data(), w.data(), want.data());
      for (std::size_t phase = 0; phase < 4; ++phase) {
        INFO("n=" << n << " k=" << k << " phase=" << phase);
        std::vector<Guarded<float>> dev;
        for (std::size_t j = 0; j < k; ++j)
          dev.emplace_back(inputs[j], (phase + j) % 4, kGuard);  // mixed phases
        std::vector<const float*> xs;
        for (auto& d : dev) xs.push_back(d.data());
        Guarded<float> y(std::vector<float>(n, kNaN), phase, kGuard);
        cuda::weighted_sum(n, k, xs.data(), w.data(), y.data(), stream);
        // y may be one of the inputs: write over the last one.
        cuda::weighted_sum(n, k, xs.data(), w.data(), dev.back().data(), stream);
        stream.synchronize();
        CHECK(differences(y.values(), want, same_bits<float>) == "");
        CHECK(differences(dev.back().values(), want, same_bits<float>) == "");
        CHECK(y.guards_touched() + dev.back().guards_touched() == 0);
      }
    }
    const std::vector<float> x = random_normal(n, 20), y0 = random_normal(n, 21);
    std::vector<float> want_add = y0, want_scale = x;
    cpu::add(n, x.data(), want_add.data());
    cpu::scale(n, -0.3f, want_scale.data());
    for (std::size_t phase = 0; phase < 4; ++phase) {
      INFO("n=" << n << " phase=" << phase);
      Guarded<float> dx(x, phase, kGuard), dy(y0, (phase + 1) % 4, kGuard), filled(x, phase, kGuard);
      cuda::add(n, dx.data(), dy.data(), stream);
      cuda::scale(n, -0.3f, dx.data(), stream);
      cuda::fill(n, 2.5f, filled.data(), stream);
      stream.synchronize();
      CHECK(differences(dy.values(), want_add, same_bits<float>) == "");
      CHECK(differences(dx.values(), want_scale, same_bits<float>) == "");
      CHECK(differences(filled.values(), std::vector<float>(n, 2.5f), same_bits<float>) == "");
      CHECK(dx.guards_touched() + dy.guards_touched() + filled.guards_touched() == 0);
    }
  }
}

TEST_CASE("cuda all_finite finds NaN and inf anywhere and nothing outside the range", "[cuda][kernels]") {
  cuda::Stream stream;
  for (const std::size_t n : kSizes) {
    const std::vector<float> x = random_normal(n, 30);
    for (std::size_t phase = 0; phase < 4; ++phase) {
      INFO("n=" << n << " phase=" << phase);
      // NaN guards: the check must not read past the range.
      Guarded<float> clean(x, phase, kNaN);
      CHECK(cuda::all_finite(n, clean.data(), stream));
      for (const std::size_t at : {std::size_t{0}, n / 2, n - 1})
        for (const float bad :
             {kNaN, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
          std::vector<float> y = x;
          y[at] = bad;
          Guarded<float> d(y, phase, 0.0f);
          INFO("bad " << bad << " at " << at);
          CHECK_FALSE(cuda::all_finite(n, d.data(), stream));
          CHECK(cpu::all_finite(n, y.data()) == false);
        }
    }
  }
}

namespace {

// Random bit patterns (NaN payloads, subnormals, every exponent) after the encoders' edges.
std::vector<float> f32_patterns(std::size_t n, std::uint64_t seed) {
  const std::uint32_t edges[] = {0x00000000u, 0x00000001u, 0x33000000u, 0x33000001u, 0x34200000u,
                                 0x387FE000u, 0x38800000u, 0x3F801000u, 0x3F803000u, 0x477FEFFFu,
                                 0x477FF000u, 0x7F7FFFFFu, 0x7F800000u, 0x7F800001u, 0x7FC01234u,
                                 0x3F808000u, 0x3F818000u, 0x80000000u, 0xFF800000u, 0xFFC00000u};
  Rng rng(seed);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = std::bit_cast<float>(i < std::size(edges) ? edges[i] : static_cast<std::uint32_t>(rng.next_u64()));
  return v;
}

}  // namespace

TEST_CASE("cuda f16 and bf16 conversions match cpu::portable bit for bit", "[cuda][kernels]") {
  cuda::Stream stream;
  std::vector<std::uint16_t> every(65536);
  for (std::size_t i = 0; i < every.size(); ++i) every[i] = static_cast<std::uint16_t>(i);
  for (const std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{1029}, std::size_t{1} << 20}) {
    const std::vector<float> x = f32_patterns(n, n);
    std::vector<std::uint16_t> h(n), want16(n), wantb(n);
    for (std::size_t i = 0; i < n; ++i) h[i] = every[i % every.size()];
    std::vector<float> want_from16(n), want_fromb(n);
    cpu::portable::f32_to_f16(n, x.data(), want16.data());
    cpu::portable::f32_to_bf16(n, x.data(), wantb.data());
    cpu::portable::f16_to_f32(n, h.data(), want_from16.data());
    cpu::portable::bf16_to_f32(n, h.data(), want_fromb.data());
    for (std::size_t phase = 0; phase < 4; ++phase) {
      INFO("n=" << n << " phase=" << phase);
      Guarded<float> dx(x, phase, kGuard), from16(std::vector<float>(n, 0.0f), phase, kGuard),
          fromb(std::vector<float>(n, 0.0f), phase, kGuard);
      Guarded<std::uint16_t> dh(h, phase, 0xBEEF), to16(std::vector<std::uint16_t>(n, 0), phase, 0xBEEF),
          tob(std::vector<std::uint16_t>(n, 0), phase, 0xBEEF);
      cuda::f32_to_f16(n, dx.data(), to16.data(), stream);
      cuda::f32_to_bf16(n, dx.data(), tob.data(), stream);
      cuda::f16_to_f32(n, dh.data(), from16.data(), stream);
      cuda::bf16_to_f32(n, dh.data(), fromb.data(), stream);
      stream.synchronize();
      CHECK(differences(to16.values(), want16, same_bits<std::uint16_t>) == "");
      CHECK(differences(tob.values(), wantb, same_bits<std::uint16_t>) == "");
      CHECK(differences(from16.values(), want_from16, same_bits<float>) == "");
      CHECK(differences(fromb.values(), want_fromb, same_bits<float>) == "");
      CHECK(to16.guards_touched() + tob.guards_touched() + from16.guards_touched() + fromb.guards_touched() ==
            0);
      // The finiteness checks against cpu::portable on the same patterns (these hold
      // inf and NaN once n covers them), and on a finite prefix.
      CHECK(cuda::f16_all_finite(n, dh.data(), stream) == cpu::portable::f16_all_finite(n, h.data()));
      CHECK(cuda::bf16_all_finite(n, dh.data(), stream) == cpu::portable::bf16_all_finite(n, h.data()));
      const std::size_t finite_prefix = std::min<std::size_t>(n, 0x7C00);  // patterns below the f16 inf
      CHECK(cuda::f16_all_finite(finite_prefix, dh.data(), stream));
    }
  }
}

TEST_CASE("cuda int8 conversion matches cpu::portable bit for bit", "[cuda][kernels]") {
  cuda::Stream stream;
  for (const std::size_t n :
       {std::size_t{1}, std::size_t{255}, std::size_t{257}, std::size_t{1029}, (std::size_t{1} << 20) + 3}) {
    for (const std::size_t chunk : {std::size_t{1}, std::size_t{7}, std::size_t{256}, std::size_t{1000}}) {
      if (chunk == 1 && n > 5000) continue;  // a million one-element chunks add nothing
      std::vector<float> x = random_normal(n, n + chunk, 3.0f);
      // Chunks with NaN, inf and all zeros keep their special scales.
      if (n > 3 * chunk) {
        x[chunk / 2] = kNaN;
        x[chunk + chunk / 2] = std::numeric_limits<float>::infinity();
        for (std::size_t i = 2 * chunk; i < 3 * chunk; ++i) x[i] = 0.0f;
      }
      const std::size_t count = (n + chunk - 1) / chunk;
      std::vector<std::int8_t> want_q(n);
      std::vector<float> want_scales(count), want_y(n);
      cpu::portable::f32_to_int8(n, chunk, x.data(), want_q.data(), want_scales.data());
      cpu::portable::int8_to_f32(n, chunk, want_q.data(), want_scales.data(), want_y.data());
      for (std::size_t phase = 0; phase < 4; ++phase) {
        INFO("n=" << n << " chunk=" << chunk << " phase=" << phase);
        Guarded<float> dx(x, phase, kGuard), scales(std::vector<float>(count, kNaN), phase, kGuard),
            y(std::vector<float>(n, kNaN), phase, kGuard);
        Guarded<std::int8_t> q(std::vector<std::int8_t>(n, 99), phase, std::int8_t{-128});
        cuda::f32_to_int8(n, chunk, dx.data(), q.data(), scales.data(), stream);
        cuda::int8_to_f32(n, chunk, q.data(), scales.data(), y.data(), stream);
        stream.synchronize();
        CHECK(differences(scales.values(), want_scales, same_bits<float>) == "");
        CHECK(differences(q.values(), want_q, same_bits<std::int8_t>) == "");
        CHECK(differences(y.values(), want_y, same_bits<float>) == "");
        CHECK(scales.guards_touched() + q.guards_touched() + y.guards_touched() == 0);
      }
    }
  }
}
