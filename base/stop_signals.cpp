#include "base/stop_signals.hpp"

#include <ctime>

namespace hearsay {
namespace {

StopRequests g_requests;
void (*g_on_stop)(int) = nullptr;
bool g_second_ends_process = false;

extern "C" void hearsay_dispatch_stop_signal(int sig) {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe
  const std::int64_t ns = std::int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
  switch (g_requests.on_signal(ns)) {
    case StopRequests::Meaning::first:
      if (g_on_stop) g_on_stop(sig);
      break;
    case StopRequests::Meaning::same_request:
      break;
    case StopRequests::Meaning::again:
      if (g_on_stop) g_on_stop(sig);
      if (g_second_ends_process) {
        signal(sig, SIG_DFL);
        raise(sig);
      }
      break;
  }
}

}  // namespace

StopSignals::StopSignals(void (*on_stop)(int), bool second_ends_process) {
  g_requests.reset();
  g_on_stop = on_stop;
  g_second_ends_process = second_ends_process;
  struct sigaction sa = {};
  sa.sa_handler = hearsay_dispatch_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

}  // namespace hearsay
