// Throughput of the payload dtype conversions (f16, bf16, int8 and the finiteness
// checks) in GB/s of memory traffic (bytes read + bytes written), median of several
// runs, for the dispatched kernels and the portable ones side by side.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/rng.hpp"
#include "bench/bench_util.hpp"
#include "kernels/cpu/convert.hpp"

using namespace hearsay;
using namespace hearsay::bench;

namespace {

// Keeps the compiler from dropping a call whose result is otherwise unused.
volatile bool g_sink;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hearsay payload conversion benchmark (GB/s = bytes read + written per second)"};
  std::size_t n = 10'000'000;
  int repeats = 9;
  bool json = false;
  app.add_option("--n", n, "elements per conversion")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--repeats", repeats, "timed runs (the median is reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--json", json, "print one JSON object instead of the table");
  CLI11_PARSE(app, argc, argv);

  constexpr std::size_t kChunk = 256;  // the wire's int8 chunk
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
  Rng rng(1);
  std::vector<float> x(n), y(n), scales(chunks);
  for (auto& v : x) v = static_cast<float>(rng.normal() * 0.05);
  std::vector<std::uint16_t> half(n);
  std::vector<std::int8_t> q(n);
  cpu::f32_to_f16(n, x.data(), half.data());  // valid codes for the decode and check timings
  cpu::f32_to_int8(n, kChunk, x.data(), q.data(), scales.data());

  struct Case {
    const char* name;
    double bytes;
    std::function<void()> fast, portable;
  };
  const double f32_bytes = 4.0 * static_cast<double>(n), f16_bytes = 2.0 * static_cast<double>(n);
  const double int8_bytes = static_cast<double>(n) + 4.0 * static_cast<double>(chunks);
  const std::vector<Case> cases{
      {"f32_to_f16", f32_bytes + f16_bytes, [&] { cpu::f32_to_f16(n, x.data(), half.data()); },
       [&] { cpu::portable::f32_to_f16(n, x.data(), half.data()); }},
      {"f16_to_f32", f16_bytes + f32_bytes, [&] { cpu::f16_to_f32(n, half.data(), y.data()); },
       [&] { cpu::portable::f16_to_f32(n, half.data(), y.data()); }},
      {"f16_all_finite", f16_bytes, [&] { g_sink = cpu::f16_all_finite(n, half.data()); },
       [&] { g_sink = cpu::portable::f16_all_finite(n, half.data()); }},
      {"f32_to_bf16", f32_bytes + f16_bytes, [&] { cpu::f32_to_bf16(n, x.data(), half.data()); },
       [&] { cpu::portable::f32_to_bf16(n, x.data(), half.data()); }},
      {"bf16_to_f32", f16_bytes + f32_bytes, [&] { cpu::bf16_to_f32(n, half.data(), y.data()); },
       [&] { cpu::portable::bf16_to_f32(n, half.data(), y.data()); }},
      {"bf16_all_finite", f16_bytes, [&] { g_sink = cpu::bf16_all_finite(n, half.data()); },
       [&] { g_sink = cpu::portable::bf16_all_finite(n, half.data()); }},
      {"f32_to_int8", f32_bytes + int8_bytes,
       [&] { cpu::f32_to_int8(n, kChunk, x.data(), q.data(), scales.data()); },
       [&] { cpu::portable::f32_to_int8(n, kChunk, x.data(), q.data(), scales.data()); }},
      {"int8_to_f32", int8_bytes + f32_bytes,
       [&] { cpu::int8_to_f32(n, kChunk, q.data(), scales.data(), y.data()); },
       [&] { cpu::portable::int8_to_f32(n, kChunk, q.data(), scales.data(), y.data()); }},
  };

  nlohmann::json out{{"n", n}, {"repeats", repeats}, {"implementation", cpu::convert_implementation()}};
  if (!json)
    std::printf(
        "payload conversions, n = %zu, median of %d runs, dispatched implementation: %s\n"
        "%-16s %14s %14s\n",
        n, repeats, cpu::convert_implementation(), "conversion", "dispatched GB/s", "portable GB/s");
  // What "memory speed" means on this machine: a plain copy of the f32 buffer.
  const double copy =
      2 * f32_bytes / median_seconds(repeats, [&] { std::memcpy(y.data(), x.data(), 4 * n); }) / 1e9;
  out["gb_per_s"]["memcpy_f32"] = copy;
  if (!json) std::printf("%-16s %14.1f %14s\n", "memcpy (f32)", copy, "");
  for (const Case& c : cases) {
    const double fast = c.bytes / median_seconds(repeats, c.fast) / 1e9;
    const double portable = c.bytes / median_seconds(repeats, c.portable) / 1e9;
    out["gb_per_s"][c.name] = {{"dispatched", fast}, {"portable", portable}};
    if (!json) std::printf("%-16s %14.1f %14.1f\n", c.name, fast, portable);
    std::fflush(stdout);
  }
  if (json) std::printf("%s\n", out.dump().c_str());
  return 0;
}
