// The per-element functions of the CUDA optimizer, vector and softmax cross-entropy
// kernels (kernels/cuda/math), run on the CPU and compared with kernels/cpu. No GPU needed.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/rng.hpp"
#include "kernels/cpu/optim.hpp"
#include "kernels/cpu/softmax_xent.hpp"
#include "kernels/cpu/vector.hpp"
#include "kernels/cuda/math/optim_math.hpp"
#include "kernels/cuda/math/vector_math.hpp"
#include "kernels/cuda/math/xent_math.hpp"
#include "tests/cuda_math_test_util.hpp"

using namespace hearsay;
using namespace hearsay::cuda_math_test;

namespace {
const std::size_t kSizes[] = {1, 3, 17, 1029};
}  // namespace

TEST_CASE("sgd_element matches cpu::sgd_update bit for bit in every mode", "[cuda_math]") {
  for (const std::size_t n : kSizes) {
    const std::vector<float> param = normals(n, 1 + n), grad = normals(n, 2 + n, 0.1f),
                             buf = normals(n, 3 + n);
    for (const float momentum : {0.0f, 0.9f})
      for (const float dampening : {0.0f, 0.1f})
        for (const float wd : {0.0f, 5e-4f})
          for (const bool nesterov : {false, true})
            for (const bool first : {false, true})
              for (std::size_t phase = 0; phase < 4; ++phase) {
                INFO("n=" << n << " momentum=" << momentum << " dampening=" << dampening << " wd=" << wd
                          << " nesterov=" << nesterov << " first=" << first << " phase=" << phase);
                const cuda::SgdConfig config{0.05f, momentum, dampening, wd, nesterov, first};
                Phased<float> p(param, phase), b(buf, phase);
                for (std::size_t i = 0; i < n; ++i)
                  p.data()[i] = cuda::sgd_element(p.data()[i], grad[i], b.data() + i, config);
                std::vector<float> want_p = param, want_b = buf;
                cpu::sgd_update(n, want_p.data(), grad.data(), want_b.data(), 0.05f, momentum, dampening, wd,
                                nesterov, first);
                CHECK(differences(p.values(), want_p, same_bits) == "");
                CHECK(differences(b.values(), want_b, same_bits) == "");
              }
  }
}

TEST_CASE("adamw_element matches cpu::adamw_update bit for bit", "[cuda_math]") {
  for (const std::size_t n : kSizes) {
    const std::vector<float> param = normals(n, 5 + n), grad = normals(n, 6 + n, 0.1f),
                             m = normals(n, 7 + n, 0.01f);
    std::vector<float> v = normals(n, 8 + n, 0.01f);
    for (auto& x : v) x *= x;  // second moments are >= 0
    for (const std::int64_t step : {1, 2, 10, 1000})
      for (const float wd : {0.0f, 0.01f})
        for (std::size_t phase = 0; phase < 4; ++phase) {
          INFO("n=" << n << " step=" << step << " wd=" << wd << " phase=" << phase);
          const cuda::AdamwScalars scalars = cuda::adamw_scalars(1e-3f, 0.9f, 0.999f, 1e-8f, wd, step);
          Phased<float> pp(param, phase), pm(m, phase), pv(v, phase);
          for (std::size_t i = 0; i < n; ++i) {
            const cuda::AdamwState s = cuda::adamw_element(
                cuda::AdamwState{pp.data()[i], pm.data()[i], pv.data()[i]}, grad[i], scalars);
            pp.data()[i] = s.param;
            pm.data()[i] = s.m;
            pv.data()[i] = s.v;
          }
          std::vector<float> want_p = param, want_m = m, want_v = v;
          cpu::adamw_update(n, want_p.data(), grad.data(), want_m.data(), want_v.data(), 1e-3f, 0.9f, 0.999f,
                            1e-8f, wd, step);
          CHECK(differences(pp.values(), want_p, same_bits) == "");
          CHECK(differences(pm.values(), want_m, same_bits) == "");
          CHECK(differences(pv.values(), want_v, same_bits) == "");
        }
  }
}

TEST_CASE("weighted_sum_at matches cpu::weighted_sum for 1 to 16 inputs", "[cuda_math]") {
  for (const std::size_t n : kSizes) {
    for (std::size_t k = 1; k <= cuda::kMaxWeightedInputs; ++k) {
      std::vector<std::vector<float>> inputs;
      std::vector<const float*> xs;
      for (std::size_t j = 0; j < k; ++j) inputs.push_back(normals(n, 100 * k + j));
      for (const auto& in : inputs) xs.push_back(in.data());
      const std::vector<float> w = normals(k, 9 + k, 0.5f);
      std::vector<float> want(n);
      cpu::weighted_sum(n, k, xs.data(), w.data(), want.data());
      for (std::size_t phase = 0; phase < 4; ++phase) {
        INFO("n=" << n << " k=" << k << " phase=" << phase);
        std::vector<Phased<float>> phased;
        for (const auto& in : inputs) phased.emplace_back(in, phase);
        cuda::WeightedInputs args{};
        args.k = static_cast<unsigned>(k);
        for (std::size_t j = 0; j < k; ++j) {
          args.xs[j] = phased[j].data();
          args.w[j] = w[j];
        }
        std::vector<float> got(n);
        for (std::size_t i = 0; i < n; ++i) got[i] = cuda::weighted_sum_at(args, i);
        CHECK(differences(got, want, same_bits) == "");
      }
    }
  }
}

TEST_CASE("add_rn and mul_rn match cpu::add and cpu::scale", "[cuda_math]") {
  const std::size_t n = 1029;
  const std::vector<float> x = normals(n, 1), y = normals(n, 2);
  std::vector<float> want_add = y, want_scale = x, got_add(n), got_scale(n);
  cpu::add(n, x.data(), want_add.data());
  cpu::scale(n, -0.3f, want_scale.data());
  for (std::size_t i = 0; i < n; ++i) got_add[i] = cuda::add_rn(y[i], x[i]);
  for (std::size_t i = 0; i < n; ++i) got_scale[i] = cuda::mul_rn(x[i], -0.3f);
  CHECK(differences(got_add, want_add, same_bits) == "");
  CHECK(differences(got_scale, want_scale, same_bits) == "");
}

namespace {

// Logits with ties for the maximum (the first one wins) in some rows.
std::vector<float> logits_for(long batch, int classes, float scale, std::uint64_t seed) {
  std::vector<float> z = normals(static_cast<std::size_t>(batch) * classes, seed, scale);
  for (long i = 0; i < batch; i += 3) {
    float* row = z.data() + i * classes;
    float m = row[0];
    for (int c = 1; c < classes; ++c) m = std::max(m, row[c]);
    for (int c = classes / 2; c < classes; c += 2) row[c] = m;
  }
  return z;
}

constexpr unsigned kSumLanes = 512;  // xent_sum_kernel's block size

// The batch loss as xent_sum_kernel adds it: lane partials in row order, then the tree.
double device_order_loss_sum(const std::vector<double>& losses) {
  std::vector<double> part(kSumLanes, 0.0);
  for (unsigned t = 0; t < kSumLanes; ++t)
    for (std::size_t i = t; i < losses.size(); i += kSumLanes) part[t] += losses[i];
  return cuda::tree_reduce(part.data(), kSumLanes);
}

}  // namespace

TEST_CASE("xent_row matches cpu::softmax_xent row by row", "[cuda_math]") {
  for (const long batch : {1L, 3L, 64L, 1100L}) {
    for (const int classes : {1, 2, 10, 37, 255}) {
      for (const float scale : {1.0f, 40.0f}) {
        const std::vector<float> z = logits_for(batch, classes, scale, batch * 1000 + classes);
        std::vector<std::uint8_t> labels(batch);
        Rng rng(batch + classes);
        for (auto& l : labels) l = static_cast<std::uint8_t>(rng.below(static_cast<std::uint64_t>(classes)));
        const float grad_scale = 1.0f / static_cast<float>(batch);
        std::vector<float> want_d(z.size());
        const cpu::XentResult want =
            cpu::softmax_xent(batch, classes, z.data(), labels.data(), grad_scale, want_d.data());
        for (std::size_t phase = 0; phase < 4; ++phase) {
          INFO("batch=" << batch << " classes=" << classes << " scale=" << scale << " phase=" << phase);
          Phased<float> pz(z, phase);
          std::vector<float> d(z.size());
          std::vector<double> losses(batch);
          double serial = 0.0;
          long correct = 0;
          for (long i = 0; i < batch; ++i) {
            const cuda::XentRow r = cuda::xent_row(classes, pz.data() + i * classes, labels[i], grad_scale,
                                                   d.data() + i * classes);
            losses[i] = r.loss;
            serial += r.loss;
            correct += r.correct;
          }
          // Summed in row order the losses are cpu::softmax_xent's exactly.
          CHECK(serial == want.loss_sum);
          CHECK(correct == want.correct);
          CHECK(differences(d, want_d, same_bits) == "");
          // The device's fixed tree order differs from the serial sum by double rounding only:
          // within batch * 2^-53 * sum (the losses are >= 0).
          CHECK(std::fabs(device_order_loss_sum(losses) - want.loss_sum) <= batch * 0x1p-53 * want.loss_sum);
          // Without dlogits the row's loss and hit are the same.
          const cuda::XentRow r0 = cuda::xent_row(classes, pz.data(), labels[0], grad_scale, nullptr);
          CHECK(r0.loss == losses[0]);
        }
      }
    }
  }
}
