// Stop signals: copies of one request that arrive together (a terminal's Ctrl-C reaches the
// process and its group; `timeout` forwards) are one request; a later one is a second.
#include <catch2/catch.hpp>
#include <csignal>

#include "base/stop_signals.hpp"

using hearsay::StopRequests;
using hearsay::StopSignals;

TEST_CASE("stop requests: signals within a second of the first are the same request", "[signals]") {
  StopRequests requests;
  const std::int64_t t0 = 5'000'000'000;
  CHECK(requests.on_signal(t0) == StopRequests::Meaning::first);
  CHECK(requests.on_signal(t0) == StopRequests::Meaning::same_request);
  CHECK(requests.on_signal(t0 + 999'999'999) == StopRequests::Meaning::same_request);
  CHECK(requests.on_signal(t0 + 1'000'000'000) == StopRequests::Meaning::again);
  CHECK(requests.on_signal(t0 + 1'500'000'000) == StopRequests::Meaning::again);
  requests.reset();
  CHECK(requests.on_signal(t0 + 9'000'000'000) == StopRequests::Meaning::first);
}

namespace {
volatile std::sig_atomic_t g_calls = 0;
extern "C" void stop_test_count_call(int) { g_calls = g_calls + 1; }
}  // namespace

TEST_CASE("stop signals: two signals raised back to back call the handler once", "[signals]") {
  g_calls = 0;
  {
    StopSignals signals(stop_test_count_call, /*second_ends_process=*/false);
    std::raise(SIGINT);
    std::raise(SIGTERM);  // SIGTERM and SIGINT are one kind of request
    std::raise(SIGINT);
    CHECK(g_calls == 1);
  }
  // A new StopSignals starts afresh.
  StopSignals again(stop_test_count_call, /*second_ends_process=*/false);
  std::raise(SIGINT);
  CHECK(g_calls == 2);
}
