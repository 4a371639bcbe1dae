// The CUDA activation, pooling, softmax cross-entropy and gather kernels on a device,
// against kernels/cpu on random inputs: odd sizes, every alignment phase, guards around
// every output. Most of these kernels are bit-identical to kernels/cpu by construction
// (same operations in the same order, no fused multiply-adds: see
// kernels/cuda/host_device.hpp), so they are compared exactly; where the order or the
// math library differs, the bound is argued next to the check.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "base/rng.hpp"
#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/pool.hpp"
#include "kernels/cpu/softmax_xent.hpp"
#include "kernels/cuda/activation.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/gather.hpp"
#include "kernels/cuda/pool.hpp"
#include "kernels/cuda/softmax_xent.hpp"
#include "tests/cuda/cuda_test_util.hpp"

using namespace hearsay;
using namespace hearsay::cuda_test;

namespace {

constexpr float kGuard = -12345.0f;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct RowShape {
  long batch;
  int channels;
  long pixels;
};
// Batch 1, odd sizes, 1x1 images, LeNet's conv outputs, and one large batch.
const RowShape kRowShapes[] = {{1, 1, 1},   {1, 3, 7},   {2, 5, 13},   {3, 16, 64},
                               {4, 6, 676}, {5, 1, 517}, {256, 6, 784}};

// Activations with zeros of both signs and a few non-finite values.
std::vector<float> activation_values(std::size_t n, std::uint64_t seed) {
  std::vector<float> v = random_normal(n, seed);
  const float specials[] = {0.0f, -0.0f, kNaN, std::numeric_limits<float>::infinity(), 1e-40f};
  for (std::size_t i = 0; i < n; i += 7) v[i] = specials[(i / 7) % 5];
  return v;
}

}  // namespace

TEST_CASE("cuda relu_forward and relu_backward match kernels/cpu bit for bit", "[cuda][kernels]") {
  cuda::Stream stream;
  for (const std::size_t n :
       {std::size_t{1}, std::size_t{5}, std::size_t{1029}, (std::size_t{1} << 20) + 3}) {
    const std::vector<float> x = activation_values(n, n), dy = random_normal(n, n + 1);
    std::vector<float> want(n), want_dx(n);
    cpu::relu_forward(static_cast<long>(n), x.data(), want.data());
    cpu::relu_backward(static_cast<long>(n), x.data(), dy.data(), want_dx.data());
    for (std::size_t phase = 0; phase < 4; ++phase) {
      INFO("n=" << n << " phase=" << phase);
      Guarded<float> dx_in(x, phase, kGuard), dy_in(dy, phase, kGuard),
          y(std::vector<float>(n, kNaN), phase, kGuard);
      cuda::relu_forward(static_cast<long>(n), dx_in.data(), y.data(), stream);
      cuda::relu_backward(static_cast<long>(n), dx_in.data(), dy_in.data(), dy_in.data(),
                          stream);  // in place
      stream.synchronize();
      CHECK(differences(y.values(), want, same_bits<float>) == "");
      CHECK(differences(dy_in.values(), want_dx, same_bits<float>) == "");
      CHECK(y.guards_touched() == 0);
      CHECK(dy_in.guards_touched() == 0);
      // In place forward.
      cuda::relu_forward(static_cast<long>(n), dx_in.data(), dx_in.data(), stream);
      stream.synchronize();
      CHECK(differences(dx_in.values(), want, same_bits<float>) == "");
    }
  }
}

TEST_CASE("cuda bias_act_rows and bias_act_cols match kernels/cpu bit for bit", "[cuda][kernels]") {
  cuda::Stream stream;
  for (const RowShape& s : kRowShapes) {
    const std::size_t image = static_cast<std::size_t>(s.channels) * s.pixels, total = s.batch * image;
    const std::vector<float> y = activation_values(total, total), bias = random_normal(s.channels, 3);
    for (const bool relu : {false, true}) {
      std::vector<float> want = y;
      for (long n = 0; n < s.batch; ++n)
        cpu::bias_rows(s.channels, s.pixels, bias.data(), relu, want.data() + n * image);
      // Read as [batch * channels x pixels] rows of features, the same buffer is a
      // bias_cols problem too: features = pixels with a bias per pixel.
      const std::vector<float> col_bias = random_normal(s.pixels, 5);
      std::vector<float> want_cols = y;
      cpu::bias_cols(s.batch * s.channels, static_cast<int>(s.pixels), col_bias.data(), relu,
                     want_cols.data());
      for (std::size_t phase = 0; phase < 4; ++phase) {
        INFO("batch=" << s.batch << " channels=" << s.channels << " pixels=" << s.pixels << " relu=" << relu
                      << " phase=" << phase);
        Guarded<float> rows(y, phase, kGuard), cols(y, phase, kGuard), b(bias, phase, kGuard),
            cb(col_bias, phase, kGuard);
        cuda::bias_act_rows(s.batch, s.channels, s.pixels, b.data(), relu, rows.data(), stream);
        cuda::bias_act_cols(s.batch * s.channels, static_cast<int>(s.pixels), cb.data(), relu, cols.data(),
                            stream);
        stream.synchronize();
        CHECK(differences(rows.values(), want, same_bits<float>) == "");
        CHECK(differences(cols.values(), want_cols, same_bits<float>) == "");
        CHECK(rows.guards_touched() + cols.guards_touched() == 0);
      }
    }
  }
}

TEST_CASE("cuda bias gradients match kernels/cpu within the summation-order bound", "[cuda][kernels]") {
  // The device sums each channel as kernels/cuda/math/activation_math.hpp describes (512
  // strided lanes, then a fixed tree); kernels/cpu sums serially in 8 lanes. Any order of m
  // terms is within (m - 1) * 2^-24 * sum|x| of the exact sum, so the two are within
  // (count + count/512 + 9) * 2^-24 * sum|x|. Whole-number data makes every order exact,
  // so there the results must be equal, and a missed or doubled element shows.
  cuda::Stream stream;
  const double u = std::ldexp(1.0, -24);
  for (const RowShape& s : kRowShapes) {
    const std::size_t image = static_cast<std::size_t>(s.channels) * s.pixels, total = s.batch * image;
    for (const bool whole : {true, false}) {
      std::vector<float> dy = random_normal(total, 7 + total);
      if (whole)
        for (auto& v : dy) v = std::round(v * 10.0f);  // sum|x| stays below 2^24: every order is exact
      std::vector<float> want(s.channels, 0.0f);
      for (long n = 0; n < s.batch; ++n)
        cpu::bias_grad_rows(s.channels, s.pixels, dy.data() + n * image, n > 0, want.data());
      const long count = s.batch * s.pixels;
      for (std::size_t phase = 0; phase < 4; ++phase) {
        INFO("batch=" << s.batch << " channels=" << s.channels << " pixels=" << s.pixels << " whole=" << whole
                      << " phase=" << phase);
        Guarded<float> d(dy, phase, kGuard), db(std::vector<float>(s.channels, kNaN), phase, kGuard);
        cuda::bias_grad_rows(s.batch, s.channels, s.pixels, d.data(), db.data(), stream);
        stream.synchronize();
        const std::vector<float> got = db.values();
        CHECK(db.guards_touched() == 0);
        for (int c = 0; c < s.channels; ++c) {
          double abs_sum = 0.0;
          for (long n = 0; n < s.batch; ++n)
            for (long p = 0; p < s.pixels; ++p) abs_sum += std::fabs(dy[(n * s.channels + c) * s.pixels + p]);
          const double bound = whole ? 0.0 : (count + count / 512 + 10) * u * abs_sum;
          INFO("c=" << c << " got " << got[c] << " want " << want[c]);
          CHECK(std::fabs(double(got[c]) - double(want[c])) <= bound);
        }
      }
    }
  }
  // Columns: features across 32-wide tiles, batches below and above the 32 row lanes.
  for (const auto& [batch, features] :
       {std::pair<long, int>{1, 1}, {3, 10}, {1000, 10}, {33, 120}, {64, 84}}) {
    const std::vector<float> dy = random_normal(static_cast<std::size_t>(batch) * features, batch);
    std::vector<float> want(features);
    cpu::bias_grad_cols(batch, features, dy.data(), want.data());
    for (std::size_t phase = 0; phase < 4; ++phase) {
      INFO("batch=" << batch << " features=" << features << " phase=" << phase);
      Guarded<float> d(dy, phase, kGuard), db(std::vector<float>(features, kNaN), phase, kGuard);
      cuda::bias_grad_cols(batch, features, d.data(), db.data(), stream);
      stream.synchronize();
      const std::vector<float> got = db.values();
      CHECK(db.guards_touched() == 0);
      for (int f = 0; f < features; ++f) {
        double abs_sum = 0.0;
        for (long b = 0; b < batch; ++b) abs_sum += std::fabs(dy[b * features + f]);
        INFO("f=" << f);
        CHECK(std::fabs(double(got[f]) - double(want[f])) <= (batch + batch / 32 + 6) * u * abs_sum);
      }
    }
  }
}

TEST_CASE("cuda bias gradients of an empty batch are zeros", "[cuda][kernels]") {
  cuda::Stream stream;
  cuda::DeviceBuffer<float> db(5);
  db.copy_from_host(std::vector<float>(5, kNaN));
  cuda::bias_grad_rows(0, 5, 9, nullptr, db.data(), stream);
  stream.synchronize();
  CHECK(to_host(db) == std::vector<float>(5, 0.0f));
  db.copy_from_host(std::vector<float>(5, kNaN));
  cuda::bias_grad_cols(0, 5, nullptr, db.data(), stream);
  stream.synchronize();
  CHECK(to_host(db) == std::vector<float>(5, 0.0f));
}

namespace {

struct PoolCase {
  int height, width, kernel, stride;
};
// Odd sizes with tails, stride below / equal to / above the kernel, window = plane,
// LeNet's 2x2 pools and a width past kernels/cpu's AVX-512 path.
const PoolCase kPoolCases[] = {{1, 1, 1, 1}, {5, 7, 2, 2},   {28, 28, 2, 2}, {26, 26, 2, 2},
                               {9, 9, 2, 2}, {7, 9, 3, 1},   {10, 11, 3, 3}, {13, 12, 2, 3},
                               {6, 5, 3, 2}, {33, 34, 2, 2}, {5, 5, 5, 1}};

}  // namespace

TEST_CASE("cuda pooling matches kernels/cpu", "[cuda][kernels]") {
  // Bit-identical except avgpool_forward's 2x2/2 on a CPU with AVX-512, which kernels/cpu
  // sums in another order; there the two are within 6 * 2^-24 * sum|window| / 4 (two
  // orders of four terms, each within 3 roundings of the exact sum).
  cuda::Stream stream;
  for (const PoolCase& pc : kPoolCases) {
    const cpu::PoolGeometry g{pc.height, pc.width, pc.kernel, pc.stride};
    const bool reordered = pc.kernel == 2 && pc.stride == 2 && pc.width <= 32 && cpu::has_avx512();
    for (const long planes : {1L, 3L, 600L}) {
      const std::size_t in = static_cast<std::size_t>(planes) * pc.height * pc.width;
      const std::size_t out = static_cast<std::size_t>(planes) * g.out_h() * g.out_w();
      std::vector<float> x = random_normal(in, in);
      for (std::size_t i = 0; i < in; i += 3) x[i] = std::round(x[i]);  // ties for the max
      const std::vector<float> dy = random_normal(out, out), mask = random_normal(in, in + 1);
      std::vector<float> want_avg(out), want_max(out), want_avg_dx(in), want_masked_dx(in), want_max_dx(in);
      cpu::avgpool_forward(g, planes, x.data(), want_avg.data());
      cpu::maxpool_forward(g, planes, x.data(), want_max.data());
      cpu::avgpool_backward(g, planes, dy.data(), want_avg_dx.data(), nullptr);
      cpu::avgpool_backward(g, planes, dy.data(), want_masked_dx.data(), mask.data());
      cpu::maxpool_backward(g, planes, x.data(), dy.data(), want_max_dx.data());
      for (std::size_t phase = 0; phase < 4; ++phase) {
        INFO(pc.height << "x" << pc.width << " k=" << pc.kernel << " s=" << pc.stride << " planes=" << planes
                       << " phase=" << phase);
        Guarded<float> dx_in(x, phase, kGuard), ddy(dy, phase, kGuard), dmask(mask, phase, kGuard);
        const std::vector<float> unset_out(out, kNaN), unset_in(in, kNaN);  // every element must be written
        Guarded<float> avg(unset_out, phase, kGuard), max(unset_out, phase, kGuard);
        Guarded<float> avg_dx(unset_in, phase, kGuard), masked_dx(unset_in, phase, kGuard),
            max_dx(unset_in, phase, kGuard);
        cuda::avgpool_forward(g, planes, dx_in.data(), avg.data(), stream);
        cuda::maxpool_forward(g, planes, dx_in.data(), max.data(), stream);
        cuda::avgpool_backward(g, planes, ddy.data(), avg_dx.data(), nullptr, stream);
        cuda::avgpool_backward(g, planes, ddy.data(), masked_dx.data(), dmask.data(), stream);
        cuda::maxpool_backward(g, planes, dx_in.data(), ddy.data(), max_dx.data(), stream);
        stream.synchronize();
        if (reordered) {
          const std::vector<float> got = avg.values();
          std::size_t bad = 0;
          for (std::size_t i = 0; i < out; ++i) {
            const long p = static_cast<long>(i) / (g.out_h() * g.out_w()),
                       r = (static_cast<long>(i) / g.out_w()) % g.out_h(),
                       c = static_cast<long>(i) % g.out_w();
            const float* w = x.data() + p * pc.height * pc.width + 2 * r * pc.width + 2 * c;
            const double window =
                std::fabs(w[0]) + std::fabs(w[1]) + std::fabs(w[pc.width]) + std::fabs(w[pc.width + 1]);
            bad += !(std::fabs(double(got[i]) - want_avg[i]) <= 6 * std::ldexp(1.0, -24) * window / 4);
          }
          CHECK(bad == 0);
        } else {
          CHECK(differences(avg.values(), want_avg, same_value) == "");
        }
        CHECK(differences(max.values(), want_max, same_value) == "");
        CHECK(differences(avg_dx.values(), want_avg_dx, same_value) == "");
        CHECK(differences(masked_dx.values(), want_masked_dx, same_value) == "");
        CHECK(differences(max_dx.values(), want_max_dx, same_value) == "");
        CHECK(avg.guards_touched() + max.guards_touched() + avg_dx.guards_touched() +
                  masked_dx.guards_touched() + max_dx.guards_touched() ==
              0);
      }
    }
  }
}

namespace {

// Labels below `classes`, and logits where every third row has ties for the maximum.
void xent_inputs(long batch, int classes, float scale, std::uint64_t seed, std::vector<float>& z,
                 std::vector<std::uint8_t>& labels) {
  z = random_normal(static_cast<std::size_t>(batch) * classes, seed, scale);
  for (long i = 0; i < batch; i += 3) {
    float* row = z.data() + i * classes;
    float m = row[0];
    for (int c = 1; c < classes; ++c) m = std::max(m, row[c]);
    for (int c = classes / 2; c < classes; c += 2) row[c] = m;
  }
  Rng rng(seed + 1);
  labels.resize(batch);
  for (auto& l : labels) l = static_cast<std::uint8_t>(rng.below(static_cast<std::uint64_t>(classes)));
}

}  // namespace

TEST_CASE("cuda softmax_xent matches cpu::softmax_xent", "[cuda][kernels]") {
  // The formula is the same step for step; only exp and log differ (CUDA's double
  // versions are within 2 ulp of glibc's). That moves each probability by a few 1e-16
  // relative, which changes the fp32 gradient by at most one rounding: |d| * 2^-23, plus
  // 1e-13 * grad_scale where p - 1 cancels. The loss sum moves by about 1e-15 relative
  // per row, and its fixed tree order differs from the serial sum by double rounding: a
  // relative 1e-12 covers both with room. Hits compare fp32 logits only: exact.
  cuda::Stream stream;
  for (const long batch : {1L, 3L, 64L, 1100L}) {
    for (const int classes : {1, 2, 10, 37, 255}) {
      for (const float scale : {1.0f, 40.0f}) {
        std::vector<float> z;
        std::vector<std::uint8_t> labels;
        xent_inputs(batch, classes, scale, static_cast<std::uint64_t>(batch * 1000 + classes), z, labels);
        const float grad_scale = 1.0f / static_cast<float>(batch);
        std::vector<float> want_d(z.size());
        const cpu::XentResult want =
            cpu::softmax_xent(batch, classes, z.data(), labels.data(), grad_scale, want_d.data());
        for (std::size_t phase = 0; phase < 4; ++phase) {
          INFO("batch=" << batch << " classes=" << classes << " scale=" << scale << " phase=" << phase);
          Guarded<float> dz(z, phase, kGuard), dd(std::vector<float>(z.size(), kNaN), phase, kGuard);
          Guarded<std::uint8_t> dl(labels, phase, std::uint8_t{0xEE});
          Guarded<float> scratch(std::vector<float>(cuda::softmax_xent_scratch_floats(batch), kNaN), phase,
                                 kGuard);
          cuda::DeviceBuffer<cuda::XentSums> sums(1);
          HEARSAY_CUDA_CHECK(cudaMemsetAsync(sums.data(), 0, sizeof(cuda::XentSums), stream));
          cuda::softmax_xent(batch, classes, dz.data(), dl.data(), grad_scale, dd.data(), scratch.data(),
                             sums.data(), stream);
          // Evaluation (no dlogits) adds the same totals again.
          cuda::softmax_xent(batch, classes, dz.data(), dl.data(), grad_scale, nullptr, scratch.data(),
                             sums.data(), stream);
          stream.synchronize();
          std::vector<cuda::XentSums> got(1);
          sums.copy_to_host(got);
          CHECK(got[0].correct == 2 * want.correct);
          CHECK(std::fabs(got[0].loss_sum - 2 * want.loss_sum) <= 1e-12 * 2 * want.loss_sum + 1e-300);
          const std::vector<float> d = dd.values();
          std::size_t bad = 0;
          for (std::size_t i = 0; i < d.size(); ++i)
            bad +=
                !(std::fabs(double(d[i]) - want_d[i]) <= std::fabs(want_d[i]) * 0x1p-23 + 1e-13 * grad_scale);
          CHECK(bad == 0);
          CHECK(dd.guards_touched() + scratch.guards_touched() == 0);
        }
      }
    }
  }
}

TEST_CASE("cuda gather_rows and gather_labels copy the indexed rows", "[cuda][kernels]") {
  cuda::Stream stream;
  const long dataset = 1000;
  // 784 and 3072: MNIST and CIFAR rows (the float4 path when aligned); 10 and 7: scalar.
  for (const long row_floats : {784L, 3072L, 10L, 7L, 1L}) {
    const std::vector<float> src = random_normal(static_cast<std::size_t>(dataset * row_floats), row_floats);
    std::vector<std::uint8_t> labels(dataset);
    for (long i = 0; i < dataset; ++i) labels[i] = static_cast<std::uint8_t>(i * 7 % 251);
    for (const long rows : {1L, 3L, 256L, 70000L}) {  // 70000: more rows than one grid's y blocks
      Rng rng(static_cast<std::uint64_t>(rows + row_floats));
      std::vector<std::int64_t> idx(rows);
      for (auto& i : idx) i = static_cast<std::int64_t>(rng.below(dataset));
      if (rows * row_floats > 8'000'000) continue;  // keep the host side quick
      std::vector<float> want(static_cast<std::size_t>(rows * row_floats));
      std::vector<std::uint8_t> want_labels(rows);
      for (long i = 0; i < rows; ++i) {
        std::copy_n(src.begin() + idx[i] * row_floats, row_floats, want.begin() + i * row_floats);
        want_labels[i] = labels[idx[i]];
      }
      for (std::size_t phase = 0; phase < 4; ++phase) {
        INFO("row_floats=" << row_floats << " rows=" << rows << " phase=" << phase);
        Guarded<float> dsrc(src, phase, kGuard), dst(std::vector<float>(want.size(), kNaN), phase, kGuard);
        Guarded<std::int64_t> didx(idx, 0, std::int64_t{-1});
        Guarded<std::uint8_t> dlab(labels, phase, std::uint8_t{0}),
            dlab_out(std::vector<std::uint8_t>(rows, 0xEE), phase, 0xEE);
        cuda::gather_rows(rows, row_floats, dsrc.data(), didx.data(), dst.data(), stream);
        cuda::gather_labels(rows, dlab.data(), didx.data(), dlab_out.data(), stream);
        stream.synchronize();
        CHECK(differences(dst.values(), want, same_bits<float>) == "");
        CHECK(differences(dlab_out.values(), want_labels, same_bits<std::uint8_t>) == "");
        CHECK(dst.guards_touched() + dlab_out.guards_touched() == 0);
      }
    }
  }
}
