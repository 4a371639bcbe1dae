// A seeded random source whose output is the same on every platform and compiler.
// std::normal_distribution and friends are implementation-defined, which would break
// "same seed, bit-identical run" across machines, so the distributions live here.
#pragma once
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string_view>

namespace hearsay {

// FNV-1a 64 of text: the same on every platform and build, unlike std::hash (model
// fingerprints, per-peer seeds derived from a peer id).
inline std::uint64_t stable_hash(std::string_view text) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}

  // SplitMix64: tiny, fast, passes BigCrush, and any seed (even 0) is a good seed.
  std::uint64_t next_u64() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n) without modulo bias (Lemire's method); n > 0.
  std::uint64_t below(std::uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(next_u64()) * n;
    auto low = static_cast<std::uint64_t>(m);
    if (low < n) {
      const std::uint64_t threshold = -n % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next_u64()) * n;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }
  // Standard normal by Box-Muller (the spare value is discarded to keep state simple).
  double normal() {
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  // Gamma(shape, 1) by Marsaglia-Tsang; shape > 0. Used for Dirichlet partitions.
  double gamma(double shape) {
    if (shape < 1.0) {
      // Boost: Gamma(a) = Gamma(a+1) * U^(1/a).
      double u = uniform();
      while (u <= 0.0) u = uniform();
      return gamma(shape + 1.0) * std::pow(u, 1.0 / shape);
    }
    const double d = shape - 1.0 / 3.0;
    const double c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      double x, v;
      do {
        x = normal();
        v = 1.0 + c * x;
      } while (v <= 0.0);
      v = v * v * v;
      const double u = uniform();
      if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
      if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
    }
  }
  // Fisher-Yates shuffle of any random-access range.
  template <class It>
  void shuffle(It first, It last) {
    const auto n = static_cast<std::uint64_t>(last - first);
    for (std::uint64_t i = n; i > 1; --i) {
      const std::uint64_t j = below(i);
      using std::swap;
      swap(first[i - 1], first[j]);
    }
  }
  // A new independent stream derived from this one (for per-layer or per-thread use).
  Rng split() { return Rng(next_u64()); }

 private:
  std::uint64_t state_;
};

}  // namespace hearsay
