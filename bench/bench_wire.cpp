// Wire-format costs per message: header encode + decode (median ns per message over many
// repeats; the target is <= 2 us so headers never matter next to payloads), the full
// receive check of a small payload message, and the payload checksum's throughput
// (XXH3-64 over 100 MB). Prints one JSON line.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/bench_util.hpp"
#include "gossip/network/wire/header.hpp"
#include "gossip/network/wire/payload.hpp"

using namespace hearsay::wire;
using namespace hearsay::bench;

namespace {

// Median over `repeats` of the mean ns per call of f() over `calls` calls.
template <class F>
double median_ns(int repeats, int calls, F&& f) {
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) f(i);
    samples.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / calls);
  }
  return median(samples);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hearsay wire-format benchmark (one JSON line on stdout)"};
  int repeats = 21, calls = 20000;
  double checksum_mb = 100.0;
  app.add_option("--repeats", repeats, "timed repeats (the median is reported)")->check(CLI::PositiveNumber);
  app.add_option("--calls", calls, "messages per timed repeat")->check(CLI::PositiveNumber);
  app.add_option("--checksum-mb", checksum_mb, "bytes hashed per checksum repeat, in MB")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  Header h;
  h.run_id = "run-2024-05-01";
  h.fingerprint = "lenet-129068-49e7819947dd1a80";
  h.sender = "peer-17";
  h.type = MessageType::params_push;
  h.step = 123456;
  h.dtype = Dtype::f32;
  h.count = 129068;
  h.checksum = 0x1234567890abcdefull;
  h.nonce = 77;
  const std::size_t header_bytes = encode_header(h).size();

  std::uint64_t sink = 0;  // keeps the optimiser from dropping the work
  const double encode_ns = median_ns(repeats, calls, [&](int i) {
    h.step = static_cast<std::uint64_t>(i);
    sink += encode_header(h).size();
  });
  const auto frame = encode_header(h);
  const double decode_ns = median_ns(repeats, calls, [&](int) { sink += decode_header(frame).header->step; });
  const double round_trip_ns = median_ns(repeats, calls, [&](int i) {
    h.step = static_cast<std::uint64_t>(i);
    sink += decode_header(encode_header(h)).header->step;
  });

  // Receive checks of a 256-element f32 message (an all-reduce chunk's scale).
  std::vector<float> small(256, 0.5f);
  std::vector<std::uint8_t> small_payload(small.size() * 4);
  encode_values(Dtype::f32, small, small_payload);
  Header small_h = h;
  small_h.count = small.size();
  small_h.checksum = checksum(small_payload);
  const auto small_frame = encode_header(small_h);
  const Expectation expect{h.run_id, h.fingerprint};
  const double receive_ns = median_ns(repeats, calls / 4, [&](int) {
    const auto d = decode_header(small_frame);
    if (!validate(*d.header, expect, small_payload, true) &&
        !check_values(d.header->dtype, d.header->count, small_payload)) {
      decode_values(d.header->dtype, small_payload, small);
      ++sink;
    }
  });

  std::vector<std::uint8_t> big(static_cast<std::size_t>(checksum_mb * 1e6));
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::uint8_t>(i * 2654435761u >> 24);
  std::vector<double> checksum_s;
  for (int r = 0; r < std::min(repeats, 11); ++r) {
    const auto t0 = Clock::now();
    sink += checksum(big);
    checksum_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double checksum_gbps = static_cast<double>(big.size()) / median(checksum_s) / 1e9;

  nlohmann::json out = {
      {"bench", "wire"},
      {"header_bytes", header_bytes},
      {"encode_ns", encode_ns},
      {"decode_ns", decode_ns},
      {"encode_decode_ns", round_trip_ns},
      {"encode_decode_target_ns", 2000},
      {"receive_256_f32_ns", receive_ns},
      {"checksum_bytes", big.size()},
      {"checksum_gb_per_s", checksum_gbps},
      {"ignore", sink % 2},
  };
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
