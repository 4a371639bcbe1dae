// Helpers shared by the wire tests: a MessagePack map builder that can write what
// encode_header never would (wrong types, missing keys, unknown keys), and a parser for
// the hex dumps in docs/PROTOCOL.md.
#pragma once
#include <cstdint>
#include <functional>
#include <msgpack.hpp>
#include <string>
#include <utility>
#include <vector>

#include "gossip/network/wire/header.hpp"

namespace hearsay::wire::testing {

class MapBuilder {
 public:
  using Packer = msgpack::packer<msgpack::sbuffer>;
  using Writer = std::function<void(Packer&)>;

  // A well-formed ping: v, run, fp, from, type.
  static MapBuilder ping(std::string run = "run-a", std::string fp = "mlp-1") {
    MapBuilder b;
    b.set("v", 1u).set("run", run).set("fp", fp).set("from", std::string("peer1")).set("type", 3u);
    return b;
  }

  // Sets (or replaces, keeping its position) key to a value msgpack-c can pack.
  template <class T>
  MapBuilder& set(const std::string& key, T value) {
    return set_raw(key, [value](Packer& p) { p.pack(value); });
  }
  MapBuilder& set_raw(const std::string& key, Writer w) {
    for (auto& [k, writer] : fields_)
      if (k == key) {
        writer = std::move(w);
        return *this;
      }
    fields_.emplace_back(key, std::move(w));
    return *this;
  }
  MapBuilder& erase(const std::string& key) {
    std::erase_if(fields_, [&](const auto& f) { return f.first == key; });
    return *this;
  }
  // Appends a second entry for key even if one exists (duplicate keys).
  template <class T>
  MapBuilder& append(const std::string& key, T value) {
    fields_.emplace_back(key, [value](Packer& p) { p.pack(value); });
    return *this;
  }

  std::vector<std::uint8_t> bytes() const {
    msgpack::sbuffer buffer;
    Packer p(buffer);
    p.pack_map(static_cast<std::uint32_t>(fields_.size()));
    for (const auto& [key, writer] : fields_) {
      p.pack(key);
      writer(p);
    }
    return {reinterpret_cast<const std::uint8_t*>(buffer.data()),
            reinterpret_cast<const std::uint8_t*>(buffer.data()) + buffer.size()};
  }

 private:
  std::vector<std::pair<std::string, Writer>> fields_;
};

inline DropReason reason_of(const std::vector<std::uint8_t>& frame) {
  const DecodeResult r = decode_header(frame);
  return r.header ? DropReason::count_ : r.reason;  // count_: "decoded fine"
}

}  // namespace hearsay::wire::testing
