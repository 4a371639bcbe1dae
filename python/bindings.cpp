// _hearsay: the C++ side of the `hearsay` Python module (python/hearsay/__init__.py is
// its face). One class, Peer, over peer/external_peer.hpp: settings as `hearsay peer`'s
// flags, a flat float32 buffer of the caller's given by address, the after-step hook.
//
// Errors keep hearsay's one-line messages: std::invalid_argument (bad settings) becomes
// ValueError, every other std::exception RuntimeError (pybind11's own translation). Every
// call that blocks (joining, mixing, closing) releases the GIL, so that other Python
// threads (a data loader) run meanwhile.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/data/epoch_order.hpp"
#include "model/data/partition.hpp"
#include "peer/external_peer.hpp"
#include "peer/model_layout.hpp"

namespace py = pybind11;

namespace {

using hearsay::ExternalPeer;

std::unique_ptr<ExternalPeer> make_peer(const std::vector<std::string>& args) {
  return std::make_unique<ExternalPeer>(hearsay::parse_external_peer_settings(args));
}

// names and shapes: the caller's tensors in its buffer's order (model_layout.hpp).
void attach(ExternalPeer& peer, std::uintptr_t address, const std::vector<std::string>& names,
            const std::vector<std::vector<std::int64_t>>& shapes, std::int64_t shard_examples,
            std::int64_t train_examples) {
  if (names.size() != shapes.size()) throw std::invalid_argument("attach: a shape for every name");
  ExternalPeer::CallerModel model;
  for (std::size_t i = 0; i < names.size(); ++i) model.layout.push_back({names[i], shapes[i]});
  model.shard_examples = shard_examples;
  model.train_examples = train_examples;
  py::gil_scoped_release release;
  peer.attach(reinterpret_cast<float*>(address), model);
}

// The settings a training script takes from `hearsay peer` flags, as Python values.
py::dict settings_of(const hearsay::PeerConfig& c) {
  const auto& t = c.train;
  py::dict d;
  d["rank"] = c.network.rank;
  d["world"] = c.network.world;
  d["algo"] = c.mixing.algo;
  d["model"] = t.model;
  d["batch"] = t.batch;
  d["epochs"] = t.epochs;
  d["lr"] = t.lr;
  d["lr_schedule"] = t.lr_schedule;
  d["momentum"] = t.momentum;
  d["weight_decay"] = t.weight_decay;
  d["nesterov"] = t.nesterov;
  d["optimizer"] = t.optimizer;
  d["seed"] = t.seed;
  d["init_seed"] = t.init_seed ? py::cast(*t.init_seed) : py::none();
  d["data"] = t.data;
  d["partition"] = t.partition;
  d["device"] = t.device;
  d["budget"] = c.budget.kind;
  return d;
}

// A peer's settings, with the seed a native peer of its id shuffles its shard with.
py::dict settings(const ExternalPeer& peer) {
  py::dict d = settings_of(peer.config());
  d["data_seed"] = hearsay::data_order_seed(peer.config().train.seed, peer.id());
  return d;
}

std::vector<std::int64_t> shard(const std::vector<int>& labels, int rank, int world,
                                const std::string& partition, std::uint64_t seed) {
  hearsay::Dataset d;
  d.count = static_cast<std::int64_t>(labels.size());
  d.labels.reserve(labels.size());
  int classes = 0;
  for (const int l : labels) {
    if (l < 0 || l > 255) throw std::invalid_argument("shard: labels must be class numbers 0..255");
    d.labels.push_back(static_cast<std::uint8_t>(l));
    classes = std::max(classes, l + 1);
  }
  d.classes = classes;
  return hearsay::shard_indices(d, hearsay::ShardSpec{rank, world}, hearsay::parse_partition(partition),
                                seed);
}

}  // namespace

PYBIND11_MODULE(_hearsay, m) {
  m.doc() = "hearsay's peer for programs that train on their own (see the hearsay package)";
  m.def(
      "check_settings",
      [](const std::vector<std::string>& args) { hearsay::parse_external_peer_settings(args); },
      py::arg("args"), "Parses and validates `hearsay peer` flags; ValueError with its message otherwise.");
  m.def(
      "settings_of",
      [](const std::vector<std::string>& args) {
        return settings_of(hearsay::parse_external_peer_settings(args));
      },
      py::arg("args"),
      "The settings of `hearsay peer` flags (as Peer.settings, without data_seed); ValueError for bad ones.");
  m.def("shard", &shard, py::arg("labels"), py::arg("rank"), py::arg("world"), py::arg("partition"),
        py::arg("seed"),
        "The indices of a rank's shard of a labelled training set, as a native peer takes it.");
  m.def(
      "layout_fingerprint",
      [](const std::vector<std::string>& names, const std::vector<std::vector<std::int64_t>>& shapes) {
        hearsay::ModelLayout layout;
        for (std::size_t i = 0; i < names.size() && i < shapes.size(); ++i)
          layout.push_back({names[i], shapes[i]});
        return hearsay::layout_fingerprint(layout);
      },
      py::arg("names"), py::arg("shapes"), "The fingerprint the run knows a model of these tensors by.");
  py::class_<ExternalPeer>(m, "Peer")
      .def(py::init(&make_peer), py::arg("args"),
           "A peer from `hearsay peer` flags (without 'hearsay peer'); ValueError for bad ones.")
      .def(
          "attach", &attach, py::arg("address"), py::arg("names"), py::arg("shapes"),
          py::arg("shard_examples"), py::arg("train_examples"),
          "Takes the float32s at address (the tensors names/shapes, in order; kept valid by the caller until "
          "close) as the parameters, joins the run and starts mixing.")
      .def("after_step", &hearsay::ExternalPeer::after_step, py::arg("step"), py::arg("loss") = py::none(),
           py::call_guard<py::gil_scoped_release>(),
           "The after-step hook: the algorithm mixes the buffer in place. False once the run's budget is "
           "spent.")
      .def("request_stop", &hearsay::ExternalPeer::request_stop,
           "Ends the run at the next step, as SIGTERM ends a native peer's.")
      .def("learning_rate", &hearsay::ExternalPeer::learning_rate, py::arg("step"),
           "The schedule's rate for the step after `step` steps.")
      .def_property_readonly("steps_per_epoch", &hearsay::ExternalPeer::steps_per_epoch)
      .def_property_readonly("start_step", &hearsay::ExternalPeer::start_step)
      .def_property_readonly("fingerprint", &hearsay::ExternalPeer::fingerprint)
      .def_property_readonly("settings", &settings)
      .def("close", &ExternalPeer::close, py::call_guard<py::gil_scoped_release>(),
           "Flushes the last round, stops mixing, says bye. Idempotent.")
      .def_property_readonly("id", &ExternalPeer::id)
      .def_property_readonly("address", &ExternalPeer::address)
      .def_property_readonly("attached", &ExternalPeer::attached)
      .def_property_readonly("closed", &ExternalPeer::closed)
      .def_property_readonly("live_members", &ExternalPeer::live_members)
      .def("totals", [](const ExternalPeer& p) {
        const auto t = p.totals();
        py::dict d;
        d["exchanges_ok"] = t.exchanges.ok;
        d["exchanges_timed_out"] = t.exchanges.timed_out;
        d["bytes_sent"] = t.exchanges.bytes_sent;
        d["bytes_received"] = t.exchanges.bytes_received;
        d["rounds"] = t.rounds;
        return d;
      });
}
