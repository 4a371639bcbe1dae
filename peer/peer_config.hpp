// The configuration of `hearsay peer`: every setting, its command-line flag, the TOML
// config file (--config FILE) and the checks that a combination makes a runnable peer.
//
// Each flag --some-name is the key some-name in the config file, either at the top level
// or in its section's table ([network], [train], [mixing], [membership], [output],
// [checkpoint], [emulation]): the section is the option's group, which --help shows
// too, so a flag is declared once (add_peer_options) and is a key by being declared.
// docs/CONFIG.md lists them. Flags given on the command line override the
// file. Values from the file go through the same CLI11 validators as flags, so a file
// cannot set what a flag could not.
#pragma once
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/toml_flags.hpp"
#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/topology/topology.hpp"
#include "gossip/network/emulation/link_emulator.hpp"
#include "peer/duration_flag.hpp"
#include "peer/training_flags.hpp"

namespace hearsay {

struct NetworkConfig {
  std::string listen;             // tcp://HOST:PORT (or ipc://PATH); required
  std::vector<std::string> join;  // seed addresses; none: this is the first peer
  std::string join_key;           // a peer.pub file: the key of the --join addresses given without #KEY
  int rank = -1;                  // -1: not given
  int world = 0;                  // 0: not given
  bool wait_for_world = false;   // start training only once all --world ranks joined (fixed graphs always do)
  int min_peers = 1;             // start training only once this many peers (this one included) are live
  std::string id;                // empty: rank<R> with --rank, else derived from --listen (see peer_id)
  std::string run = "hearsay";   // run id: peers of another run are refused
  std::string keys, authorized;  // CURVE key directory, directory of accepted *.pub
  bool insecure = false;         // plain TCP, no encryption, no authentication
  bool operator==(const NetworkConfig&) const = default;
};

struct PeerMixingConfig {
  std::string algo = "gossip";  // a registered algorithm (registry.hpp), or "none": train alone
  std::string graph = "ring";   // for dpsgd, sgp, adpsgd, local
  bool directed = false;
  int rows = 0;    // torus (0: the most square factorisation)
  int degree = 0;  // random-regular
  std::uint64_t graph_seed = 0;
  std::string graph_file;  // edge list for --graph file
  std::string weights = "uniform";
  std::uint64_t gossip_every = 1;
  int fanout = 1;
  Duration round_timeout = std::chrono::seconds(2);
  // f32, f16, bf16, int8: the values on the wire (every algorithm); topk:P%, randk:P%, sign,
  // int4: CHOCO's compressed differences (dpsgd).
  std::string compress = "f32";
  double consensus_step = 0;  // CHOCO's γ (--consensus-step); 0: the compressor's default
  bool lookahead = true;      // dpsgd's CHOCO trains at a look-ahead over the copies
  bool overlap = false;
  bool always_start_round = true;  // gossip; false: skip a round after a partner averaged with us
  std::string bn_stats = "mix";    // mix | local: whether BatchNorm's running statistics are mixed
  // local: each peer's optimizer runs --momentum over its gradients; quasi-global: the
  // mixer runs it over the model's change across rounds (quasi_global_momentum.hpp).
  std::string momentum_kind = "local";
  // examples: with unequal shards each peer's steps are scaled by its shard over the mean
  // shard (AlgorithmOptions::shard_share), so that the network averages the loss over the
  // training set's examples, as one large batch would; peers: every peer's loss weighs alike.
  std::string average_over = "examples";
  bool operator==(const PeerMixingConfig&) const = default;
};

struct MembershipConfig {
  Duration heartbeat = std::chrono::seconds(1);
  Duration suspect_after = std::chrono::seconds(3);
  Duration dead_after = std::chrono::seconds(10);
  // How long a joiner (or a fixed-graph peer waiting for every rank) waits before it
  // gives up with an error that says what to check.
  Duration join_timeout = std::chrono::seconds(60);
  bool operator==(const MembershipConfig&) const = default;
};

struct OutputConfig {
  std::string metrics;    // JSONL file; empty: none
  double log_every = 10;  // seconds between progress lines
  // --epoch-eval: evaluate on the test set at each epoch's end (the final evaluation is
  // made either way); hearsay sim turns it off, as it evaluates the models itself.
  bool epoch_eval = true;
  std::string http;  // ":PORT" or "HOST:PORT" for Prometheus metrics; empty: none
  // --ready-file: written once the peer listens (peer/ready_file.hpp); empty: none
  std::string ready_file;
  bool operator==(const OutputConfig&) const = default;
};

struct CheckpointConfig {
  std::string dir;  // empty: no checkpoints
  Duration every = std::chrono::minutes(5);
  bool resume = false;
  // Where a peer without a checkpoint starts when it joins a run that is under way:
  // "pull" (a live neighbour's state, STATE) or "own" (its --seed's initialisation).
  std::string initial_state = "pull";
  // Also save the parameters every this many epochs (0: never), at exact steps, as
  // DIR/params-K.f32: how hearsay sim evaluates synchronous runs reproducibly.
  double snapshot_every = 0;
  bool operator==(const CheckpointConfig&) const = default;
};

// What the simulator (hearsay sim) sets to emulate a slower machine and slower links.
struct EmulationConfig {
  double slowdown = 1;        // F: each step's computation takes F times as long (F - 1 times it waited)
  Duration min_step_time{0};  // --min-step-time: a step's computation lasts at least this (then F times)
  // Link specs, "RATE,DELAY[,loss=P][,dup=P][,reorder=P]" (gossip/network/emulation/link_spec.hpp); empty:
  // not given.
  std::string link;                     // --link: this peer's own access link
  std::string link_others;              // --link-others: the access link of peers without --link-peer
  std::vector<std::string> link_peers;  // --link-peer ID=SPEC (repeatable): a peer's own access link
  // --link-hold-at: "sender" holds an emulated message's delay before sending it;
  // "receiver" sends at once, stamped, and the receiver holds it (peers of one machine).
  std::string link_hold_at = "sender";
  // --link-may-change: the control file's `link` line may change --link during the run.
  bool link_may_change = false;
  std::string control_file;  // --control-file: partitions and late slowdowns (control_file.hpp)
  bool operator==(const EmulationConfig&) const = default;
};

// What ends a peer's training (docs/ARCHITECTURE.md, "Budgets").
struct BudgetConfig {
  // "per-peer": this peer trains --epochs of its own epochs. "global": the peers together
  // train --epochs epochs of the training set (world x epochs x steps per epoch); a fast
  // peer takes more steps than a slow one, and the learning rate follows the run's
  // estimated progress, not the peer's own steps.
  std::string kind = "per-peer";
  Duration time{0};  // --time-budget: training ends after this long (0: no limit)
  bool global() const { return kind == "global"; }
  bool operator==(const BudgetConfig&) const = default;
};

struct PeerConfig {
  NetworkConfig network;
  TrainingSettings train;  // the flags `hearsay train` has too
  BudgetConfig budget;
  PeerMixingConfig mixing;
  MembershipConfig membership;
  OutputConfig output;
  CheckpointConfig checkpoint;
  EmulationConfig emulation;
  std::string config_file;  // --config
  bool print_config = false;  // --print-config
  bool operator==(const PeerConfig&) const = default;
};

// Registers every flag of `hearsay peer` on cmd, bound to cfg (which must outlive the
// parse), and installs cmd's final callback: once the command line is parsed, the
// --config file is read and its values are applied to the options not given on the
// command line. Errors in the file throw CLI::ConfigError (a CLI::ParseError, so
// App::exit prints it) naming the file, line and key; a value the option's validator
// refuses names them too. Do not replace cmd's final callback.
void add_peer_options(CLI::App& cmd, PeerConfig& cfg);

// Reads a TOML file and applies it to cmd's options that were not given (count() == 0).
// What add_peer_options' callback does; public for tools that build their own App.
void apply_config_file(CLI::App& cmd, const std::string& path);
// One key of the config file: an option of add_peer_options, in the section its group
// names, taking the TOML value its type calls for (toml_flags::kind_of).
struct ConfigKey {
  std::string section;  // "network", "train", "mixing", ...
  std::string name;     // the flag without its dashes
  toml_flags::ValueKind kind;
  const CLI::Option* option;
};
// Every key the config file takes: the options of cmd (filled by add_peer_options) but
// those of the group "Options" (--config, --print-config, --help), in declaration order.
std::vector<ConfigKey> config_file_keys(const CLI::App& cmd);
// The settings cmd's options hold after a parse (given on the command line or by the
// --config file, else their defaults) as a config file: one table per section, every key
// in order, an unset key as a comment. apply_config_file reads it back to the same
// settings.
std::string print_config(const CLI::App& cmd);

// The paths that are this peer's own, --metrics, --checkpoint and --ready-file, with {rank}
// (the --rank number) and {id} (peer_id) replaced, so that one command line or config file
// serves every peer of a run: --metrics 'metrics-{rank}.jsonl'. std::invalid_argument for
// {rank} without --rank.
void expand_per_peer_paths(PeerConfig& cfg);

// Checks that the settings make a runnable peer; std::invalid_argument with a message
// naming the flag and what to do. Whether --device names a device this machine has is
// checked when the peer starts (model/device.hpp: choose_device).
void validate(const PeerConfig& cfg);

// The --join addresses as the transport takes them: with --join-key, the key from that file
// appended (#KEY) to each address given without one. std::invalid_argument naming the file
// when it cannot be read, or an address whose own key differs from it.
std::vector<std::string> join_addresses(const NetworkConfig& network);

// `text` as one word of a POSIX shell command line (single-quoted when it holds anything a
// shell would read specially): Z85 keys hold > < ( ) & $ ! #.
std::string shell_word(const std::string& text);

// Whether --algo mixes over the --graph (registry.hpp: needs_graph).
bool uses_graph(const std::string& algo);

// The knobs of the mixing algorithm: --gossip-every, --fanout, --round-timeout,
// --compress, --overlap, --weights, and --seed (each rank derives its own partner stream).
// std::invalid_argument for an unknown --compress or --weights.
algorithms::AlgorithmOptions algorithm_options(const PeerConfig& cfg);
// Whether the algorithm, not the optimizer, applies --momentum (and --nesterov): PowerSGD
// all-reduce (--compress powersgd:R) with --optimizer sgd runs it over the agreed update
// (powersgd.hpp); --momentum-kind quasi-global runs it over the change across rounds
// (quasi_global_momentum.hpp). A peer whose optimizer is its own (hearsay's) then builds it from
// optimizer_settings and its algorithm with the momentum (make_peer_algorithm); a PyTorch
// peer's optimizer keeps the momentum it was given.
bool algorithm_applies_momentum(const PeerConfig& cfg);
// --momentum-kind quasi-global with a mixing algorithm.
bool quasi_global_momentum(const PeerConfig& cfg);
// Why --momentum-kind `kind` cannot run with these training settings and --compress (for an
// algorithm that mixes, or --algo none), or nullopt: the peer's and the simulator's check.
std::optional<std::string> momentum_kind_refusal(const std::string& kind, const TrainingSettings& train,
                                                 const std::string& compress, bool mixes);
// cfg.train without the momentum the algorithm applies: what hearsay's optimizer is built from.
TrainingSettings optimizer_settings(const PeerConfig& cfg);
// The graph of --graph and its flags over --world peers (a file graph takes its size
// from the file when --world is not given). std::invalid_argument for flags that do not
// describe a graph; the graph itself is built (and the file read) by Topology::make.
topology::GraphSpec graph_spec(const PeerConfig& cfg);
// The link emulation of --link, --link-others and --link-peer, with --seed as the seed of
// the loss draws; enabled() only when one of them is given (and emulates something).
// std::invalid_argument naming the flag for a bad spec, an ID=SPEC without '=' or without
// an id, or an id given twice.
emulation::LinkEmulation link_emulation(const PeerConfig& cfg);
// --id; else "rank<R>" with --rank (fixed graphs find their neighbours by rank that way);
// else "HOST:PORT" of --listen (this machine's host name when HOST is * or 0.0.0.0), or
// the path of an ipc:// address.
std::string peer_id(const PeerConfig& cfg);
// The id of the peer of rank r in a run with ranks: "rank<r>".
std::string rank_peer_id(int rank);
// Whether id is such an id ("rank" and digits).
bool is_rank_peer_id(const std::string& id);
// Whether a peer starting now takes a live neighbour's training state (STATE,
// state_transfer.hpp): it joins a run under way (--join, no --wait-for-world), did not
// resume from a checkpoint, starts from "pull" (--initial-state), and its algorithm does
// not start every peer together (allreduce, the fixed graphs begin at --seed's state).
bool pulls_state_when_joining(const PeerConfig& cfg, bool resumed);
// Whether --algo needs --rank/--world (its partners come from ranks, not membership):
// the graph algorithms and allreduce.
bool uses_ranks(const std::string& algo);
// Whether a --listen host binds every interface (*, 0.0.0.0, [::]); other machines then
// reach the peer by this machine's name.
bool is_wildcard_host(std::string_view host);
// This machine's host name ("localhost" when it has none).
std::string this_host_name();

}  // namespace hearsay
