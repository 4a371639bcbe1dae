// SIGINT and SIGTERM handled by `handler` for as long as the object lives, then the
// previous handlers back: how `hearsay peer` and `hearsay sim` learn they should stop.
#pragma once
#include <csignal>

namespace hearsay {

class StopSignals {
 public:
  // one_shot: the handler runs once (SA_RESETHAND), so a second Ctrl-C ends the process
  // at once when the first one seems to hang.
  StopSignals(void (*handler)(int), bool one_shot) {
    struct sigaction sa = {};
    sa.sa_handler = handler;
    sa.sa_flags = one_shot ? SA_RESETHAND : 0;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ = {}, old_term_ = {};
};

}  // namespace hearsay
