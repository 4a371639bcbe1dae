// How the simulator sets its peers up: the command line of each `hearsay peer`, the
// link flags that emulate the run's links, and what each peer's control file says as
// partitions and late slow faults come and go.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gossip/network/emulation/control_file.hpp"
#include "peer/peer_config.hpp"
#include "sim/fault_spec.hpp"
#include "sim/sim_config.hpp"

namespace hearsay::sim {

// Whether the peers of `algo` move in lockstep rounds (allreduce, dpsgd, local, and sgp
// without --overlap). Their evaluation points are the parameters each peer saved at the
// point's exact step (--snapshot-every), so the same seed gives the same curve; the peers
// of the others (gossip, adpsgd, sgp with overlap) are at different steps by design and are
// read when the run gets there.
bool evaluated_at_exact_steps(const std::string& algo, bool overlap);

// The link flags of rank r: --link (its own access link: its link fault, else `link`),
// --link-others `link`, and --link-peer rank<P>=SPEC for every other peer P with a link
// fault. Empty when nothing is emulated.
std::vector<std::string> link_arguments(const std::string& link, const std::vector<Fault>& faults, int rank);

// What each of `peers` control files says when `reached(T)` tells which fault times have
// come: the peers outside its group while a partition is in force (from T until T2), and
// F once a slow fault's T has come.
std::vector<emulation::PeerControl> controls_at(const std::vector<Fault>& faults, int peers,
                                                const std::function<bool(const FaultTime&)>& reached);

// The step after which a kill or restart given in epochs is due on its peer: the run
// counts epochs as the samples of all peers over the training set, so with peers at the
// same pace it is T x train_examples / (peers x batch), rounded up (at least 1). None for
// other faults and for times in seconds. The peer pauses there (pause-at) until the
// simulator has delivered it: a run shorter than the simulator's look at it cannot miss it.
std::optional<std::int64_t> pause_step(const Fault& fault, std::int64_t train_examples, int peers, int batch);

// Where the simulator keeps rank r's files in a run directory: its log, metrics, checkpoints
// (and evaluation snapshots), control file, and the ready file it writes once it listens.
struct PeerFiles {
  // settings: what it trains with, as `hearsay peer --print-config` prints it (a file
  // `hearsay peer --config` reads back), written when the run starts.
  std::filesystem::path log, metrics, checkpoint_dir, control, ready, settings;
  PeerFiles(const std::filesystem::path& run_dir, int rank);
  // The parameters the peer saved at evaluation point k (1, 2, ...).
  std::filesystem::path snapshot(std::int64_t k) const;
};

// A peer command line as peer_arguments gives it (argv[0] and "peer" first), parsed and
// checked by the peer's own parser. settings_toml, when not null, receives the settings
// as --print-config prints them. std::invalid_argument when it does not parse or validate.
PeerConfig parse_peer_command_line(const std::vector<std::string>& args, std::string* settings_toml = nullptr);

// The command line of rank r (argv[0] is `executable`), without --join, --resume and
// --wait-for-world, which depend on when it starts.
// The program of a peer's command line: {executable, "peer"}, or with --peer-command the
// shell running it, "peer" last (the flags follow it as they follow `hearsay peer`).
std::vector<std::string> peer_program(const SimConfig& cfg, const std::string& executable);
std::vector<std::string> peer_arguments(const SimConfig& cfg, const std::vector<Fault>& faults,
                                        const std::string& executable, const std::string& algo, int rank,
                                        std::uint64_t seed, const std::string& run_id,
                                        const std::filesystem::path& run_dir);

// The Prometheus file_sd targets of a run's peers with --http (the format scripts/launch
// writes: one entry per peer, labels run, rank, host, algorithm); empty without --http.
nlohmann::json prometheus_targets(const SimConfig& cfg, const std::string& run_id, const std::string& algo);

}  // namespace hearsay::sim
