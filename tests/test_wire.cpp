// Wire headers: round trips, forward compatibility, one crafted message per DropReason,
// and the example bytes printed in docs/PROTOCOL.md.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gossip/network/wire/header.hpp"
#include "gossip/network/wire/payload.hpp"
#include "wire_test_util.hpp"

using namespace hearsay::wire;
using hearsay::wire::testing::MapBuilder;
using hearsay::wire::testing::reason_of;

namespace {

constexpr DropReason kDecoded = DropReason::count_;

Header full_header(MessageType t) {
  Header h;
  h.run_id = "run-2024-05";
  h.fingerprint = "lenet-129068-49e7819947dd1a80";
  h.sender = "peer-17";
  h.type = t;
  h.step = 123456789012ull;
  h.weight = 0.375;
  h.dtype = Dtype::bf16;
  h.count = 1000;
  h.offset = 250;
  h.checksum = 0xfedcba9876543210ull;
  h.nonce = 0xffffffffffffffffull;
  h.address = "tcp://10.0.0.17:5555";
  h.members = {"peer-1=tcp://10.0.0.1:5555", "peer-2=ipc:///tmp/p2", ""};
  h.parts = {600, 400};
  h.session = 0x8000000000000001ull;
  h.peer_session = 0x4000000000000003ull;
  h.trained = 4321;
  h.due_ns = 987654321;
  h.why = "id 'peer-17' is taken by tcp://10.0.0.9:5555";
  return h;
}

// A params_push of `values` as f32 that passes validate() against {run-a, mlp-1}.
std::pair<Header, std::vector<std::uint8_t>> push_of(const std::vector<float>& values, Dtype d = Dtype::f32) {
  Header h;
  h.run_id = "run-a";
  h.fingerprint = "mlp-1";
  h.sender = "peer1";
  h.type = MessageType::params_push;
  h.dtype = d;
  h.count = values.size();
  std::vector<std::uint8_t> payload(*payload_bytes(d, values.size()));
  encode_values(d, values, payload);
  h.checksum = checksum(payload);
  return {h, payload};
}

const Expectation kExpect{"run-a", "mlp-1"};

}  // namespace

TEST_CASE("every message type round-trips with all fields set", "[wire]") {
  for (std::uint64_t raw = 1; raw <= 15; ++raw) {
    REQUIRE(is_known_type(raw));
    const Header h = full_header(static_cast<MessageType>(raw));
    const auto bytes = encode_header(h);
    const DecodeResult r = decode_header(bytes);
    INFO(to_string(h.type));
    REQUIRE(r.header.has_value());
    REQUIRE(*r.header == h);
    REQUIRE(encode_header(*r.header) == bytes);
  }
}

TEST_CASE("minimal headers round-trip and defaults are restored", "[wire]") {
  for (std::uint64_t raw = 1; raw <= 15; ++raw) {
    Header h;
    h.run_id = "r";
    h.fingerprint = "f";
    h.sender = "p";
    h.type = static_cast<MessageType>(raw);
    if (carries_payload(h.type)) h.dtype = Dtype::f32;
    const DecodeResult r = decode_header(encode_header(h));
    INFO(to_string(h.type));
    REQUIRE(r.header.has_value());
    REQUIRE(*r.header == h);
  }
}

TEST_CASE("weights are float 64 on the wire and round-trip exactly", "[wire]") {
  for (double w : {1.0, 2.0, -3.0, 0.1, 1e-300, 0x1p64, -0x1p70, std::numeric_limits<double>::max()}) {
    INFO(w);
    Header h;
    h.run_id = "r";
    h.fingerprint = "f";
    h.sender = "p";
    h.type = MessageType::pushsum_share;
    h.dtype = Dtype::f32;
    h.weight = w;
    const auto bytes = encode_header(h);
    // "w" (a1 77) is followed by 0xcb and the 8 big-endian bytes of the double.
    const std::vector<std::uint8_t> key = {0xa1, 0x77, 0xcb};
    REQUIRE(std::search(bytes.begin(), bytes.end(), key.begin(), key.end()) != bytes.end());
    const auto r = decode_header(bytes);
    REQUIRE(r.header.has_value());
    REQUIRE(r.header->weight == w);
  }
}

TEST_CASE("unknown keys are ignored, whatever their value", "[wire]") {
  const auto plain = decode_header(MapBuilder::ping().bytes());
  REQUIRE(plain.header.has_value());
  auto with_extras = MapBuilder::ping()
                         .set("zz_future", std::string("hello"))
                         .set("trace", std::vector<int>{1, -2, 3})
                         .set("opts", std::map<std::string, double>{{"a", 1.5}})
                         .set("blob", std::vector<char>{'x', 'y'})
                         .set("nil", msgpack::type::nil_t());
  const auto r = decode_header(with_extras.bytes());
  REQUIRE(r.header.has_value());
  REQUIRE(*r.header == *plain.header);

  // A non-string key is no key of ours either.
  auto bytes = MapBuilder::ping().bytes();
  bytes[0] += 1;          // fixmap size 5 -> 6
  bytes.push_back(0x07);  // key: positive fixint 7
  bytes.push_back(0xc3);  // value: true
  REQUIRE(reason_of(bytes) == kDecoded);
}

TEST_CASE("malformed MessagePack is bad_msgpack", "[wire]") {
  const auto good = encode_header(full_header(MessageType::params_push));
  // Every strict prefix is a truncated map.
  for (std::size_t len = 0; len < good.size(); ++len) {
    INFO(len);
    REQUIRE(reason_of({good.begin(), good.begin() + static_cast<std::ptrdiff_t>(len)}) ==
            DropReason::bad_msgpack);
  }
  auto trailing = good;
  trailing.push_back(0xc0);
  REQUIRE(reason_of(trailing) == DropReason::bad_msgpack);
  REQUIRE(reason_of({0xc1}) == DropReason::bad_msgpack);                    // never-used byte
  REQUIRE(reason_of({0x93, 0x01, 0x02, 0x03}) == DropReason::bad_msgpack);  // an array, not a map
  REQUIRE(reason_of({0x01}) == DropReason::bad_msgpack);                    // a bare integer
  REQUIRE(reason_of(MapBuilder::ping().append("run", std::string("other")).bytes()) ==
          DropReason::bad_msgpack);
  // Sizes that would make a trusting parser allocate gigabytes: map32/array32/str32 of
  // 2^32-1 entries in a 5-byte frame.
  REQUIRE(reason_of({0xdf, 0xff, 0xff, 0xff, 0xff}) == DropReason::bad_msgpack);
  REQUIRE(reason_of({0x81, 0xa1, 0x78, 0xdd, 0xff, 0xff, 0xff, 0xff}) == DropReason::bad_msgpack);
  REQUIRE(reason_of({0x81, 0xa1, 0x78, 0xdb, 0xff, 0xff, 0xff, 0xff}) == DropReason::bad_msgpack);
  // Nesting deeper than any header needs.
  std::vector<std::uint8_t> deep = {0x81, 0xa1, 0x78};
  for (int i = 0; i < 40; ++i) deep.push_back(0x91);
  deep.push_back(0x00);
  REQUIRE(reason_of(deep) == DropReason::bad_msgpack);
}

TEST_CASE("a header frame over kMaxHeaderBytes is refused before parsing", "[wire]") {
  Header h = full_header(MessageType::hello);
  h.address.assign(kMaxHeaderBytes, 'a');
  const auto bytes = encode_header(h);
  REQUIRE(bytes.size() > kMaxHeaderBytes);
  REQUIRE(reason_of(bytes) == DropReason::header_too_large);
  std::vector<std::uint8_t> garbage(kMaxHeaderBytes + 1, 0xc1);
  REQUIRE(reason_of(garbage) == DropReason::header_too_large);
}

TEST_CASE("required fields missing are missing_field", "[wire]") {
  for (const char* key : {"v", "run", "fp", "from", "type"}) {
    INFO(key);
    REQUIRE(reason_of(MapBuilder::ping().erase(key).bytes()) == DropReason::missing_field);
  }
  auto push = [] { return MapBuilder::ping().set("type", 6u).set("dtype", 1u).set("n", 4u).set("sum", 99u); };
  REQUIRE(reason_of(push().bytes()) == kDecoded);
  for (const char* key : {"dtype", "n", "sum"}) {
    INFO(key);
    REQUIRE(reason_of(push().erase(key).bytes()) == DropReason::missing_field);
  }
  REQUIRE(reason_of(push().set("type", 10u).bytes()) == DropReason::missing_field);  // chunk: off
  REQUIRE(reason_of(push().set("type", 10u).set("off", 8u).bytes()) == kDecoded);
  REQUIRE(reason_of(push().set("type", 9u).bytes()) == DropReason::missing_field);  // share: w
  REQUIRE(reason_of(push().set("type", 9u).set("w", 0.5).bytes()) == kDecoded);
  REQUIRE(reason_of(MapBuilder::ping().set("type", 1u).bytes()) == DropReason::missing_field);  // hello: addr
  REQUIRE(reason_of(MapBuilder::ping().set("type", 1u).set("addr", std::string("tcp://h:1")).bytes()) ==
          kDecoded);
  for (unsigned t : {2u, 5u}) {  // welcome, members: members
    REQUIRE(reason_of(MapBuilder::ping().set("type", t).bytes()) == DropReason::missing_field);
    REQUIRE(reason_of(MapBuilder::ping().set("type", t).set("members", std::vector<std::string>{}).bytes()) ==
            kDecoded);
  }
}

TEST_CASE("a refusal needs its reason, and is taken from another run or model", "[wire]") {
  REQUIRE(reason_of(MapBuilder::ping().set("type", 15u).bytes()) == DropReason::missing_field);
  REQUIRE(reason_of(MapBuilder::ping().set("type", 15u).set("why", std::string("id taken")).bytes()) ==
          kDecoded);
  Header refused;
  refused.run_id = "run-b";
  refused.fingerprint = "lenet-1";
  refused.sender = "seed";
  refused.type = MessageType::refused;
  refused.why = "the run uses another model";
  REQUIRE_FALSE(validate(refused, kExpect, {}, false).has_value());
  // Every other type of another run or model is still dropped.
  Header hello = refused;
  hello.type = MessageType::hello;
  hello.address = "tcp://h:1";
  REQUIRE(validate(hello, kExpect, {}, false) == DropReason::wrong_run);
  hello.run_id = kExpect.run_id;
  REQUIRE(validate(hello, kExpect, {}, false) == DropReason::wrong_fingerprint);
}

TEST_CASE("fields of the wrong type or range are bad_field_type", "[wire]") {
  const std::vector<std::pair<std::string, MapBuilder>> cases = {
      {"v as string", MapBuilder::ping().set("v", std::string("1"))},
      {"v negative", MapBuilder::ping().set("v", -1)},
      {"type negative", MapBuilder::ping().set("type", -3)},
      {"type as float", MapBuilder::ping().set_raw("type", [](auto& p) { p.pack_float(3.5f); })},
      {"run as int", MapBuilder::ping().set("run", 5u)},
      {"run too long", MapBuilder::ping().set("run", std::string(kMaxIdBytes + 1, 'r'))},
      {"fp as bin", MapBuilder::ping().set("fp", std::vector<char>{'a'})},
      {"from empty", MapBuilder::ping().set("from", std::string())},
      {"from with leading zero byte", MapBuilder::ping().set("from", std::string("\0id", 3))},
      {"step negative", MapBuilder::ping().set("step", -1)},
      {"step as float", MapBuilder::ping().set("step", 2.5)},
      {"nonce as bool", MapBuilder::ping().set("nonce", true)},
      {"n negative", MapBuilder::ping().set("n", std::int64_t{-4})},
      {"off negative", MapBuilder::ping().set("off", -8)},
      {"sum as string", MapBuilder::ping().set("sum", std::string("abc"))},
      {"w as string", MapBuilder::ping().set("w", std::string("0.5"))},
      {"dtype negative", MapBuilder::ping().set("dtype", -1)},
      {"addr as int", MapBuilder::ping().set("addr", 80u)},
      {"members not an array", MapBuilder::ping().set("members", std::string("a=b"))},
      {"members holding an int", MapBuilder::ping().set("members", std::vector<int>{1})},
      {"parts holding a negative", MapBuilder::ping().set("parts", std::vector<int>{3, -1})},
      {"too many parts", MapBuilder::ping().set("parts", std::vector<unsigned>(kMaxParts + 1, 1u))},
      {"sess as string", MapBuilder::ping().set("sess", std::string("7"))},
      {"psess negative", MapBuilder::ping().set("psess", -3)},
  };
  for (const auto& [name, builder] : cases) {
    INFO(name);
    REQUIRE(reason_of(builder.bytes()) == DropReason::bad_field_type);
  }
  // The largest values that fit are fine: only the sign and the kind are checked here.
  REQUIRE(reason_of(MapBuilder::ping().set("step", std::numeric_limits<std::uint64_t>::max()).bytes()) ==
          kDecoded);
  // Integers and float 32 are accepted for the weight.
  for (auto builder : {MapBuilder::ping().set("w", 2u), MapBuilder::ping().set("w", -2),
                       MapBuilder::ping().set("w", 0.5f)}) {
    const auto r = decode_header(builder.bytes());
    REQUIRE(r.header.has_value());
    REQUIRE(std::abs(r.header->weight) >= 0.5);
  }
}

TEST_CASE("types, versions and dtypes outside the protocol are refused", "[wire]") {
  for (std::uint64_t t : {0ull, 17ull, 255ull, 1ull << 40}) {
    INFO(t);
    REQUIRE_FALSE(is_known_type(t));
    REQUIRE(reason_of(MapBuilder::ping().set("type", t).bytes()) == DropReason::unknown_type);
  }
  for (unsigned v : {0u, 2u, 100u})
    REQUIRE(reason_of(MapBuilder::ping().set("v", v).bytes()) == DropReason::bad_version);
  // The version decides before anything else: a v2 header may use other field types.
  REQUIRE(reason_of(MapBuilder::ping().set("v", 2u).set("type", std::string("ping")).bytes()) ==
          DropReason::bad_version);
  REQUIRE(reason_of(MapBuilder::ping().set("dtype", 6u).bytes()) == DropReason::bad_dtype);
  for (double w : {std::nan(""), std::numeric_limits<double>::infinity()})
    REQUIRE(reason_of(MapBuilder::ping().set("w", w).bytes()) == DropReason::non_finite);
}

TEST_CASE("validate checks run, model, frames, dtype, sizes and checksum", "[wire]") {
  auto [h, payload] = push_of({1.0f, -2.0f, 0.5f, 3.25f});
  REQUIRE_FALSE(validate(h, kExpect, payload, true).has_value());

  REQUIRE(validate(h, {"run-b", "mlp-1"}, payload, true) == DropReason::wrong_run);
  REQUIRE(validate(h, {"run-a", "mlp-2"}, payload, true) == DropReason::wrong_fingerprint);
  REQUIRE(validate(h, kExpect, {}, false) == DropReason::bad_frame_count);

  Header ping;
  ping.run_id = "run-a";
  ping.fingerprint = "mlp-1";
  ping.sender = "peer1";
  REQUIRE_FALSE(validate(ping, kExpect, {}, false).has_value());
  REQUIRE(validate(ping, kExpect, payload, true) == DropReason::bad_frame_count);
  Header ping_f32 = ping;
  ping_f32.dtype = Dtype::f32;
  REQUIRE(validate(ping_f32, kExpect, {}, false) == DropReason::bad_dtype);
  Header ping_n = ping;
  ping_n.count = 3;
  REQUIRE(validate(ping_n, kExpect, {}, false) == DropReason::size_mismatch);

  Header no_dtype = h;
  no_dtype.dtype = Dtype::none;
  REQUIRE(validate(no_dtype, kExpect, payload, true) == DropReason::bad_dtype);

  Header short_frame = h;
  REQUIRE(validate(short_frame, kExpect, std::span(payload).first(15), true) == DropReason::size_mismatch);
  Header as_f16 = h;  // 4 f16 values are 8 bytes, not 16
  as_f16.dtype = Dtype::f16;
  REQUIRE(validate(as_f16, kExpect, payload, true) == DropReason::size_mismatch);
  Header giant = h;  // 2^62 elements announced with a 16-byte payload: refused, nothing allocated
  giant.count = 1ull << 62;
  REQUIRE(validate(giant, kExpect, payload, true) == DropReason::size_mismatch);
  giant.dtype = Dtype::int8;
  REQUIRE(validate(giant, kExpect, payload, true) == DropReason::size_mismatch);
  Header past_end = h;
  past_end.offset = kMaxElements - 2;
  REQUIRE(validate(past_end, kExpect, payload, true) == DropReason::size_mismatch);
  Header parts = h;
  parts.parts = {1, 3};
  REQUIRE_FALSE(validate(parts, kExpect, payload, true).has_value());
  parts.parts = {1, 2};
  REQUIRE(validate(parts, kExpect, payload, true) == DropReason::size_mismatch);
  parts.parts = {std::numeric_limits<std::uint64_t>::max(), 5};  // would wrap to 4
  REQUIRE(validate(parts, kExpect, payload, true) == DropReason::size_mismatch);

  for (std::size_t i = 0; i < payload.size(); ++i) {
    auto corrupted = payload;
    corrupted[i] ^= 0x01;
    REQUIRE(validate(h, kExpect, corrupted, true) == DropReason::bad_checksum);
  }
  // The checksum of an empty payload frame is XXH3-64 of zero bytes, not 0.
  auto [empty, no_bytes] = push_of({});
  REQUIRE(empty.checksum == 0x2D06800538D394C2ull);
  REQUIRE_FALSE(validate(empty, kExpect, no_bytes, true).has_value());

  REQUIRE(check_sender(h, "peer1") == std::nullopt);
  REQUIRE(check_sender(h, "peer2") == DropReason::spoofed_sender);
}

TEST_CASE("int8 payload sizes count the scales, the block lengths and their number", "[wire]") {
  // Blocks of 256 by default: n + 5 per block + 4.
  REQUIRE(payload_bytes(Dtype::int8, 0) == 4u);
  REQUIRE(payload_bytes(Dtype::int8, 1) == 10u);
  REQUIRE(payload_bytes(Dtype::int8, 256) == 265u);
  REQUIRE(payload_bytes(Dtype::int8, 257) == 271u);
  // Any number of blocks from ceil(n / 256) to n fits; nothing between.
  REQUIRE(payload_size_fits(Dtype::int8, 257, int8_payload_bytes(257, 2)));
  REQUIRE(payload_size_fits(Dtype::int8, 257, int8_payload_bytes(257, 257)));
  REQUIRE_FALSE(payload_size_fits(Dtype::int8, 257, int8_payload_bytes(257, 1)));
  REQUIRE_FALSE(payload_size_fits(Dtype::int8, 257, int8_payload_bytes(257, 258)));
  REQUIRE_FALSE(payload_size_fits(Dtype::int8, 257, int8_payload_bytes(257, 3) + 1));
  REQUIRE_FALSE(payload_size_fits(Dtype::int8, 257, 3));
  REQUIRE(payload_bytes(Dtype::f32, kMaxElements) == kMaxElements * 4);
  REQUIRE_FALSE(payload_bytes(Dtype::f32, kMaxElements + 1).has_value());
  REQUIRE(payload_bytes(Dtype::none, 0) == 0u);
  REQUIRE_FALSE(payload_bytes(Dtype::none, 1).has_value());
}

TEST_CASE("every DropReason has a name, and names are distinct", "[wire]") {
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < kDropReasonCount; ++i) {
    const auto name = to_string(static_cast<DropReason>(i));
    REQUIRE(name != "unknown");
    names.insert(name);
  }
  REQUIRE(names.size() == kDropReasonCount);
  REQUIRE(to_string(MessageType::state_reply) == "state_reply");
  REQUIRE(to_string(Dtype::bf16) == "bf16");
}

TEST_CASE("headers stay small", "[wire]") {
  // Per-message overhead matters for small chunks; the encode+decode time is printed by
  // bench/bench_wire.
  Header h = full_header(MessageType::params_push);  // a typical push: no extras
  h.weight = 1.0;
  h.offset = 0;
  h.nonce = 0;
  h.address.clear();
  h.members.clear();
  h.parts.clear();
  h.why.clear();
  h.session = 0;       // push-sum only
  h.peer_session = 0;  // push-sum only
  h.due_ns = 0;        // link emulation only
  REQUIRE(encode_header(h).size() <= 128);
  Header ping;
  ping.run_id = "run-2024-05";
  ping.fingerprint = "lenet-129068-49e7819947dd1a80";
  ping.sender = "peer-17";
  REQUIRE(encode_header(ping).size() <= 80);
}

// ---- The examples in docs/PROTOCOL.md ----

namespace {

// The bytes of the hex dump that follows `<!-- bytes: NAME -->` in PROTOCOL.md: lines
// "OFFSET: XX XX ...", in a fenced block.
std::vector<std::uint8_t> documented_bytes(const std::string& name) {
  std::ifstream in(std::string(HEARSAY_SOURCE_DIR) + "/docs/PROTOCOL.md");
  REQUIRE(in.good());
  std::string line;
  const std::string marker = "<!-- bytes: " + name + " -->";
  while (std::getline(in, line) && line.find(marker) == std::string::npos) {
  }
  REQUIRE(line.find(marker) != std::string::npos);
  std::vector<std::uint8_t> bytes;
  bool in_block = false;
  while (std::getline(in, line)) {
    if (line.rfind("```", 0) == 0) {
      if (in_block) break;
      in_block = true;
      continue;
    }
    if (!in_block) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::string word;
    while (words >> word) bytes.push_back(static_cast<std::uint8_t>(std::stoul(word, nullptr, 16)));
  }
  return bytes;
}

}  // namespace

TEST_CASE("the encoder produces the bytes documented in PROTOCOL.md", "[wire]") {
  Header ping;
  ping.run_id = "run-1";
  ping.fingerprint = "mlp-235146-5f0c3a9e12b47d68";
  ping.sender = "peer0";
  ping.type = MessageType::ping;
  ping.step = 42;
  ping.nonce = 7;
  REQUIRE(encode_header(ping) == documented_bytes("ping-header"));
  REQUIRE(decode_header(documented_bytes("ping-header")).header == ping);

  const std::vector<float> values = {1.0f, -2.0f, 0.5f, 3.25f};
  Header push = ping;
  push.type = MessageType::params_push;
  push.step = 100;
  push.nonce = 0;
  push.dtype = Dtype::f32;
  push.count = values.size();
  std::vector<std::uint8_t> payload(16);
  encode_values(Dtype::f32, values, payload);
  push.checksum = checksum(payload);
  REQUIRE(payload == documented_bytes("params-push-payload"));
  REQUIRE(encode_header(push) == documented_bytes("params-push-header"));
  const auto decoded = decode_header(documented_bytes("params-push-header"));
  REQUIRE(decoded.header == push);
  REQUIRE_FALSE(validate(push, {"run-1", "mlp-235146-5f0c3a9e12b47d68"}, payload, true).has_value());
}
