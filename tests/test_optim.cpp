#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <vector>

#include "base/rng.hpp"
#include "kernels/cpu/optim.hpp"
#include "model/optim/optimizer.hpp"
#include "model/optim/schedule.hpp"

using namespace hearsay;

namespace {

// The 3-element example used by the hand-computed tests.
const std::vector<float> kP0{1.0f, -2.0f, 3.0f};
const std::vector<float> kG1{0.5f, 1.0f, -1.5f};
const std::vector<float> kG2{1.0f, -1.0f, 0.5f};

void require_near(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(want[i]).epsilon(1e-5).margin(1e-6));
}

std::vector<float> randn(Rng& rng, std::size_t n) {
  std::vector<float> x(n);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  return x;
}

// Largest |got - want| relative to max(|want|, rms(want)). Relative to the buffer's RMS at
// least, because an element that lands near zero by cancellation (p - lr*g) carries the
// fp32 rounding of its O(rms) terms and would report a huge error relative to itself.
double max_rel_err(const std::vector<float>& got, const std::vector<double>& want) {
  double sum_sq = 0.0;
  for (double w : want) sum_sq += w * w;
  const double floor = std::sqrt(sum_sq / static_cast<double>(want.size()));
  double worst = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(std::abs(want[i]), floor));
  }
  return worst;
}

}  // namespace

TEST_CASE("SGD plain, momentum, dampening, Nesterov and weight decay match hand arithmetic", "[optim]") {
  // p0 = [1, -2, 3], g1 = [0.5, 1, -1.5], g2 = [1, -1, 0.5], lr = 0.1 throughout.
  std::vector<float> p = kP0;
  auto step = [&](Optimizer& opt, const std::vector<float>& g) { opt.step(p, g, 0.1f); };

  SECTION("plain") {
    // p1 = p0 - 0.1*g1 = [0.95, -2.1, 3.15]; p2 = p1 - 0.1*g2 = [0.85, -2.0, 3.1]
    auto opt = make_sgd(3, {});
    REQUIRE(opt->state().empty());
    step(*opt, kG1);
    require_near(p, {0.95, -2.1, 3.15});
    step(*opt, kG2);
    require_near(p, {0.85, -2.0, 3.1});
    REQUIRE(opt->steps_taken() == 2);
  }
  SECTION("momentum 0.9: the first step copies g into the buffer") {
    // step 1: buf = g1 = [0.5, 1, -1.5];                    p = [0.95, -2.1, 3.15]
    // step 2: buf = 0.9*g1 + g2 = [1.45, -0.1, -0.85];      p = [0.805, -2.09, 3.235]
    // step 3: buf = 0.9*buf + g1 = [1.805, 0.91, -2.265];   p = [0.6245, -2.181, 3.4615]
    auto opt = make_sgd(3, {.momentum = 0.9f});
    REQUIRE(opt->state().size() == 3);
    step(*opt, kG1);
    require_near(p, {0.95, -2.1, 3.15});
    step(*opt, kG2);
    require_near(p, {0.805, -2.09, 3.235});
    step(*opt, kG1);
    require_near(p, {0.6245, -2.181, 3.4615});
    const auto buf = opt->state();
    require_near(std::vector<float>(buf.begin(), buf.end()), {1.805, 0.91, -2.265});
  }
  SECTION("dampening 0.5 is not applied on the first step (as in PyTorch)") {
    // step 1: buf = g1;                                           p = [0.95, -2.1, 3.15]
    // step 2: buf = 0.9*g1 + 0.5*g2 = [0.95, 0.4, -1.1];          p = [0.855, -2.14, 3.26]
    auto opt = make_sgd(3, {.momentum = 0.9f, .dampening = 0.5f});
    step(*opt, kG1);
    require_near(p, {0.95, -2.1, 3.15});
    step(*opt, kG2);
    require_near(p, {0.855, -2.14, 3.26});
  }
  SECTION("Nesterov 0.9") {
    // step 1: buf = g1; g = g1 + 0.9*buf = 1.9*g1 = [0.95, 1.9, -2.85];     p = [0.905, -2.19, 3.285]
    // step 2: buf = [1.45, -0.1, -0.85]; g = g2 + 0.9*buf = [2.305, -1.09, -0.265]
    //         p = [0.905 - 0.2305, -2.19 + 0.109, 3.285 + 0.0265] = [0.6745, -2.081, 3.3115]
    auto opt = make_sgd(3, {.momentum = 0.9f, .nesterov = true});
    step(*opt, kG1);
    require_near(p, {0.905, -2.19, 3.285});
    step(*opt, kG2);
    require_near(p, {0.6745, -2.081, 3.3115});
  }
  SECTION("weight decay 0.1 without momentum") {
    // step 1: g = g1 + 0.1*p0 = [0.6, 0.8, -1.2];             p = [0.94, -2.08, 3.12]
    // step 2: g = g2 + 0.1*p1 = [1.094, -1.208, 0.812];       p = [0.8306, -1.9592, 3.0388]
    auto opt = make_sgd(3, {.weight_decay = 0.1f});
    step(*opt, kG1);
    require_near(p, {0.94, -2.08, 3.12});
    step(*opt, kG2);
    require_near(p, {0.8306, -1.9592, 3.0388});
  }
}

TEST_CASE("AdamW with weight decay matches hand arithmetic for two steps", "[optim]") {
  // lr 0.1, betas (0.9, 0.999), eps 1e-8, wd 0.1; p0, g1, g2 as above.
  // step 1: p *= 1 - 0.1*0.1 = 0.99 -> [0.99, -1.98, 2.97]
  //         m = 0.1*g1 = [0.05, 0.1, -0.15]; v = 0.001*g1^2 = [0.00025, 0.001, 0.00225]
  //         mhat = m/0.1 = g1; vhat = v/0.001 = g1^2; mhat/(sqrt(vhat)+eps) = sign(g1) (to 2e-8)
  //         p = [0.99 - 0.1, -1.98 - 0.1, 2.97 + 0.1] = [0.89, -2.08, 3.07]
  // step 2: p *= 0.99 -> [0.8811, -2.0592, 3.0393]
  //         m = 0.9*m + 0.1*g2 = [0.145, -0.01, -0.085]
  //         v = 0.999*v + 0.001*g2^2 = [0.00124975, 0.001999, 0.00249775]
  //         bias corrections 1 - 0.9^2 = 0.19, 1 - 0.999^2 = 0.001999
  //         mhat = [0.7631579, -0.0526316, -0.4473684]; sqrt(vhat) = [0.7906881, 1, 1.1178102]
  //         p -= 0.1 * mhat/sqrt(vhat) = [0.0965182, -0.0052632, -0.0400218]
  //         p = [0.7845818, -2.0539368, 3.0793219]
  std::vector<float> p = kP0;
  auto opt = make_adamw(3, {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f});
  REQUIRE(opt->name() == "adamw");
  REQUIRE(opt->state().size() == 6);
  opt->step(p, kG1, 0.1f);
  require_near(p, {0.89, -2.08, 3.07});
  opt->step(p, kG2, 0.1f);
  require_near(p, {0.7845818, -2.0539368, 3.0793219});
  const auto s = opt->state();
  require_near(std::vector<float>(s.begin(), s.begin() + 3), {0.145, -0.01, -0.085});
  require_near(std::vector<float>(s.begin() + 3, s.end()), {0.00124975, 0.001999, 0.00249775});
}

TEST_CASE("SGD kernel matches a double-precision reference on a long odd-length buffer", "[optim]") {
  struct Case {
    float momentum, dampening, weight_decay;
    bool nesterov;
  };
  const Case cases[] = {{0.0f, 0.0f, 0.0f, false},
                        {0.0f, 0.0f, 0.01f, false},
                        {0.9f, 0.1f, 0.01f, false},
                        {0.9f, 0.0f, 1e-4f, true}};
  const std::size_t n = 1037;
  const float lr = 0.05f;
  for (const Case& c : cases) {
    Rng rng(7);
    std::vector<float> p = randn(rng, n), buf(n, 123.0f);  // junk: the first step must not read it
    std::vector<double> rp(p.begin(), p.end()), rbuf(n, 0.0);
    for (int t = 0; t < 3; ++t) {
      const std::vector<float> g = randn(rng, n);
      cpu::sgd_update(n, p.data(), g.data(), buf.data(), lr, c.momentum, c.dampening, c.weight_decay,
                      c.nesterov, t == 0);
      for (std::size_t i = 0; i < n; ++i) {
        double d = g[i] + static_cast<double>(c.weight_decay) * rp[i];
        if (c.momentum != 0.0f) {
          rbuf[i] = t == 0 ? d : c.momentum * rbuf[i] + (1.0 - c.dampening) * d;
          d = c.nesterov ? d + c.momentum * rbuf[i] : rbuf[i];
        }
        rp[i] -= lr * d;
      }
      INFO("momentum " << c.momentum << " nesterov " << c.nesterov << " step " << t);
      REQUIRE(max_rel_err(p, rp) < 1e-6);
      if (c.momentum != 0.0f) REQUIRE(max_rel_err(buf, rbuf) < 1e-6);
    }
  }
}

TEST_CASE("AdamW kernel matches a double-precision reference on a long odd-length buffer", "[optim]") {
  const std::size_t n = 1037;
  const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
  Rng rng(11);
  std::vector<float> p = randn(rng, n), m(n, 0.0f), v(n, 0.0f);
  std::vector<double> rp(p.begin(), p.end()), rm(n, 0.0), rv(n, 0.0);
  for (std::int64_t t = 1; t <= 4; ++t) {
    const std::vector<float> g = randn(rng, n);
    cpu::adamw_update(n, p.data(), g.data(), m.data(), v.data(), lr, b1, b2, eps, wd, t);
    const double bc1 = 1.0 - std::pow(double{b1}, t), bc2 = 1.0 - std::pow(double{b2}, t);
    for (std::size_t i = 0; i < n; ++i) {
      rp[i] *= 1.0 - double{lr} * wd;
      rm[i] = b1 * rm[i] + (1.0 - b1) * g[i];
      rv[i] = b2 * rv[i] + (1.0 - b2) * g[i] * g[i];
      rp[i] -= lr * (rm[i] / bc1) / (std::sqrt(rv[i] / bc2) + eps);
    }
    INFO("step " << t);
    REQUIRE(max_rel_err(p, rp) < 1e-6);
    REQUIRE(max_rel_err(m, rm) < 1e-6);
    REQUIRE(max_rel_err(v, rv) < 1e-6);
  }
  REQUIRE_THROWS_AS(cpu::adamw_update(n, p.data(), p.data(), m.data(), v.data(), lr, b1, b2, eps, wd, 0),
                    std::invalid_argument);
}

TEST_CASE("a fresh optimizer given a copied state resumes identically", "[optim]") {
  const std::size_t n = 1037;
  auto check = [&](auto make) {
    Rng rng(3);
    std::vector<float> p = randn(rng, n);
    std::vector<std::vector<float>> grads;
    for (int t = 0; t < 5; ++t) grads.push_back(randn(rng, n));
    auto a = make();
    for (int t = 0; t < 3; ++t) a->step(p, grads[t], 0.01f);
    // "Checkpoint": parameters, state() and steps_taken into a new optimizer.
    std::vector<float> q = p;
    auto b = make();
    REQUIRE(b->state().size() == a->state().size());
    std::copy(a->state().begin(), a->state().end(), b->state().begin());
    b->set_steps_taken(a->steps_taken());
    for (int t = 3; t < 5; ++t) {
      a->step(p, grads[t], 0.01f);
      b->step(q, grads[t], 0.01f);
    }
    REQUIRE(p == q);  // bit-identical
    REQUIRE(std::equal(a->state().begin(), a->state().end(), b->state().begin()));
    REQUIRE(b->steps_taken() == 5);
  };
  check([&] { return make_sgd(n, {.momentum = 0.9f, .dampening = 0.1f, .weight_decay = 1e-3f}); });
  check([&] { return make_sgd(n, {.momentum = 0.9f, .nesterov = true}); });
  check([&] { return make_adamw(n, {}); });
  REQUIRE(make_sgd(n, {.momentum = 0.9f})->state().size() == n);
  REQUIRE(make_adamw(n, {})->state().size() == 2 * n);
}

TEST_CASE("optimizers reject invalid options and mismatched buffers", "[optim]") {
  REQUIRE_THROWS_AS(make_sgd(3, {.momentum = -0.1f}), std::invalid_argument);
  REQUIRE_THROWS_AS(make_sgd(3, {.dampening = -0.1f}), std::invalid_argument);
  REQUIRE_THROWS_AS(make_sgd(3, {.weight_decay = -1e-4f}), std::invalid_argument);
  REQUIRE_THROWS_AS(make_sgd(3, {.momentum = NAN}), std::invalid_argument);
  REQUIRE_THROWS_AS(make_sgd(3, {.nesterov = true}), std::invalid_argument);
  REQUIRE_THROWS_AS(make_sgd(3, {.momentum = 0.9f, .dampening = 0.1f, .nesterov = true}),
                    std::invalid_argument);
  REQUIRE_NOTHROW(make_sgd(3, {.momentum = 0.9f, .nesterov = true}));
  REQUIRE_THROWS_AS(make_adamw(3, {.beta1 = 1.0f}), std::invalid_argument);
  REQUIRE_THROWS_AS(make_adamw(3, {.beta1 = -0.1f}), std::invalid_argument);
  REQUIRE_THROWS_AS(make_adamw(3, {.beta2 = 1.0f}), std::invalid_argument);
  REQUIRE_THROWS_AS(make_adamw(3, {.eps = 0.0f}), std::invalid_argument);
  REQUIRE_THROWS_AS(make_adamw(3, {.weight_decay = -0.01f}), std::invalid_argument);
  REQUIRE_NOTHROW(make_adamw(3, {.beta1 = 0.0f, .beta2 = 0.0f}));

  auto opt = make_sgd(3, {.momentum = 0.9f});
  std::vector<float> p(3), g(3), g4(4);
  REQUIRE_THROWS_AS(opt->step(p, g4, 0.1f), std::invalid_argument);
  REQUIRE_THROWS_AS(opt->step(g4, g, 0.1f), std::invalid_argument);
  REQUIRE_THROWS_AS(opt->step(p, g, -0.1f), std::invalid_argument);
  REQUIRE_THROWS_AS(opt->step(p, g, NAN), std::invalid_argument);
  REQUIRE_THROWS_AS(opt->set_steps_taken(-1), std::invalid_argument);
  REQUIRE(opt->steps_taken() == 0);  // failed steps do not count
}

TEST_CASE("learning-rate schedules", "[optim]") {
  SECTION("constant") {
    auto s = make_constant_lr(0.1f);
    REQUIRE(s->at(0) == 0.1f);
    REQUIRE(s->at(1000000) == 0.1f);
    REQUIRE(s->describe() == "constant(lr=0.1)");
    REQUIRE_THROWS_AS(s->at(-1), std::invalid_argument);
  }
  SECTION("step: lr * gamma^(step / step_size), changing exactly at the boundaries") {
    auto s = make_step_lr(0.1f, 30, 0.1f);
    REQUIRE(s->at(0) == Approx(0.1));
    REQUIRE(s->at(29) == Approx(0.1));
    REQUIRE(s->at(30) == Approx(0.01));
    REQUIRE(s->at(59) == Approx(0.01));
    REQUIRE(s->at(60) == Approx(0.001));
    REQUIRE(s->describe() == "step(lr=0.1, step_size=30, gamma=0.1)");
  }
  SECTION("warm-up then cosine") {
    // lr 0.1, min 0.01, warm-up 10, total 110: cosine over steps 10..110.
    auto s = make_warmup_cosine_lr(0.1f, 10, 110, 0.01f);
    REQUIRE(s->at(0) == Approx(0.01));       // 0.1 * 1/10
    REQUIRE(s->at(4) == Approx(0.05));       // 0.1 * 5/10
    REQUIRE(s->at(9) == Approx(0.1));        // last warm-up step reaches the peak
    REQUIRE(s->at(10) == Approx(0.1));       // cosine starts at the peak
    REQUIRE(s->at(60) == Approx(0.055));     // midpoint: (0.1 + 0.01) / 2
    REQUIRE(s->at(110) == Approx(0.01));     // end: min_lr
    REQUIRE(s->at(100000) == Approx(0.01));  // and after
    REQUIRE(s->at(35) == Approx(0.01 + 0.09 * 0.5 * (1 + std::cos(std::numbers::pi / 4))));
    auto flat = make_warmup_cosine_lr(0.1f, 0, 100);  // no warm-up: starts at the peak
    REQUIRE(flat->at(0) == Approx(0.1));
    REQUIRE(flat->at(50) == Approx(0.05));
    REQUIRE(flat->at(100) == 0.0f);
  }
  SECTION("invalid arguments") {
    REQUIRE_THROWS_AS(make_constant_lr(-0.1f), std::invalid_argument);
    REQUIRE_THROWS_AS(make_constant_lr(INFINITY), std::invalid_argument);
    REQUIRE_THROWS_AS(make_step_lr(0.1f, 0, 0.5f), std::invalid_argument);
    REQUIRE_THROWS_AS(make_step_lr(0.1f, 10, 0.0f), std::invalid_argument);
    REQUIRE_THROWS_AS(make_warmup_cosine_lr(0.1f, -1, 100), std::invalid_argument);
    REQUIRE_THROWS_AS(make_warmup_cosine_lr(0.1f, 200, 100), std::invalid_argument);
    REQUIRE_THROWS_AS(make_warmup_cosine_lr(0.1f, 10, 100, 0.2f), std::invalid_argument);
  }
}

TEST_CASE("parse_lr_schedule reads the --lr-schedule forms and explains bad text", "[optim]") {
  REQUIRE(parse_lr_schedule("constant", 0.1f, 100)->describe() == "constant(lr=0.1)");
  REQUIRE(parse_lr_schedule("step:30:0.5", 0.1f, 100)->describe() == "step(lr=0.1, step_size=30, gamma=0.5)");
  REQUIRE(parse_lr_schedule("cosine", 0.1f, 100)->describe() ==
          "cosine(lr=0.1, warmup=0, total=100, min_lr=0)");
  auto warm = parse_lr_schedule("cosine:10", 0.1f, 100);
  REQUIRE(warm->describe() == "cosine(lr=0.1, warmup=10, total=100, min_lr=0)");
  REQUIRE(warm->at(0) == Approx(0.01));
  // A percentage of the run: 10% of 705 steps is 70.5, rounded to 71.
  REQUIRE(parse_lr_schedule("cosine:10%", 0.1f, 705)->describe() ==
          "cosine(lr=0.1, warmup=71, total=705, min_lr=0)");
  REQUIRE(parse_lr_schedule("cosine:2.5%", 0.1f, 200)->describe() ==
          "cosine(lr=0.1, warmup=5, total=200, min_lr=0)");
  REQUIRE(parse_lr_schedule("cosine:100%", 0.1f, 50)->at(49) == Approx(0.1));

  for (const std::string bad : {"",           "linear",      "constant:1",    "step",       "step:30",
                                "step:x:0.5", "step:30:y",   "step:30:0.5:1", "step:0:0.5", "step:-3:0.5",
                                "step:30:0",  "cosine:",     "cosine:abc",    "cosine:5x",  "cosine:200",
                                "cosine:-1",  "cosine:1:2",  "Cosine",        "cosine:%",   "cosine:101%",
                                "cosine:-5%", "cosine:nan%", "cosine:5%%",    "cosine:x%"}) {
    INFO("text: '" << bad << "'");
    try {
      parse_lr_schedule(bad, 0.1f, 100);
      FAIL("accepted");
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      REQUIRE(what.find("--lr-schedule") != std::string::npos);
      REQUIRE(
          what.find("constant, step:STEP_SIZE:GAMMA, cosine, cosine:WARMUP_STEPS, cosine:WARMUP_PERCENT%") !=
          std::string::npos);
    }
  }
}
