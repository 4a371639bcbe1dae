// Gossip with compressed differences (link_copies.hpp): the two ends of every link hold
// the same two copies to the bit, or one of them knows it must start the link over,
// whatever the links lose and reorder and whoever restarts.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>

#include "base/log.hpp"
#include "gossip/mixing/algorithms/gossip.hpp"
#include "gossip/mixing/algorithms/link_copies.hpp"
#include "graph_algorithm_test_util.hpp"

using namespace hearsay;
using namespace hearsay::algorithms;
using namespace hearsay::algorithms::testing;
using namespace std::chrono_literals;

namespace {

AlgorithmOptions gossip_options(const std::string& compressor) {
  AlgorithmOptions o;
  o.round_timeout = 200ms;
  o.compressor = compressor;
  o.seed = 3;
  return o;
}

template <class T>
std::vector<std::unique_ptr<Gossip>> make_gossip(std::vector<std::unique_ptr<T>>& transports,
                                                 const AlgorithmOptions& options) {
  const int n = static_cast<int>(transports.size());
  std::vector<std::unique_ptr<Gossip>> algs;
  for (int r = 0; r < n; ++r)
    algs.push_back(std::make_unique<Gossip>(*transports[r], peer_set(n, r), options));
  return algs;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

// Links whose ends hold the same version, and that the ends' copies agree for each:
// `why` names the first that does not (same version, other copies; or two versions, neither
// end forgetting it nor awaiting a reply on it).
struct LinkCheck {
  int agreeing = 0;
  std::string why;
};
LinkCheck check_links(const std::vector<std::unique_ptr<Gossip>>& algs) {
  LinkCheck c;
  const int n = static_cast<int>(algs.size());
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      const LinkCopies* a = algs[i]->links();
      const LinkCopies* b = algs[j]->links();
      if (a == nullptr || b == nullptr) continue;
      const std::string pi = peer_id(i), pj = peer_id(j);
      const std::uint64_t va = a->version(pj), vb = b->version(pi);
      const std::string link =
          pi + " - " + pj + " (versions " + std::to_string(va) + ", " + std::to_string(vb) + ")";
      if (va == vb && va != 0) {
        if (!same_bits(a->mine(pj), b->theirs(pi)) || !same_bits(a->theirs(pj), b->mine(pi))) {
          if (c.why.empty()) c.why = link + ": the same version, other copies";
        } else {
          ++c.agreeing;
        }
      } else if (va != vb && va != 0 && vb != 0 && !a->pending(pj) && !b->pending(pi)) {
        if (c.why.empty()) c.why = link + ": two versions, and neither end awaits a reply";
      }
    }
  return c;
}

// Every peer on a thread of its own, as `hearsay peer` runs: `rounds` rounds, each after a
// 5 ms of serving its partners (a training step's worth), and then serving until no
// request of any peer is out (at most 5 s).
void run_free(std::vector<std::unique_ptr<Gossip>>& algs, std::vector<std::vector<float>>& buffers,
              std::uint64_t first, int rounds) {
  const int n = static_cast<int>(algs.size());
  std::atomic<int> finished{0};
  const auto outstanding = [&] {
    std::size_t total = 0;
    for (const auto& a : algs) total += a->outstanding();
    return total;
  };
  std::vector<int> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(r);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  hearsay::testing::run_each(ranks, false, peer_id, [&](int r) {
    auto& alg = *algs[static_cast<std::size_t>(r)];
    auto& buffer = buffers[static_cast<std::size_t>(r)];
    try {
      for (int round = 0; round < rounds; ++round) {
        alg.serve(buffer, transport::Clock::now() + 5ms);
        alg.mix(buffer, first + static_cast<std::uint64_t>(round));
      }
    } catch (...) {
      errors[static_cast<std::size_t>(r)] = std::current_exception();
    }
    ++finished;
    const auto give_up_at = transport::Clock::now() + 5s;
    try {
      while ((finished < n || outstanding() > 0) && transport::Clock::now() < give_up_at)
        alg.serve(buffer, transport::Clock::now() + 5ms);
    } catch (...) {
      if (!errors[static_cast<std::size_t>(r)])
        errors[static_cast<std::size_t>(r)] = std::current_exception();
    }
  });
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

TEST_CASE("gossip --compress: link copies stay bit-identical over 1,000 rounds of 20% loss and reordering",
          "[pairwise][choco][slow]") {
  logging::CapturedLines quiet(logging::Level::off);
  constexpr int n = 5;
  auto transports = emulated_network(n, "unlimited,0s,loss=0.2,reorder=0.2", 300);
  const auto options = gossip_options("topk:5%");
  auto algs = make_gossip(transports, options);
  auto buffers = random_buffers(n, 200, 9);
  const double e0 = consensus_error(buffers);
  run_free(algs, buffers, 0, 1000);
  std::uint64_t restarted = 0, applied = 0, expired = 0, refused = 0, busy = 0, late = 0;
  for (const auto& a : algs) {
    restarted += a->counters().links_restarted;
    expired += a->counters().expired;
    applied += a->counters().applied;
    refused += a->counters().refused_payload;
    busy += a->counters().answered_busy;
    late += a->counters().dropped_late;
  }
  INFO(applied << " exchanges applied, " << restarted << " links started over, " << expired
               << " requests given up, " << refused << " payloads refused, " << busy << " answered busy, "
               << late << " replies dropped late");
  restarted += expired;
  CHECK(restarted > 20);  // the fault fired: links went into doubt and started over
  CHECK(applied > 100);   // and the peers did exchange
  LinkCheck lossy = check_links(algs);
  INFO(lossy.why);
  CHECK(lossy.why.empty());
  // Most links end forgotten by one end (a lost message of their last exchange, and the
  // neighbours stop before the next): those start over whole when they next meet.
  CHECK(lossy.agreeing >= 1);

  // p2 restarts: its links are gone, its partners' links to it are stale. Healthy links
  // again: every link either agrees or is known to be stale, and the peers come together.
  algs[2] = std::make_unique<Gossip>(*transports[2], peer_set(n, 2), options);
  heal_links(transports);
  run_free(algs, buffers, 1000, 200);
  const LinkCheck healed = check_links(algs);
  INFO(healed.why);
  CHECK(healed.why.empty());
  CHECK(healed.agreeing >= 5);
  REQUIRE(algs[2]->links() != nullptr);
  CHECK(algs[2]->links()->links() >= 2);  // it met its partners again, whole
  const double e = consensus_error(buffers);
  INFO("consensus error " << e0 << " -> " << e);
  CHECK(e < 0.1 * e0);
}

TEST_CASE("link copies: a request on a stale link is answered with the version held, and starts over whole",
          "[pairwise][choco]") {
  // Two ends driven by hand, with messages built from their outgoing payloads.
  constexpr std::size_t size = 64;
  LinkCopies a("sign", size, {}), b("sign", size, {});
  std::vector<float> xa(size), xb(size);
  for (std::size_t i = 0; i < size; ++i) {
    xa[i] = static_cast<float>(i) * 0.1f;
    xb[i] = 1.0f - static_cast<float>(i) * 0.05f;
  }
  const auto message = [](wire::MessageType type, const LinkCopies::Outgoing& out) {
    wire::Header h;
    h.type = type;
    h.sender = "x";
    h.dtype = out.payload.dtype();
    h.count = out.payload.count();
    h.base = out.base;
    auto owner = out.payload.owner();
    return transport::Message(h, out.payload.bytes(), owner);
  };
  const auto exchange = [&] {
    const auto request = a.request("b", xa, 1);
    const auto answer = b.answer("a", message(wire::MessageType::params_push, request), xb, 2);
    REQUIRE(answer.reply);
    b.commit_answer("a");
    REQUIRE_FALSE(a.take_reply("b", message(wire::MessageType::params_reply, *answer.reply), request.base));
  };
  exchange();  // whole: both at version 1
  CHECK(a.version("b") == 1);
  CHECK(b.version("a") == 1);
  CHECK(same_bits(a.mine("b"), b.theirs("a")));
  CHECK(same_bits(a.theirs("b"), b.mine("a")));
  exchange();  // compressed: version 2, still the same copies
  CHECK(a.version("b") == 2);
  CHECK(same_bits(a.mine("b"), b.theirs("a")));
  CHECK(same_bits(a.theirs("b"), b.mine("a")));
  // Each end moves by the same difference, with opposite signs.
  std::vector<float> ma = xa, mb = xb;
  const double da = a.mix("b", ma, 0.25), db = b.mix("a", mb, 0.25);
  CHECK(da == db);
  for (std::size_t i = 0; i < size; ++i)
    CHECK(static_cast<double>(ma[i]) - xa[i] == Approx(-(static_cast<double>(mb[i]) - xb[i])).margin(1e-6));

  // b loses its link (a restart): a's next request applies to version 2, which b no longer holds.
  b.forget("a");
  const auto request = a.request("b", xa, 3);
  CHECK(request.base == 2);
  const auto answer = b.answer("a", message(wire::MessageType::params_push, request), xb, 4);
  CHECK_FALSE(answer.reply);
  CHECK_FALSE(answer.refused);
  CHECK(answer.version == 0);
  a.forget("b");  // as the exchange does on an empty reply with another base
  exchange();     // whole again
  CHECK(a.version("b") == 1);
  CHECK(same_bits(a.mine("b"), b.theirs("a")));

  // A payload that does not decode changes nothing and says why.
  const auto good = a.request("b", xa, 5);
  std::vector<std::uint8_t> bad(good.payload.bytes().begin(), good.payload.bytes().end());
  bad[0] ^= 0xFF;  // the compressor's id byte
  const LinkCopies::Outgoing garbled{transport::Payload::encoded(wire::Dtype::compressed, size, bad),
                                     good.base};
  const std::vector<float> before(b.theirs("a").begin(), b.theirs("a").end());
  const auto refused = b.answer("a", message(wire::MessageType::params_push, garbled), xb, 6);
  CHECK(refused.refused);
  CHECK_FALSE(refused.reply);
  CHECK(same_bits(b.theirs("a"), before));
}

TEST_CASE("gossip --compress: a partner that sends values is told apart, and nobody fails",
          "[pairwise][choco]") {
  // A peer started without --compress among peers with one: its partners' compressed
  // requests and replies are refused (and say why), its own whole requests are taken as
  // a link's start; no exception reaches either training loop.
  logging::CapturedLines quiet(logging::Level::off);
  constexpr int n = 3;
  Network net = make_network(n);
  auto algs = make_gossip(net.transports, gossip_options("sign"));
  auto plain = gossip_options("");
  algs[1] = std::make_unique<Gossip>(*net.transports[1], peer_set(n, 1), plain);
  auto buffers = random_buffers(n, 300, 4);
  REQUIRE_NOTHROW(run_free(algs, buffers, 0, 200));
  INFO(algs[1]->counters().refused_payload << " compressed payloads refused by the peer that sends values");
  CHECK(algs[1]->counters().refused_payload > 0);
  for (const auto& b : buffers)
    for (const float v : b) REQUIRE(std::isfinite(v));
}

TEST_CASE("gossip does not wait out a round for replies that miss the wait but come within the step",
          "[gossip][link-emulation]") {
  // Every link delays each message 20 ms, so a round trip takes 40 ms; a round may wait at
  // most half its 60 ms of compute (30 ms). Rounds that waited the 30 ms out for a reply
  // that came 10 ms later made compressed gossip over slow links take 1.5x as long. Over
  // 50 ms links (100 ms round trips, longer than a step) the wait is kept: it stretches the
  // step so that the next round finds the exchange settled and starts another.
  logging::CapturedLines quiet(logging::Level::off);
  const std::string compressor = GENERATE(std::string(), std::string("topk:10%"));
  const bool within_step = GENERATE(true, false);
  INFO("--compress " << (compressor.empty() ? "f32" : compressor) << ", round trips of "
                     << (within_step ? "40" : "100") << " ms");
  hearsay::testing::in_virtual_time([&] {
    auto transports = emulated_network(2, within_step ? "unlimited,20ms" : "unlimited,50ms", 5);
    auto algs = make_gossip(transports, gossip_options(compressor));
    algs[0]->set_compute_per_round(60ms);
    std::vector<std::vector<float>> buffers{std::vector<float>(500, 1.0f), std::vector<float>(500, 3.0f)};
    bool done = false;
    fiber::Worker partner("p1", [&] {
      while (!done) algs[1]->serve(buffers[1], Clock::now() + 5ms);
    });
    std::vector<Clock::duration> waited;
    for (std::uint64_t round = 0; round < 30; ++round) {
      const auto start = Clock::now();
      algs[0]->mix(buffers[0], round);
      waited.push_back(Clock::now() - start);
      algs[0]->serve(buffers[0], Clock::now() + 60ms);  // the next step's compute
    }
    done = true;
    partner.join();
    // The first rounds wait (nothing is known of the partner); from the fifth round trip
    // on, none does where the replies come within the step, and every reply is applied,
    // during the next step.
    int waiting = 0;
    for (std::size_t r = 10; r < waited.size(); ++r) waiting += waited[r] > Clock::duration::zero();
    CHECK(waited[0] > Clock::duration::zero());
    if (within_step) {
      CHECK(waiting == 0);
      CHECK(algs[0]->counters().applied >= 28);
    } else {
      CHECK(waiting >= 5);  // the rounds that start an exchange
    }
    CHECK(std::abs(buffers[0][0] - buffers[1][0]) < 0.5f);
  });
}
