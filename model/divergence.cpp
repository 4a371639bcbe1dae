#include "model/divergence.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

namespace hearsay {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return "inf";
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", v);
  return text;
}

}  // namespace

std::string Divergence::describe() const {
  return "diverged at step " + std::to_string(step) + " (began at step " + std::to_string(began_at) +
         "): " + what;
}

DivergenceWatch::DivergenceWatch(int classes) {
  if (classes < 2) throw std::invalid_argument("DivergenceWatch: a classifier has at least 2 classes");
  loss_limit_ = kLossFactor * std::log(static_cast<double>(classes));
}

std::optional<std::int64_t> DivergenceWatch::excursion(const std::vector<Point>& series) {
  if (series.size() < 2) return std::nullopt;
  // best[i]: the best value before point i; tail_min: the lowest value from point i on.
  std::vector<double> best(series.size(), kInf);
  for (std::size_t i = 1; i < series.size(); ++i) best[i] = std::min(best[i - 1], series[i - 1].value);
  std::optional<std::int64_t> began;
  double tail_min = kInf;
  for (std::size_t i = series.size(); i-- > 1;) {
    tail_min = std::min(tail_min, series[i].value);
    if (tail_min > 2 * best[i]) began = series[i].step;  // keep going: an earlier start may hold too
  }
  return began;
}

std::optional<std::int64_t> DivergenceWatch::excursion_began() const {
  const auto a = excursion(losses_), b = excursion(distances_);
  if (a && b) return std::min(*a, *b);
  return a ? a : b;
}

std::optional<Divergence> DivergenceWatch::observe(std::int64_t step, double loss, double partner_distance) {
  if (divergence_) return std::nullopt;
  const double l = std::isfinite(loss) ? loss : kInf;
  losses_.push_back({step, l});
  std::string what;
  if (!std::isfinite(loss)) {
    what = "the loss became " + number(loss);
  } else if (loss > loss_limit_) {
    what = "the loss grew to " + number(loss) + " (a uniform guess has " + number(loss_limit_ / kLossFactor) +
           ")";
  }
  if (!(partner_distance <= 0)) {  // NaN included: it is a report, and a bad one
    const double d = std::isfinite(partner_distance) ? partner_distance : kInf;
    if (static_cast<int>(distances_.size()) < kEarlyDistances) early_distance_ = std::max(early_distance_, d);
    distances_.push_back({step, d});
    if (what.empty() &&
        (!std::isfinite(partner_distance) || (static_cast<int>(distances_.size()) > kEarlyDistances &&
                                              partner_distance > kDistanceFactor * early_distance_))) {
      double low = kInf;
      for (const Point& p : distances_) low = std::min(low, p.value);
      what = "the partner distance grew from " + number(low) + " to " + number(partner_distance);
    }
  }
  if (what.empty()) return std::nullopt;
  Divergence d;
  d.step = step;
  d.began_at = excursion_began().value_or(step);
  d.what = what;
  divergence_ = d;
  return d;
}

}  // namespace hearsay
