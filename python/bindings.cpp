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

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "peer/external_peer.hpp"

namespace py = pybind11;

namespace {

using hearsay::ExternalPeer;

std::unique_ptr<ExternalPeer> make_peer(const std::vector<std::string>& args) {
  return std::make_unique<ExternalPeer>(hearsay::parse_external_peer_settings(args));
}

void attach(ExternalPeer& peer, std::uintptr_t address, std::size_t count, const std::string& fingerprint) {
  py::gil_scoped_release release;
  peer.attach(reinterpret_cast<float*>(address), count, fingerprint);
}

}  // namespace

PYBIND11_MODULE(_hearsay, m) {
  m.doc() = "hearsay's peer for programs that train on their own (see the hearsay package)";
  m.def(
      "check_settings",
      [](const std::vector<std::string>& args) { hearsay::parse_external_peer_settings(args); },
      py::arg("args"), "Parses and validates `hearsay peer` flags; ValueError with its message otherwise.");
  py::class_<ExternalPeer>(m, "Peer")
      .def(py::init(&make_peer), py::arg("args"),
           "A peer from `hearsay peer` flags (without 'hearsay peer'); ValueError for bad ones.")
      .def("attach", &attach, py::arg("address"), py::arg("count"), py::arg("fingerprint"),
           "Takes count float32s at address (kept valid by the caller until close) as the parameters, "
           "joins the run and starts mixing.")
      .def("after_step", &ExternalPeer::after_step, py::arg("step"), py::call_guard<py::gil_scoped_release>(),
           "The after-step hook: the algorithm mixes the buffer in place.")
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
