// What a peer throws that run_peer (peer_command.cpp) tells apart from other failures.
#pragma once
#include <stdexcept>
#include <utility>

#include "model/divergence.hpp"

namespace hearsay {

// A failure to start that the user must fix (no answer from the seeds, a rank that
// never came): run_peer prints the message as it is.
class PeerStartError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The training diverged (model/divergence.hpp): run_peer says where and exits 3.
class TrainingDiverged : public std::runtime_error {
 public:
  explicit TrainingDiverged(Divergence d) : std::runtime_error(d.describe()), divergence(std::move(d)) {}
  Divergence divergence;
};

}  // namespace hearsay
