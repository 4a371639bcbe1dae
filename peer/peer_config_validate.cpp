// validate(): every flag of a peer's configuration checked on its own and against the
// others, before anything starts (peer_config.hpp states the contract).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <string>

#include "gossip/mixing/algorithms/power_gossip.hpp"
#include "gossip/mixing/algorithms/registry.hpp"
#include "gossip/mixing/compress/compressor.hpp"
#include "model/data/partition.hpp"
#include "model/device.hpp"
#include "model/optim/schedule.hpp"
#include "model/zoo.hpp"
#include "peer/graph_flags.hpp"
#include "peer/peer_config.hpp"
#include "peer/peer_config_checks.hpp"

namespace hearsay {

using config_checks::check_address;
using config_checks::HostPort;
using config_checks::parse_port;
using config_checks::require;

namespace {

// Each part of validate: the flags of one section of the config, and across sections
// where one needs another.
void validate_network(const PeerConfig& cfg) {
  const auto& n = cfg.network;
  require(
      !n.listen.empty(),
      "--listen is required: give the address to bind, e.g. --listen tcp://0.0.0.0:7000 (or listen in the "
      "config file)");
  const HostPort listen = check_address("--listen", n.listen, false);
  const bool ipc = n.listen.rfind("ipc://", 0) == 0;
  require(ipc || listen.port != 0 || !n.id.empty() || n.rank >= 0,
          "--listen '" + n.listen +
              "' lets the system choose the port, so the peer id cannot be HOST:PORT: give --id "
              "NAME (or --rank)");
  for (const auto& seed : n.join) {
    check_address("--join", seed, true);
    require(seed != n.listen, "--join '" + seed + "' is this peer's own --listen address: join another peer");
  }
  if (!n.join_key.empty()) {
    require(!n.join.empty(),
            "--join-key " + n.join_key + " is the key of the --join peers: give --join ADDRESS");
    require(!n.insecure, "--join-key is a CURVE key, and --insecure peers use none: drop one of them");
  }
  // A CURVE peer can only reach a seed whose public key it knows, and a plain one none
  // that has one: said now, not after --join-timeout of retries.
  for (const auto& seed : join_addresses(n)) {
    const bool keyed = seed.find('#') != std::string::npos;
    require(keyed || n.insecure,
            "--join '" + seed +
                "': the address has no CURVE key: append #KEY (the first peer logs its address with it: "
                "'others join with --join ...'), or give --join-key with its peer.pub, or run every peer "
                "with --insecure");
    require(!keyed || !n.insecure,
            "--join '" + seed +
                "' carries a CURVE key, but this peer is --insecure: give it --keys and --authorized, or "
                "join the address without #KEY (its peers must be --insecure too)");
  }
  const bool has_rank = n.rank >= 0, has_world = n.world > 0;
  require(!has_rank || has_world,
          "--rank " + std::to_string(n.rank) + " needs --world N (the number of peers)");
  require(!has_world || has_rank, "--world " + std::to_string(n.world) +
                                      " needs --rank R (this peer's rank, 0.." + std::to_string(n.world - 1) +
                                      ")");
  require(!n.wait_for_world || has_world, "--wait-for-world needs --rank R and --world N");
  require(!has_world || n.min_peers <= n.world,
          "--min-peers " + std::to_string(n.min_peers) + " is more than --world " + std::to_string(n.world) +
              ": the run has no more peers to wait for");
  if (has_rank)
    require(n.rank < n.world, "--rank " + std::to_string(n.rank) + " needs --world greater than " +
                                  std::to_string(n.rank) + " (ranks are 0..WORLD-1)");
  const std::string id = peer_id(cfg);
  require(!id.empty() && id.size() <= 255 && id.front() != '\0',
          "--id '" + id + "' must be 1 to 255 bytes and not start with a zero byte");
  require(id.find('=') == std::string::npos &&
              std::none_of(id.begin(), id.end(),
                           [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }),
          "--id '" + id + "' must not contain '=' or control characters");
  require(!n.run.empty() && n.run.size() <= 255, "--run must be 1 to 255 bytes");
  if (n.insecure) {
    require(n.keys.empty() && n.authorized.empty(),
            "--insecure cannot be combined with --keys/--authorized: choose CURVE keys or plain TCP");
  } else {
    require(!n.keys.empty() || !n.authorized.empty(),
            "give --keys DIR --authorized DIR (hearsay keygen makes keys), or --insecure for plain TCP");
    require(!n.keys.empty(), "--authorized needs --keys DIR (this peer's key pair, from hearsay keygen)");
    require(!n.authorized.empty(), "--keys needs --authorized DIR (the *.pub keys of the peers to accept)");
  }
}

void validate_training(const PeerConfig& cfg) {
  const bool has_rank = cfg.network.rank >= 0;
  const auto& t = cfg.train;
  const auto models = model_names();
  require(
      std::find(models.begin(), models.end(), t.model) != models.end(),
      "--model '" + t.model + "' is not in the zoo: use " + [&] {
        std::string s;
        for (const auto& m : models) s += (s.empty() ? "" : ", ") + m;
        return s;
      }());
  require(t.epochs > 0, "--epochs must be more than 0");
  require(t.batch >= 1, "--batch must be at least 1");
  require(std::isfinite(t.lr) && t.lr >= 0, "--lr must be a number >= 0");
  require(t.optimizer == "sgd" || t.optimizer == "adamw",
          "--optimizer '" + t.optimizer + "' is not one of sgd, adamw");
  require(t.threads >= 0, "--threads must be at least 1");
  try {
    // Only the text is judged: the run's length is known once the data is loaded.
    parse_lr_schedule(t.lr_schedule, t.lr, std::numeric_limits<std::int32_t>::max());
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--lr-schedule: ") + e.what());
  }
  try {
    const PartitionSpec partition = parse_partition(t.partition);
    require(partition.kind == PartitionSpec::Kind::iid || has_rank,
            "--partition " + t.partition +
                " needs --rank and --world (the partition splits the data among ranks)");
  } catch (const DataError& e) {
    throw std::invalid_argument(std::string("--partition: ") + e.what());
  }
  // Only the text: whether this machine has the device is choose_device's to say.
  parse_device(t.device);
}

void validate_gossip(const PeerConfig& cfg) {
  const auto& n = cfg.network;
  const bool has_rank = n.rank >= 0, has_world = n.world > 0;
  const auto& g = cfg.mixing;
  const algorithms::AlgorithmTraits* traits = algorithms::find_algorithm(g.algo);
  require(traits != nullptr || g.algo == "none",
          "--algo '" + g.algo + "' is not one of " + algorithms::algorithm_names() + ", none");
  if (traits != nullptr && traits->needs_ranks)
    require(has_rank,
            "--algo " + g.algo + " needs --rank and --world (" + std::string(traits->why_ranks) + ")");
  if (uses_graph(g.algo)) {
    const auto spec = graph_spec(cfg);
    if (compress::power_gossip(g.compress))
      if (const auto why = algorithms::power_gossip_graph_refusal(spec)) require(false, *why);
  }
  if (uses_ranks(g.algo))
    require(n.id.empty() || n.id == rank_peer_id(n.rank),
            "--id " + n.id + " cannot be used with --algo " + g.algo +
                ": peers of a fixed graph find each other by rank, as '" + rank_peer_id(n.rank) +
                "'; leave --id out");
  if (has_world && traits != nullptr && traits->uses_fanout)
    require(g.fanout < n.world, "--fanout " + std::to_string(g.fanout) + " needs --world greater than " +
                                    std::to_string(g.fanout) +
                                    " (a peer cannot have more partners than other peers)");
  require(!cfg.budget.global() || has_rank,
          "--budget global needs --rank and --world: the budget is --epochs epochs of the training set "
          "over the run's --world peers");
  require(cfg.budget.time >= Duration::zero(), "--time-budget cannot be negative");
  require(g.gossip_every >= 1, "--gossip-every must be at least 1");
  require(g.fanout >= 1, "--fanout must be at least 1");
  require(g.round_timeout > Duration::zero(), "--round-timeout must be longer than 0s");
  const auto options = algorithm_options(cfg);  // --compress and --weights
  if (!options.compressor.empty()) {
    require(traits != nullptr, "--compress " + g.compress + ": --algo none sends nothing to compress");
    const auto why = algorithms::compress_refusal(*traits, g.compress);
    require(!why, why.value_or(""));
  }
  if (traits != nullptr)
    if (const auto why = algorithms::overlap_refusal(*traits, g.overlap)) throw std::invalid_argument(*why);
  if (const auto why = momentum_kind_refusal(g.momentum_kind, cfg.train, g.compress, traits != nullptr))
    throw std::invalid_argument(*why);
  if (!g.lookahead)
    require(
        algorithms::runs_lookahead(g.algo, g.compress),
        "--no-lookahead is for dpsgd's compressed differences (CHOCO: --compress topk:P%, randk:P%, sign, "
        "int4); --algo " +
            g.algo + " --compress " + g.compress + " has no look-ahead to turn off");
  if (g.consensus_step > 0)
    require(compress::is_difference_compressor(g.compress) || compress::power_gossip(g.compress),
            "--consensus-step is for compressed differences (dpsgd and gossip: --compress topk:P%, randk:P%, "
            "sign, int4; dpsgd: powergossip:R); --compress " +
                g.compress + " has none");
}

void validate_membership_output_checkpoints(const PeerConfig& cfg) {
  // Membership: each stage must leave room for the one before it.
  const auto& m = cfg.membership;
  require(m.heartbeat > Duration::zero(), "--heartbeat must be longer than 0s");
  require(m.suspect_after > m.heartbeat, "--suspect-after " + format_duration(m.suspect_after) +
                                             " must be longer than --heartbeat " +
                                             format_duration(m.heartbeat));
  require(m.dead_after > m.suspect_after, "--dead-after " + format_duration(m.dead_after) +
                                              " must be longer than --suspect-after " +
                                              format_duration(m.suspect_after));
  require(m.join_timeout > Duration::zero(), "--join-timeout must be longer than 0s");

  // Output.
  const auto& o = cfg.output;
  require(std::isfinite(o.log_every) && o.log_every > 0, "--log-every must be a number of seconds > 0");
  if (!o.http.empty()) {
    const std::size_t colon = o.http.rfind(':');
    const int port = colon == std::string::npos ? -1 : parse_port(std::string_view(o.http).substr(colon + 1));
    require(
        port >= 0 && port <= 65535,
        "--http '" + o.http + "' has no valid port: use :PORT or HOST:PORT (1..65535; 0 picks a free one)");
  }
  if (!o.ready_file.empty()) {
    const std::filesystem::path ready(o.ready_file);
    const std::filesystem::path dir = ready.parent_path().empty() ? "." : ready.parent_path();
    require(!std::filesystem::is_directory(ready),
            "--ready-file '" + o.ready_file + "' is a directory: name a file");
    require(std::filesystem::is_directory(dir),
            "--ready-file '" + o.ready_file + "': the directory '" + dir.string() + "' does not exist");
  }

  // Checkpoints.
  const auto& c = cfg.checkpoint;
  require(!c.resume || !c.dir.empty(), "--resume needs --checkpoint DIR (the directory to resume from)");
  require(c.snapshot_every == 0 || !c.dir.empty(),
          "--snapshot-every needs --checkpoint DIR (the snapshots are saved there)");
  require(c.initial_state == "pull" || c.initial_state == "own",
          "--initial-state '" + c.initial_state + "' is not one of pull, own");

  // Emulation.
  link_emulation(cfg);  // --link, --link-others, --link-peer
}

}  // namespace

void validate(const PeerConfig& cfg) {
  validate_network(cfg);
  validate_training(cfg);
  validate_gossip(cfg);
  validate_membership_output_checkpoints(cfg);
}

}  // namespace hearsay
