// Ring all-reduce: exact sums for 1..16 peers at sizes 0, 1, 7, 1000 and 10^6 over the
// in-process fabric (one thread per peer), any chunk size, consecutive rounds and the
// exchange log, the average, compressed chunks, refused chunks, and failures: a killed
// peer at every ring position is named by every survivor within twice the round
// deadline, and a peer that stops taking part is reported. Then exact sums over ZeroMQ.
//
// Inputs are integer-valued floats of magnitude at most 1000, so every partial sum of up
// to 16 of them is an integer far below 2^24: exact in f32 in any summation order, and
// the expected sums can be compared bit for bit.
#include "allreduce_test_util.hpp"
#include "gossip/mixing/algorithms/mixer.hpp"

using namespace allreduce_test;

TEST_CASE("ring all-reduce sums exactly for 1 to 16 peers at sizes 0, 1, 7, 1000 and 10^6", "[allreduce]") {
  for (std::size_t size :
       {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{1'000'000}}) {
    for (int n = 1; n <= 16; ++n) {
      INFO(n << " peers, " << size << " elements");
      Ring ring = make_ring(n);
      std::vector<std::vector<float>> buffers(static_cast<std::size_t>(n));
      require_no_errors(on_every_peer(n, [&](int r) {
        auto& buffer = buffers[static_cast<std::size_t>(r)];
        buffer = input(r, size, 0);
        ring.algorithms[static_cast<std::size_t>(r)]->sum(buffer, 0);
      }));
      const auto want = expected_sum(n, size, 0);
      for (int r = 0; r < n; ++r) {
        INFO("peer " << r);
        require_equal(want, buffers[static_cast<std::size_t>(r)]);
      }
    }
  }
}

TEST_CASE("any chunk size over consecutive rounds, with one exchange record per round", "[allreduce]") {
  constexpr std::uint64_t kRounds = 3;
  for (std::size_t chunk :
       {std::size_t{1}, std::size_t{3}, std::size_t{64}, RingAllReduce::kDefaultChunkElements}) {
    for (int n : {2, 3, 5, 8}) {
      for (std::size_t size : {std::size_t{7}, std::size_t{1000}}) {
        INFO(n << " peers, " << size << " elements, chunks of " << chunk);
        Ring ring = make_ring(n, {}, chunk);
        std::vector<std::vector<std::vector<float>>> results(static_cast<std::size_t>(n));
        require_no_errors(on_every_peer(n, [&](int r) {
          for (std::uint64_t round = 0; round < kRounds; ++round) {
            auto buffer = input(r, size, round);
            ring.algorithms[static_cast<std::size_t>(r)]->sum(buffer, round);
            results[static_cast<std::size_t>(r)].push_back(std::move(buffer));
          }
        }));
        for (std::uint64_t round = 0; round < kRounds; ++round) {
          const auto want = expected_sum(n, size, round);
          for (int r = 0; r < n; ++r) {
            INFO("peer " << r << ", round " << round);
            require_equal(want, results[static_cast<std::size_t>(r)][round]);
          }
        }
        for (int r = 0; r < n; ++r) {
          INFO("peer " << r);
          const auto records = ring.algorithms[static_cast<std::size_t>(r)]->exchanges().drain();
          REQUIRE(records.size() == kRounds);
          // Each peer sends every segment but r+1 (reduce-scatter) and every segment but
          // r+2 (all-gather), and receives every segment but r and then every but r+1.
          const std::uint64_t sent =
              4 * (2 * size - segment_length(size, n, r + 1) - segment_length(size, n, r + 2));
          const std::uint64_t received =
              4 * (2 * size - segment_length(size, n, r) - segment_length(size, n, r + 1));
          for (std::uint64_t round = 0; round < kRounds; ++round) {
            const ExchangeRecord& record = records[round];
            CHECK(record.round == round);
            CHECK(record.partner == peer_id((r + 1) % n));
            CHECK(record.outcome == ExchangeRecord::Outcome::ok);
            CHECK(record.bytes_sent == sent);
            CHECK(record.bytes_received == received);
            // Measured, not left at its default of 0, and not from a start never set (an
            // uninitialised time point would give decades).
            CHECK(record.latency_s > 0);
            CHECK(record.latency_s < 60);
            CHECK(record.distance == -1);
          }
        }
      }
    }
  }
}

TEST_CASE("mix leaves the average on every peer, the same bits everywhere", "[allreduce]") {
  const std::size_t size = 1001;
  for (int n : {1, 2, 3, 6, 16}) {
    INFO(n << " peers");
    Ring ring = make_ring(n, {}, 100);
    std::vector<std::vector<float>> buffers(static_cast<std::size_t>(n));
    std::vector<algorithms::RoundResult> results(static_cast<std::size_t>(n));
    require_no_errors(on_every_peer(n, [&](int r) {
      auto& buffer = buffers[static_cast<std::size_t>(r)];
      buffer = input(r, size, 4);
      results[static_cast<std::size_t>(r)] = ring.algorithms[static_cast<std::size_t>(r)]->mix(buffer, 4);
    }));
    // The exact sum divided once, correctly rounded, is what every peer must hold.
    auto want = expected_sum(n, size, 4);
    for (float& x : want) x /= static_cast<float>(n);
    for (int r = 0; r < n; ++r) {
      INFO("peer " << r);
      require_equal(want, buffers[static_cast<std::size_t>(r)]);
      CHECK(results[static_cast<std::size_t>(r)].exchanged == n - 1);
    }
  }
}

TEST_CASE("shard shares weigh each peer's steps: all-reduce leaves the average over examples",
          "[allreduce]") {
  // Shards of 1, 2 and 3 parts of a training set of 6: shares (shard x world / set) of
  // 0.5, 1 and 1.5. The Mixer scales each peer's local step by its share before the round
  // (mixer.hpp), so the plain average is x0 + sum(share_r step_r) / n: every example weighs
  // alike. Integers times halves stay exact in any order of the sum.
  const std::size_t size = 1001;
  const std::vector<double> shares{0.5, 1.0, 1.5};
  const int n = 3;
  Ring ring = make_ring(n, {}, 100);
  std::vector<std::unique_ptr<algorithms::Mixer>> mixers;
  for (int r = 0; r < n; ++r) {
    AlgorithmOptions weighted;
    weighted.shard_share = shares[static_cast<std::size_t>(r)];
    mixers.push_back(std::make_unique<algorithms::Mixer>(
        std::make_unique<RingAllReduce>(*ring.transports[static_cast<std::size_t>(r)], peer_set(n, r),
                                        weighted, 100),
        size));
  }
  const auto start = input(0, size, 1);  // every peer starts from the same model
  std::vector<std::vector<float>> buffers(static_cast<std::size_t>(n));
  require_no_errors(on_every_peer(n, [&](int r) {
    auto& buffer = buffers[static_cast<std::size_t>(r)];
    buffer = start;
    mixers[static_cast<std::size_t>(r)]->flush(buffer);  // the mixer starts from here
    const auto step = input(r, size, 2);
    for (std::size_t i = 0; i < size; ++i) buffer[i] += step[i];  // the peer's local step
    mixers[static_cast<std::size_t>(r)]->after_step(buffer, 1);
  }));
  std::vector<float> want(size, 0.0f);
  for (int r = 0; r < n; ++r) {
    const auto step = input(r, size, 2);
    for (std::size_t i = 0; i < size; ++i)
      want[i] += start[i] + static_cast<float>(shares[static_cast<std::size_t>(r)]) * step[i];
  }
  for (float& x : want) x /= static_cast<float>(n);
  for (int r = 0; r < n; ++r) {
    INFO("peer " << r);
    require_equal(want, buffers[static_cast<std::size_t>(r)]);
  }
}

TEST_CASE("compressed chunks: f16 sums small integers exactly, int8 stays within its rounding",
          "[allreduce]") {
  SECTION("f16: partial sums of 8 integers in [-64, 64] are integers below 2048, exact in f16") {
    const int n = 8;
    const std::size_t size = 1000;
    AlgorithmOptions options;
    options.compress = wire::Dtype::f16;
    Ring ring = make_ring(n, options, 50);
    auto small = [](int r, std::size_t i) {
      return static_cast<float>(static_cast<int>((i * 31 + r * 7) % 129) - 64);
    };
    std::vector<std::vector<float>> buffers(n);
    require_no_errors(on_every_peer(n, [&](int r) {
      auto& buffer = buffers[static_cast<std::size_t>(r)];
      buffer.resize(size);
      for (std::size_t i = 0; i < size; ++i) buffer[i] = small(r, i);
      ring.algorithms[static_cast<std::size_t>(r)]->sum(buffer, 0);
    }));
    std::vector<float> want(size, 0.0f);
    for (std::size_t i = 0; i < size; ++i)
      for (int r = 0; r < n; ++r) want[i] += small(r, i);
    for (int r = 0; r < n; ++r) require_equal(want, buffers[static_cast<std::size_t>(r)]);
    // Two bytes per element on the wire (see the byte counts of the f32 test above).
    CHECK(ring.algorithms[0]->exchanges().totals().bytes_sent ==
          2 * (2 * size - segment_length(size, n, 1) - segment_length(size, n, 2)));
  }
  SECTION("int8: not exact, but identical on every peer and within n roundings of scale/2") {
    const int n = 4;
    const std::size_t size = 5000;
    AlgorithmOptions options;
    options.compress = wire::Dtype::int8;
    Ring ring = make_ring(n, options, 1024);
    std::vector<std::vector<float>> inputs(n), buffers(n);
    Rng rng(11);
    for (auto& v : inputs) {
      v.resize(size);
      for (float& x : v) x = static_cast<float>(2 * rng.uniform() - 1);
    }
    require_no_errors(on_every_peer(n, [&](int r) {
      buffers[static_cast<std::size_t>(r)] = inputs[static_cast<std::size_t>(r)];
      ring.algorithms[static_cast<std::size_t>(r)]->sum(buffers[static_cast<std::size_t>(r)], 0);
    }));
    for (int r = 1; r < n; ++r) require_equal(buffers[0], buffers[static_cast<std::size_t>(r)]);
    // Each element is rounded n times: at each of the n-1 reduce-scatter sends and once
    // more when the owner keeps what it sends in the all-gather. A rounding moves it by
    // at most scale/2 = max|chunk|/254, and every partial sum of n values in [-1, 1]
    // is at most n in magnitude: at most n * n / 254 in all, plus float slack.
    const double bound = n * n / 254.0 + 1e-5;
    double worst = 0;
    for (std::size_t i = 0; i < size; ++i) {
      double exact = 0;
      for (int r = 0; r < n; ++r) exact += inputs[static_cast<std::size_t>(r)][i];
      worst = std::max(worst, std::abs(exact - buffers[0][i]));
    }
    INFO("largest error " << worst << ", bound " << bound);
    CHECK(worst <= bound);
    CHECK(worst > 0);  // the compression did happen
  }
}

TEST_CASE("a chunk outside the elements it must fill is refused, naming its sender", "[allreduce]") {
  // Two peers and 10 elements: p0 first receives segment 1 = [5, 10) from p1.
  Ring ring = make_ring(2);
  auto chunk_frames = [](std::uint64_t step, std::uint64_t offset, std::size_t count) {
    std::vector<float> values(count, 100.0f);
    wire::Header h = transport::testing::valid_header("p1", wire::MessageType::allreduce_chunk);
    h.step = step;
    h.offset = offset;
    h.dtype = wire::Dtype::f32;
    h.count = count;
    const auto payload = transport::testing::bytes_of(values);
    h.checksum = wire::checksum(payload);
    return std::vector<std::vector<std::uint8_t>>{wire::encode_header(h), payload};
  };
  std::vector<float> buffer(10, 1.0f);
  SECTION("running past the segment and the buffer") {
    ring.fabric->inject("p0", "p1", chunk_frames(0, 5, 8));
    REQUIRE_THROWS_WITH(
        ring.algorithms[0]->sum(buffer, 0),
        Catch::Contains("peer p1 sent elements [5, 13)") && Catch::Contains("elements from 5 up to 10"));
  }
  SECTION("starting far outside the buffer") {
    ring.fabric->inject("p0", "p1", chunk_frames(0, 1'000'000'000, 2));
    REQUIRE_THROWS_WITH(ring.algorithms[0]->sum(buffer, 0),
                        Catch::Contains("peer p1 sent elements [1000000000, 1000000002)"));
  }
  CHECK(buffer == std::vector<float>(10, 1.0f));  // nothing was written
  const auto records = ring.algorithms[0]->exchanges().drain();
  REQUIRE(records.size() == 1);
  CHECK(records[0].outcome == ExchangeRecord::Outcome::failed);
  CHECK_THAT(records[0].detail, Catch::Contains("p1"));
}

TEST_CASE("stale chunks and chunks from other peers than the predecessor are ignored", "[allreduce]") {
  const int n = 3;
  const std::size_t size = 30;
  Ring ring = make_ring(n, {}, 4);
  std::vector<std::vector<float>> buffers(n);
  const auto run_round = [&](std::uint64_t round) {
    require_no_errors(on_every_peer(n, [&](int r) {
      buffers[static_cast<std::size_t>(r)] = input(r, size, round);
      ring.algorithms[static_cast<std::size_t>(r)]->sum(buffers[static_cast<std::size_t>(r)], round);
    }));
    for (int r = 0; r < n; ++r)
      require_equal(expected_sum(n, size, round), buffers[static_cast<std::size_t>(r)]);
  };
  run_round(0);
  // For p0 (predecessor p2): a chunk of round 0 from p2, and one of round 1, ring step 0,
  // at the right offset but from p1. Both carry values that would spoil the sum.
  auto frames = [](const std::string& sender, std::uint64_t step, std::uint64_t offset) {
    const std::vector<float> values(4, 5000.0f);
    wire::Header h = transport::testing::valid_header(sender, wire::MessageType::allreduce_chunk);
    h.step = step;
    h.offset = offset;
    h.dtype = wire::Dtype::f32;
    h.count = values.size();
    const auto payload = transport::testing::bytes_of(values);
    h.checksum = wire::checksum(payload);
    return std::vector<std::vector<std::uint8_t>>{wire::encode_header(h), payload};
  };
  ring.fabric->inject("p0", "p2", frames("p2", 0, 20));
  ring.fabric->inject("p0", "p1", frames("p1", 1 * 2 * n, 20));
  run_round(1);
  run_round(2);
}
