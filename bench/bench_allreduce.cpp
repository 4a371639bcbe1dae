// Ring all-reduce throughput: n peers in one process, one thread each, summing a buffer
// of the LeNet size (129,068 floats) and of 10^7 floats, over the in-process fabric and
// over ZeroMQ tcp on 127.0.0.1 (insecure: the cost of the ring, not of CURVE).
//
// A round is timed from the moment every peer is ready (a barrier) to the moment the
// last peer holds the sum; the median of --rounds rounds is reported after one untimed
// warm-up round. Bandwidth follows nccl-tests: algorithm bandwidth = buffer bytes /
// time; bus bandwidth = algorithm bandwidth * 2(n-1)/n, the bytes each peer actually
// sends and receives per second. All peers share this machine's cores, so on a small
// machine the figures measure CPU (checksums, copies, reduction) as much as the link.
// Progress and a table go to stderr, one JSON line with every figure to stdout.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/log.hpp"
#include "bench/bench_util.hpp"
#include "gossip/mixing/algorithms/allreduce.hpp"
#include "gossip/network/transport/inproc_transport.hpp"
#include "gossip/network/transport/zmq_transport.hpp"

using namespace hearsay;
using namespace hearsay::bench;

namespace {

enum class Link { inproc, tcp };
const char* to_string(Link link) { return link == Link::inproc ? "inproc" : "tcp"; }

const wire::Expectation kExpect{"bench", "bench-model"};

std::vector<std::unique_ptr<transport::Transport>> make_transports(Link link, int n) {
  std::vector<std::unique_ptr<transport::Transport>> transports;
  auto fabric = transport::InprocFabric::create();
  for (int r = 0; r < n; ++r) {
    const std::string id = "peer" + std::to_string(r);
    if (link == Link::inproc) {
      transport::InprocOptions o;
      o.id = id;
      o.expect = kExpect;
      transports.push_back(std::make_unique<transport::InprocTransport>(fabric, o));
    } else {
      transport::ZmqOptions o;
      o.id = id;
      o.expect = kExpect;
      o.security.insecure = true;
      o.linger = std::chrono::milliseconds(0);
      transports.push_back(std::make_unique<transport::ZmqTransport>(o));
    }
  }
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b) transports[a]->connect(transports[b]->id(), transports[b]->address());
  return transports;
}

struct Result {
  double median_s = 0;
  double min_s = 0;
};

// Median and fastest seconds per round over `rounds` timed rounds.
Result time_ring(Link link, int n, std::size_t size, int rounds, std::size_t chunk_elements) {
  auto transports = make_transports(link, n);
  algorithms::AlgorithmOptions options;
  options.round_timeout = std::chrono::seconds(30);  // only a hang should reach it
  std::vector<std::unique_ptr<algorithms::RingAllReduce>> algorithms;
  for (int r = 0; r < n; ++r) {
    algorithms::PeerSet peers;
    for (const auto& t : transports) peers.ids.push_back(t->id());
    peers.self = r;
    algorithms.push_back(
        std::make_unique<algorithms::RingAllReduce>(*transports[r], peers, options, chunk_elements));
  }
  // The completion step runs once all peers arrived and before any is released: the
  // common start of the round.
  Clock::time_point round_start;
  std::barrier ready(n, [&]() noexcept { round_start = Clock::now(); });
  std::vector<std::vector<Clock::time_point>> finished(n, std::vector<Clock::time_point>(rounds + 1));
  std::vector<Clock::time_point> starts(rounds + 1);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      std::vector<float> buffer(size);
      for (std::size_t i = 0; i < size; ++i) buffer[i] = static_cast<float>((i + r) % 7);
      for (int round = 0; round <= rounds; ++round) {
        ready.arrive_and_wait();
        if (r == 0) starts[round] = round_start;
        try {
          if (!errors[r]) algorithms[r]->sum(buffer, static_cast<std::uint64_t>(round));
        } catch (...) {
          errors[r] = std::current_exception();
        }
        finished[r][round] = Clock::now();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  std::vector<double> seconds;
  for (int round = 1; round <= rounds; ++round) {  // round 0 warms up connections and pages
    Clock::time_point last = starts[round];
    for (int r = 0; r < n; ++r) last = std::max(last, finished[r][round]);
    seconds.push_back(std::chrono::duration<double>(last - starts[round]).count());
  }
  return {median(seconds), *std::min_element(seconds.begin(), seconds.end())};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hearsay ring all-reduce benchmark (one JSON line on stdout)"};
  int rounds = 5;
  std::vector<int> peer_counts{4, 8};
  std::vector<std::size_t> sizes{129'068, 10'000'000};
  std::vector<std::string> links{"inproc", "tcp"};
  std::size_t chunk_elements = algorithms::RingAllReduce::kDefaultChunkElements;
  app.add_option("--rounds", rounds, "timed rounds per case (the median is reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--peers", peer_counts, "ring sizes")->check(CLI::Range(2, 64));
  app.add_option("--sizes", sizes, "buffer sizes in floats")->check(CLI::PositiveNumber);
  app.add_option("--links", links, "inproc and/or tcp")->check(CLI::IsMember({"inproc", "tcp"}));
  app.add_option("--chunk", chunk_elements, "largest chunk in floats")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  logging::set_level(logging::Level::error);  // no insecure-mode warnings in the output

  nlohmann::json out;
  std::fprintf(stderr, "%-7s %5s %10s %10s %10s %14s %12s\n", "link", "peers", "floats", "median_ms",
               "min_ms", "algbw_GB/s", "busbw_GB/s");
  for (const std::string& link_name : links) {
    const Link link = link_name == "inproc" ? Link::inproc : Link::tcp;
    for (const int n : peer_counts) {
      for (const std::size_t size : sizes) {
        const Result t = time_ring(link, n, size, rounds, chunk_elements);
        const double bytes = static_cast<double>(size * sizeof(float));
        const double algbw = bytes / t.median_s / 1e9;
        const double busbw = algbw * 2.0 * (n - 1) / n;
        std::fprintf(stderr, "%-7s %5d %10zu %10.2f %10.2f %14.3f %12.3f\n", to_string(link), n, size,
                     t.median_s * 1e3, t.min_s * 1e3, algbw, busbw);
        nlohmann::json r;
        r["link"] = to_string(link);
        r["peers"] = n;
        r["floats"] = size;
        r["median_s"] = t.median_s;
        r["min_s"] = t.min_s;
        r["algbw_gbps"] = algbw;
        r["busbw_gbps"] = busbw;
        out["cases"].push_back(r);
      }
    }
  }
  out["rounds"] = rounds;
  out["chunk_elements"] = chunk_elements;
  out["hardware_threads"] = std::thread::hardware_concurrency();
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
