#include "peer/peer_config.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <stdexcept>

#include "gossip/mixing/algorithms/registry.hpp"
#include "gossip/mixing/compress/compressor.hpp"
#include "gossip/network/transport/keys.hpp"
#include "gossip/network/wire/header.hpp"
#include "model/data/dataset.hpp"
#include "model/data/partition.hpp"
#include "model/device.hpp"
#include "model/optim/schedule.hpp"
#include "model/zoo.hpp"
#include "peer/graph_flags.hpp"
#include "peer/peer_config_checks.hpp"

namespace hearsay {

using config_checks::check_address;
using config_checks::HostPort;
using config_checks::require;

namespace {

// "ID=SPEC" of --link-peer split at its first '=' (peer ids hold none); std::invalid_argument
// saying what to write otherwise (without the flag's name: the callers add it).
std::pair<std::string, emulation::LinkSpec> parse_link_peer(const std::string& text) {
  const std::size_t eq = text.find('=');
  require(eq != std::string::npos,
          "'" + text + "' has no '=': use ID=SPEC, e.g. rank3=1mbit,20ms or rank3=1mbit,20ms,loss=0.05");
  require(eq > 0, "'" + text + "' has no peer id before '=': use ID=SPEC, e.g. rank3=1mbit,20ms");
  try {
    return {text.substr(0, eq), emulation::parse_link_spec(std::string_view(text).substr(eq + 1))};
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("'" + text + "': " + e.what());
  }
}

// parse(text) with the flag's name in front of what it throws.
template <class Parse>
auto for_flag(const std::string& flag, const std::string& text, Parse parse) {
  try {
    return parse(text);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(flag + ": " + e.what());
  }
}

// Checks one value of a link flag with `parse`, so that a bad value in the config file is
// refused with its file and line like a bad flag.
template <class Parse>
CLI::Validator link_validator(const std::string& name, Parse parse) {
  return CLI::Validator(
      [parse](std::string& text) {
        try {
          parse(text);
          return std::string();
        } catch (const std::invalid_argument& e) {
          return std::string(e.what());
        }
      },
      name);
}

}  // namespace

// ---- options ------------------------------------------------------------------------------

namespace {

// The [network] flags of add_peer_options.
void add_network_options(CLI::App& cmd, PeerConfig& cfg) {
  auto& n = cfg.network;
  cmd.add_option("--config", cfg.config_file,
                 "TOML file of settings (keys = these flags without dashes, see docs/CONFIG.md); "
                 "flags on the command line override it");
  cmd.add_flag("--print-config", cfg.print_config,
               "Print the settings the flags and --config give, as a config file that --config reads back "
               "unchanged, and exit");
  // From here on every option is a key of the config file, in the section its group names.
  cmd.option_defaults()->group("network");
  cmd.add_option("--listen", n.listen, "Address to bind, tcp://HOST:PORT (required)");
  cmd.add_option("--join", n.join,
                 "Address of a peer of the run to join (repeatable); none: this is the first peer");
  cmd.add_option("--join-key", n.join_key,
                 "A peer.pub file: the CURVE public key of the --join peers given without #KEY");
  cmd.add_option("--rank", n.rank, "This peer's rank, 0..WORLD-1 (with --world; fixed graphs need it)")
      ->check(CLI::Range(0, topology::kMaxPeers - 1));
  cmd.add_option("--world", n.world, "Number of peers of the run (with --rank)")
      ->check(CLI::Range(1, topology::kMaxPeers));
  cmd.add_flag(
      "--wait-for-world", n.wait_for_world,
      "Start training only once all --world ranks have joined, as fixed graphs and allreduce always do, "
      "each from --seed's initialisation (hearsay sim passes it so that every algorithm starts together)");
  cmd.add_option("--min-peers", n.min_peers,
                 "Start training only once N peers of the run, this one included, are live (it says while it "
                 "waits, and gives up after --join-timeout): peers started by hand start together, and the "
                 "first one does not train alone")
      ->check(CLI::Range(1, topology::kMaxPeers))
      ->capture_default_str();
  cmd.add_option("--id", n.id,
                 "Peer id on the wire (default: rank<R> with --rank, else HOST:PORT of --listen)");
  cmd.add_option("--run", n.run, "Run id: peers only talk to peers of the same run")->capture_default_str();
  cmd.add_option("--keys", n.keys, "Directory of this peer's CURVE keys (hearsay keygen makes it)");
  cmd.add_option("--authorized", n.authorized, "Directory of the *.pub keys of the peers this one accepts");
  cmd.add_flag("--insecure", n.insecure, "Plain TCP: no encryption, no authentication (instead of --keys)");

  add_training_flags(cmd, cfg.train);
  cmd.add_option("--budget", cfg.budget.kind,
                 "What ends training: per-peer (this peer trains --epochs epochs) or global (all peers "
                 "together train --epochs epochs of the training set: fast peers take more steps, the "
                 "learning rate follows the run's progress; needs --rank/--world)")
      ->check(CLI::IsMember({"per-peer", "global"}))
      ->capture_default_str();
  add_duration(cmd, "--time-budget", cfg.budget.time,
               "End training after this long (90s, 10m; 0: no limit), checkpointed and with a bye");
}

// The [mixing] flags of add_peer_options.
void add_mixing_options(CLI::App& cmd, PeerConfig& cfg) {
  cmd.option_defaults()->group("mixing");
  auto& g = cfg.mixing;
  cmd.add_option("--algo", g.algo, "Mixing algorithm: " + algorithms::algorithm_names(" | ") + " | none (train alone)")
      ->capture_default_str();
  cmd.add_option("--graph", g.graph,
                 "Graph of " + algorithms::algorithm_names(", ", true) +
                     ": ring | torus | exp | onepeer-exp | complete | random-regular | file")
      ->capture_default_str();
  cmd.add_flag("--directed", g.directed, "Directed graph (ring, torus, file)");
  cmd.add_option("--rows", g.rows, "Rows of --graph torus (default: the most square factorisation)")
      ->check(CLI::Range(1, topology::kMaxPeers));
  cmd.add_option("--degree", g.degree, "Degree K of --graph random-regular")
      ->check(CLI::Range(1, topology::kMaxPeers));
  cmd.add_option("--graph-seed", g.graph_seed, "Seed of --graph random-regular")->capture_default_str();
  cmd.add_option("--graph-file", g.graph_file, "Edge list of --graph file: 'a b' per line, 0-based ranks");
  cmd.add_option("--weights", g.weights, "Mixing weights")
      ->check(CLI::IsMember({"uniform", "metropolis"}))
      ->capture_default_str();
  cmd.add_option("--gossip-every", g.gossip_every, "Local steps between two communication rounds (H)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1000000}))
      ->capture_default_str();
  cmd.add_option("--fanout", g.fanout, "Partners per round (gossip)")
      ->check(CLI::Range(1, topology::kMaxPeers))
      ->capture_default_str();
  add_duration(cmd, "--round-timeout", g.round_timeout,
               "The longest a round waits (500ms, 2s, 1.5s; a plain number is seconds): deadlines are learnt "
               "from the round trips and waits observed, within this cap, which also holds until enough is "
               "observed");
  cmd.add_option(
         "--compress", g.compress,
         "What goes on the wire: the values as f32, f16, bf16 or int8 (every algorithm), or dpsgd's and "
         "gossip's compressed differences (CHOCO-SGD): topk:P% (the P% largest), randk:P% (P% at random), "
         "sign (a bit each, scaled per block), int4; dpsgd's rank-R projections of each neighbour "
         "difference on an undirected graph (PowerGossip): powergossip:R; or allreduce's rank-R updates "
         "(PowerSGD): powersgd:R")
      ->check(CLI::Validator(
          [](const std::string& text) -> std::string {
            if (wire::parse_value_dtype(text)) return {};
            return compress::check_compressor_spec(text).value_or("");
          },
          "SPEC"))
      ->capture_default_str();
  cmd.add_option(
         "--consensus-step", g.consensus_step,
         "dpsgd or gossip --compress topk/randk/sign/int4 (CHOCO), dpsgd --compress powergossip:R: the "
         "consensus step size in "
         "(0, 1] (default: 0.075 for topk, 0.01 for randk, 0.3 for sign (gossip: 0.15), 0.8 for int4, 1 for "
         "powergossip)")
      ->check(CLI::Range(0.0, 1.0));
  cmd.add_flag("--lookahead,!--no-lookahead", g.lookahead,
               "dpsgd --compress topk/randk/sign/int4 (CHOCO): train at a look-ahead over the neighbours' "
               "copies (as far as the graph allows: 0.85 of a gossip step on exp(8), 0.75 on a ring), of "
               "which the iterate keeps the consensus step (default); --no-lookahead: "
               "at the CHOCO iterate itself, as the paper")
      ->default_str("true");
  cmd.add_flag("--overlap", g.overlap, "Run a round while the next steps train; apply it one round late");
  cmd.add_option("--bn-stats", g.bn_stats,
                 "BatchNorm's running statistics: mix (averaged with the parameters) or local (each peer "
                 "keeps its own)")
      ->check(CLI::IsMember({"mix", "local"}))
      ->capture_default_str();
  cmd.add_option("--momentum-kind", g.momentum_kind,
                 "What --momentum runs over: local (each peer's gradients, in its optimizer) or quasi-global "
                 "(the model's change across rounds, mixing included, for heterogeneous shards; --optimizer "
                 "sgd without --nesterov)")
      ->check(CLI::IsMember({"local", "quasi-global"}))
      ->capture_default_str();
  cmd.add_option("--average-over", g.average_over,
                 "What the network's training averages over when shards differ in size: examples (each "
                 "peer's steps scaled by its shard over the mean shard, so that every example weighs alike, "
                 "as in one large batch) or peers (every peer's loss weighs alike, whatever its shard)")
      ->check(CLI::IsMember({"examples", "peers"}))
      ->capture_default_str();
  cmd.add_flag("--always-start-round,!--skip-when-served", g.always_start_round,
               "gossip: start a round at every H-th step, also when a partner averaged with this peer "
               "since the last one (the default); --skip-when-served skips that round, for about 0.55 of "
               "the traffic and some accuracy")
      ->default_str("true");
}

// The [membership] flags of add_peer_options.
void add_membership_options(CLI::App& cmd, PeerConfig& cfg) {
  cmd.option_defaults()->group("membership");
  auto& m = cfg.membership;
  add_duration(cmd, "--heartbeat", m.heartbeat, "Interval between liveness messages");
  add_duration(cmd, "--suspect-after", m.suspect_after,
               "Silence after which a peer is suspected (> --heartbeat)");
  add_duration(cmd, "--dead-after", m.dead_after,
               "Silence after which a peer is declared dead (> --suspect-after)");
  add_duration(cmd, "--join-timeout", m.join_timeout,
               "How long to wait for the seeds (and for --min-peers, or with fixed graphs for every rank) "
               "before giving up");
}

// The [output] flags of add_peer_options.
void add_output_options(CLI::App& cmd, PeerConfig& cfg) {
  cmd.option_defaults()->group("output");
  auto& o = cfg.output;
  cmd.add_option("--metrics", o.metrics,
                 "Write one JSON object per line to this file, which this peer alone may write while it runs "
                 "({rank} and {id} in it become this peer's)");
  cmd.add_option("--log-every", o.log_every, "Seconds between progress lines")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option("--epoch-eval", o.epoch_eval,
                 "Evaluate on the test set at each epoch's end (the final evaluation is made either way; "
                 "hearsay sim sets false: it evaluates the models itself, and the peers' evaluations would "
                 "only take the box's cores from training)")
      ->capture_default_str();
  cmd.add_option("--http", o.http, "Serve Prometheus metrics on :PORT or HOST:PORT");
  cmd.add_option("--ready-file", o.ready_file,
                 "Once listening, write this JSON file (atomically): id, rank, run, address, pid, http_port");
}

// The [checkpoint] flags of add_peer_options.
void add_checkpoint_options(CLI::App& cmd, PeerConfig& cfg) {
  cmd.option_defaults()->group("checkpoint");
  auto& c = cfg.checkpoint;
  cmd.add_option("--checkpoint", c.dir,
                 "Directory for checkpoints, this peer's alone while it runs ({rank} and {id} in it become "
                 "this peer's)");
  add_duration(cmd, "--checkpoint-every", c.every,
               "Time between checkpoints (0: none but the final one and the one at a stop)");
  cmd.add_flag("--resume", c.resume, "Resume from the checkpoint in --checkpoint (if there is one yet)");
  cmd.add_option(
         "--initial-state", c.initial_state,
         "Without a checkpoint, joining a run under way: pull (a live neighbour's state) | own (--seed's "
         "initialisation)")
      ->check(CLI::IsMember({"pull", "own"}))
      ->capture_default_str();
  cmd.add_option("--snapshot-every", c.snapshot_every,
                 "Also save the parameters every EPOCHS epochs of this peer's shard, at exact steps, as "
                 "DIR/params-K.f32 (needs --checkpoint; hearsay sim evaluates synchronous runs with them)")
      ->check(CLI::Range(0.0, 1000.0))
      ->capture_default_str();
}

// The [emulation] flags of add_peer_options.
void add_emulation_options(CLI::App& cmd, PeerConfig& cfg) {
  cmd.option_defaults()->group("emulation");
  auto& e = cfg.emulation;
  cmd.add_option("--slowdown", e.slowdown,
                 "Emulate a slower machine: each step's computation takes F times as long (hearsay sim's "
                 "slow:PEER:Fx)")
      ->check(CLI::Range(1.0, 1000.0))
      ->capture_default_str();
  add_duration(cmd, "--min-step-time", e.min_step_time,
               "Emulate a machine of its own: each step's computation lasts at least this long (before "
               "--slowdown), so peers sharing a box's cores keep one pace (hearsay sim --step-time)");
  cmd.add_option("--link", e.link,
                 "Emulate this peer's access link, RATE,DELAY[,loss=P][,dup=P][,reorder=P] (e.g. "
                 "100mbit,5ms,loss=0.01): "
                 "every message it sends waits and may be lost, seeded by --seed")
      ->check(link_validator("SPEC", [](const std::string& t) { emulation::parse_link_spec(t); }));
  cmd.add_option("--link-others", e.link_others,
                 "Emulate the access link of the peers without a --link-peer, "
                 "RATE,DELAY[,loss=P][,dup=P][,reorder=P]")
      ->check(link_validator("SPEC", [](const std::string& t) { emulation::parse_link_spec(t); }));
  cmd.add_option("--link-peer", e.link_peers,
                 "Emulate one peer's access link, ID=RATE,DELAY[,loss=P][,dup=P][,reorder=P] (repeatable); a "
                 "message to it "
                 "crosses its link and --link: the slower rate, the longer delay, both losses")
      ->check(link_validator("ID=SPEC", [](const std::string& t) { parse_link_peer(t); }));
  cmd.add_option("--link-hold-at", e.link_hold_at,
                 "Where an emulated link's delay is held: sender (it waits, then the network carries it: "
                 "the real network's time adds) or receiver (sent at once with its emulated arrival time, "
                 "held by the receiver until then: a message takes the longer of the two; only for peers "
                 "of one machine, which share its clock; hearsay sim sets it)")
      ->check(CLI::IsMember({"sender", "receiver"}))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)  // a --peer-arg overrides the simulator's
      ->capture_default_str();
  cmd.add_flag("--link-may-change", e.link_may_change,
               "Let the control file's `link` line change this peer's own link during the run (hearsay "
               "sim sets it for a link fault with a time): its messages pass a delay line even while "
               "no link is emulated");
  cmd.add_option(
      "--control-file", e.control_file,
      "A file hearsay sim rewrites to change this peer while it runs: lines 'blocked ID...' (a "
      "partition), 'slowdown F', 'hold' (no step yet) and 'pause-at STEP' (no step after STEP while "
      "it stays); read again within 50 ms of a change");

  cmd.final_callback([&cmd, &cfg] {
    if (!cfg.config_file.empty()) apply_config_file(cmd, cfg.config_file);
  });
}

}  // namespace

// One entry per flag: long because the peer has that many flags.
void add_peer_options(CLI::App& cmd, PeerConfig& cfg) {
  add_network_options(cmd, cfg);
  add_mixing_options(cmd, cfg);
  add_membership_options(cmd, cfg);
  add_output_options(cmd, cfg);
  add_checkpoint_options(cmd, cfg);
  add_emulation_options(cmd, cfg);
  cmd.option_defaults()->group("Options");  // what the caller adds is no key of the file
}

// ---- validation ---------------------------------------------------------------------------

bool uses_graph(const std::string& algo) {
  const auto* a = algorithms::find_algorithm(algo);
  return a != nullptr && a->needs_graph;
}

topology::GraphSpec graph_spec(const PeerConfig& cfg) {
  const auto& g = cfg.mixing;
  GraphFlags flags;
  flags.graph = g.graph;
  flags.peers = cfg.network.world;  // checked by validate(): fixed graphs need --world
  flags.directed = g.directed;
  flags.rows = g.rows;
  flags.degree = g.degree;
  flags.seed = g.graph_seed;
  flags.file = g.graph_file;
  return graph_spec_from_flags(flags, {.file = "--graph-file", .peers = {}});
}

algorithms::AlgorithmOptions algorithm_options(const PeerConfig& cfg) {
  const auto& g = cfg.mixing;
  algorithms::AlgorithmOptions o;
  o.gossip_every = g.gossip_every;
  o.fanout = g.fanout;
  o.round_timeout = std::chrono::duration_cast<algorithms::Clock::duration>(g.round_timeout);
  if (compress::is_difference_compressor(g.compress) || compress::low_rank(g.compress) ||
      compress::power_gossip(g.compress)) {
    o.compressor = g.compress;  // the values stay f32; the differences or updates compressed
  } else {
    const auto compress = wire::parse_value_dtype(g.compress);
    require(compress.has_value(),
            compress::check_compressor_spec(g.compress).value_or("--compress '" + g.compress + "'"));
    o.compress = *compress;
  }
  require(g.consensus_step >= 0 && g.consensus_step <= 1,
          "--consensus-step must be in (0, 1] (0: the compressor's default)");
  o.consensus_step = g.consensus_step;
  o.lookahead = g.lookahead;
  o.overlap = g.overlap;
  o.always_start_round = g.always_start_round;
  o.seed = cfg.train.seed;
  try {
    o.weights = topology::parse_weight_scheme(g.weights);
  } catch (const std::exception&) {
    throw std::invalid_argument("--weights '" + g.weights + "' is not one of uniform, metropolis");
  }
  return o;
}

std::optional<std::string> momentum_kind_refusal(const std::string& kind, const TrainingSettings& train,
                                                 const std::string& compress, bool mixes) {
  if (kind != "quasi-global") return std::nullopt;
  if (!mixes) return "--momentum-kind quasi-global: --algo none mixes nothing to run it over";
  if (train.optimizer != "sgd")
    return "--momentum-kind quasi-global is SGD's momentum; --optimizer " + train.optimizer +
           " has its own moments: use --optimizer sgd";
  if (train.nesterov) return "--momentum-kind quasi-global is heavy-ball momentum: leave out --nesterov";
  if (compress::low_rank(compress))
    return "--compress " + compress +
           " already runs --momentum over the agreed update (PowerSGD): leave --momentum-kind local";
  // A coarse consensus step leaves the models' differences far from its estimate of them
  // (quasi_global_momentum.hpp): momentum over that step feeds the error back round after round.
  if (compress::coarse_consensus(compress))
    return "--momentum-kind quasi-global with --compress " + compress +
           ": the momentum would run over the consensus step too, which moves by a coarse estimate of "
           "the neighbours' differences, and carry its error on round after round until the peers drift "
           "apart (8 LeNet peers diverged with topk:1%, randk:1%, sign and powergossip:2); use "
           "--momentum-kind local, or --compress int4, whose copies keep up";
  return std::nullopt;
}

bool quasi_global_momentum(const PeerConfig& cfg) {
  return cfg.mixing.momentum_kind == "quasi-global" && algorithms::find_algorithm(cfg.mixing.algo) != nullptr;
}

bool algorithm_applies_momentum(const PeerConfig& cfg) {
  if (quasi_global_momentum(cfg)) return true;
  const auto* traits = algorithms::find_algorithm(cfg.mixing.algo);
  return traits != nullptr && traits->compresses_low_rank && cfg.train.optimizer == "sgd" &&
         compress::low_rank(cfg.mixing.compress).has_value();
}

TrainingSettings optimizer_settings(const PeerConfig& cfg) {
  TrainingSettings t = cfg.train;
  if (algorithm_applies_momentum(cfg)) {
    t.momentum = 0;
    t.nesterov = false;
  }
  return t;
}

emulation::LinkEmulation link_emulation(const PeerConfig& cfg) {
  const auto& e = cfg.emulation;
  emulation::LinkEmulation emulation;
  const auto spec_of = [](const std::string& text) { return emulation::parse_link_spec(text); };
  if (!e.link.empty()) emulation.self = for_flag("--link", e.link, spec_of);
  if (!e.link_others.empty()) emulation.others = for_flag("--link-others", e.link_others, spec_of);
  for (const auto& text : e.link_peers) {
    auto [id, spec] = for_flag("--link-peer", text, parse_link_peer);
    require(emulation.peers.emplace(id, spec).second,
            "--link-peer gives peer '" + id + "' twice: keep one ID=SPEC per peer");
  }
  emulation.seed = cfg.train.seed;
  return emulation;
}

std::string rank_peer_id(int rank) { return "rank" + std::to_string(rank); }

bool is_rank_peer_id(const std::string& id) {
  return id.size() > 4 && id.rfind("rank", 0) == 0 &&
         std::all_of(id.begin() + 4, id.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool pulls_state_when_joining(const PeerConfig& cfg, bool resumed) {
  const auto* traits = algorithms::find_algorithm(cfg.mixing.algo);
  return !resumed && cfg.checkpoint.initial_state == "pull" && !cfg.network.join.empty() &&
         !(traits != nullptr && traits->starts_together) && !cfg.network.wait_for_world;
}

bool uses_ranks(const std::string& algo) {
  const auto* a = algorithms::find_algorithm(algo);
  return a != nullptr && a->needs_ranks;
}

bool is_wildcard_host(std::string_view host) { return host == "*" || host == "0.0.0.0" || host == "[::]"; }

std::string this_host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 && name[0] != '\0' ? name : "localhost";
}

namespace {

// path with {rank} and {id} replaced; std::invalid_argument naming flag for {rank} without
// a rank.
std::string expand_placeholders(const std::string& flag, std::string path, const PeerConfig& cfg) {
  const auto replace_all = [&](const std::string& from, const std::string& to) {
    for (std::size_t at = path.find(from); at != std::string::npos; at = path.find(from, at + to.size()))
      path.replace(at, from.size(), to);
  };
  if (path.find("{rank}") != std::string::npos) {
    require(cfg.network.rank >= 0, flag + " '" + path +
                                       "' has {rank}, which needs --rank R (or use {id}, this peer's id)");
    replace_all("{rank}", std::to_string(cfg.network.rank));
  }
  if (path.find("{id}") != std::string::npos) replace_all("{id}", peer_id(cfg));
  return path;
}

}  // namespace

void expand_per_peer_paths(PeerConfig& cfg) {
  cfg.output.metrics = expand_placeholders("--metrics", cfg.output.metrics, cfg);
  cfg.output.ready_file = expand_placeholders("--ready-file", cfg.output.ready_file, cfg);
  cfg.checkpoint.dir = expand_placeholders("--checkpoint", cfg.checkpoint.dir, cfg);
}

std::string peer_id(const PeerConfig& cfg) {
  if (!cfg.network.id.empty()) return cfg.network.id;
  if (cfg.network.rank >= 0) return rank_peer_id(cfg.network.rank);
  const std::string& listen = cfg.network.listen;
  if (listen.rfind("ipc://", 0) == 0) return listen.substr(6);
  const HostPort hp = check_address("--listen", listen, false);
  return (is_wildcard_host(hp.host) ? this_host_name() : hp.host) + ":" + std::to_string(hp.port);
}

}  // namespace hearsay
