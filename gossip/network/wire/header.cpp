#include "gossip/network/wire/header.hpp"

#include <xxhash.h>
#if defined(__x86_64__)
#define XXH_DISPATCH_DISABLE_REPLACE
#include <xxh_x86dispatch.h>
#endif

#include <bit>
#include <cmath>
#include <cstring>
#include <msgpack.hpp>
#include <new>
#include <stdexcept>

namespace hearsay::wire {
namespace {

// Header keys, in the order the encoder writes them. docs/PROTOCOL.md lists the same.
enum class Field : std::uint8_t {
  version,
  run,
  fingerprint,
  sender,
  type,
  step,
  nonce,
  weight,
  dtype,
  count,
  offset,
  checksum,
  address,
  members,
  parts,
  session,
  peer_session,
  trained,
  due,
  why,
  base,
  count_
};
constexpr std::size_t kFieldCount = static_cast<std::size_t>(Field::count_);
constexpr std::array<std::string_view, kFieldCount> kKeys = {
    "v",   "run",  "fp",      "from",  "type", "step",  "nonce", "w",   "dtype", "n",   "off",
    "sum", "addr", "members", "parts", "sess", "psess", "done",  "due", "why",   "base"};

// Upper bounds handed to the MessagePack parser. It allocates an array's or map's slots
// when it reads the size, before the elements, so these (with the depth) bound what a
// hostile frame can make it allocate: about 16 bytes per frame byte plus
// depth x (kMaxArray x 16 B), a few hundred KiB in all.
constexpr std::size_t kMaxArray = 4096;  // members entries (and any unknown array)
constexpr std::size_t kMaxMap = 64;      // header keys, known and unknown
constexpr std::size_t kMaxDepth = 4;     // header map, members array, room for future nesting

// Types whose payload layout depends on one of these fields make it required.
bool needs_offset(MessageType t) { return t == MessageType::allreduce_chunk; }
bool needs_weight(MessageType t) { return t == MessageType::pushsum_share; }
bool needs_address(MessageType t) { return t == MessageType::hello; }
bool needs_members(MessageType t) { return t == MessageType::welcome || t == MessageType::members; }
bool needs_why(MessageType t) { return t == MessageType::refused; }
constexpr std::size_t kMaxWhyBytes = 1024;

// Appends to a byte vector; the Stream concept msgpack::packer writes into.
struct ByteSink {
  std::vector<std::uint8_t>& bytes;
  void write(const char* data, std::size_t size) {
    bytes.insert(bytes.end(), reinterpret_cast<const std::uint8_t*>(data),
                 reinterpret_cast<const std::uint8_t*>(data) + size);
  }
};

// Always a MessagePack float 64 (0xcb + 8 bytes big-endian). msgpack-c's pack_double
// would turn integral values into integers (and cast values >= 2^64 with undefined
// behaviour); the protocol documents w as float 64.
void write_float64(ByteSink& sink, double value) {
  const auto bits = std::bit_cast<std::uint64_t>(value);
  char bytes[9];
  bytes[0] = static_cast<char>(0xcb);
  for (int i = 0; i < 8; ++i) bytes[1 + i] = static_cast<char>(bits >> (56 - 8 * i));
  sink.write(bytes, sizeof bytes);
}

// Strings, bins and exts stay in the frame instead of being copied into the zone: the
// frame outlives the parsed object, and copying would cost an allocation per field.
bool reference_frame(msgpack::type::object_type, std::size_t, void*) { return true; }

class FieldError {
 public:
  explicit FieldError(DropReason r) : reason(r) {}
  DropReason reason;
};

std::uint64_t read_uint(const msgpack::object& o) {
  // A non-negative integer in any MessagePack width. Negative ints and floats are wrong.
  if (o.type != msgpack::type::POSITIVE_INTEGER) throw FieldError(DropReason::bad_field_type);
  return o.via.u64;
}

std::string_view read_str(const msgpack::object& o, std::size_t max_bytes) {
  if (o.type != msgpack::type::STR || o.via.str.size > max_bytes)
    throw FieldError(DropReason::bad_field_type);
  return {o.via.str.ptr, o.via.str.size};
}

double read_number(const msgpack::object& o) {
  // A float 64 normally; float 32 and integers are accepted from other encoders.
  double value = 0.0;
  switch (o.type) {
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      value = o.via.f64;
      break;
    case msgpack::type::POSITIVE_INTEGER:
      value = static_cast<double>(o.via.u64);
      break;
    case msgpack::type::NEGATIVE_INTEGER:
      value = static_cast<double>(o.via.i64);
      break;
    default:
      throw FieldError(DropReason::bad_field_type);
  }
  if (!std::isfinite(value)) throw FieldError(DropReason::non_finite);
  return value;
}

std::span<const msgpack::object> read_array(const msgpack::object& o) {
  if (o.type != msgpack::type::ARRAY) throw FieldError(DropReason::bad_field_type);
  return {o.via.array.ptr, o.via.array.size};
}

std::optional<Field> field_of(const msgpack::object& key) {
  if (key.type != msgpack::type::STR) return std::nullopt;
  const std::string_view name(key.via.str.ptr, key.via.str.size);
  for (std::size_t i = 0; i < kFieldCount; ++i)
    if (kKeys[i] == name) return static_cast<Field>(i);
  return std::nullopt;
}

// Fills h from the map's known fields. Throws FieldError with the first failure, in the
// order version, type, then the fields in key order.
void read_fields(const std::array<const msgpack::object*, kFieldCount>& at, Header& h) {
  auto get = [&](Field f) { return at[static_cast<std::size_t>(f)]; };
  auto require = [&](Field f) {
    if (get(f) == nullptr) throw FieldError(DropReason::missing_field);
    return get(f);
  };

  // The version first: a later version may give the other keys other meanings.
  const std::uint64_t version = read_uint(*require(Field::version));
  if (version != kProtocolVersion) throw FieldError(DropReason::bad_version);
  h.version = static_cast<std::uint32_t>(version);

  const std::uint64_t raw_type = read_uint(*require(Field::type));
  if (!is_known_type(raw_type)) throw FieldError(DropReason::unknown_type);
  h.type = static_cast<MessageType>(raw_type);
  const bool payload = carries_payload(h.type);

  h.run_id = read_str(*require(Field::run), kMaxIdBytes);
  h.fingerprint = read_str(*require(Field::fingerprint), kMaxIdBytes);
  const std::string_view sender = read_str(*require(Field::sender), kMaxIdBytes);
  // ZeroMQ reserves routing ids that start with a zero byte; an empty one is no id.
  if (sender.empty() || sender.front() == '\0') throw FieldError(DropReason::bad_field_type);
  h.sender = sender;

  if (auto* o = get(Field::step)) h.step = read_uint(*o);
  if (auto* o = get(Field::nonce)) h.nonce = read_uint(*o);
  if (auto* o = needs_weight(h.type) ? require(Field::weight) : get(Field::weight))
    h.weight = read_number(*o);
  if (auto* o = payload ? require(Field::dtype) : get(Field::dtype)) {
    const std::uint64_t d = read_uint(*o);
    if (d > static_cast<std::uint64_t>(Dtype::compressed)) throw FieldError(DropReason::bad_dtype);
    h.dtype = static_cast<Dtype>(d);
  }
  if (auto* o = payload ? require(Field::count) : get(Field::count)) h.count = read_uint(*o);
  if (auto* o = needs_offset(h.type) ? require(Field::offset) : get(Field::offset)) h.offset = read_uint(*o);
  if (auto* o = payload ? require(Field::checksum) : get(Field::checksum)) h.checksum = read_uint(*o);
  if (auto* o = needs_address(h.type) ? require(Field::address) : get(Field::address))
    h.address = read_str(*o, kMaxHeaderBytes);
  if (auto* o = needs_members(h.type) ? require(Field::members) : get(Field::members)) {
    const auto entries = read_array(*o);
    h.members.reserve(entries.size());
    for (const auto& entry : entries) h.members.emplace_back(read_str(entry, kMaxHeaderBytes));
  }
  if (auto* o = get(Field::parts)) {
    const auto entries = read_array(*o);
    if (entries.size() > kMaxParts) throw FieldError(DropReason::bad_field_type);
    h.parts.reserve(entries.size());
    for (const auto& entry : entries) h.parts.push_back(read_uint(entry));
  }
  if (auto* o = get(Field::session)) h.session = read_uint(*o);
  if (auto* o = get(Field::peer_session)) h.peer_session = read_uint(*o);
  if (auto* o = get(Field::trained)) h.trained = read_uint(*o);
  if (auto* o = get(Field::due)) h.due_ns = read_uint(*o);
  if (auto* o = needs_why(h.type) ? require(Field::why) : get(Field::why)) h.why = read_str(*o, kMaxWhyBytes);
  if (auto* o = get(Field::base)) h.base = read_uint(*o);
}

}  // namespace

std::string_view to_string(MessageType t) {
  switch (t) {
    case MessageType::hello:
      return "hello";
    case MessageType::welcome:
      return "welcome";
    case MessageType::ping:
      return "ping";
    case MessageType::pong:
      return "pong";
    case MessageType::members:
      return "members";
    case MessageType::params_push:
      return "params_push";
    case MessageType::params_pull:
      return "params_pull";
    case MessageType::params_reply:
      return "params_reply";
    case MessageType::pushsum_share:
      return "pushsum_share";
    case MessageType::allreduce_chunk:
      return "allreduce_chunk";
    case MessageType::state_request:
      return "state_request";
    case MessageType::state_reply:
      return "state_reply";
    case MessageType::bye:
      return "bye";
    case MessageType::pushsum_ack:
      return "pushsum_ack";
    case MessageType::refused:
      return "refused";
    case MessageType::copy_resync:
      return "copy_resync";
  }
  return "unknown";
}

std::optional<Dtype> parse_value_dtype(std::string_view name) {
  for (Dtype d : {Dtype::f32, Dtype::f16, Dtype::bf16, Dtype::int8})
    if (name == to_string(d)) return d;
  return std::nullopt;
}

bool is_known_type(std::uint64_t raw) {
  return raw >= static_cast<std::uint64_t>(MessageType::hello) &&
         raw <= static_cast<std::uint64_t>(MessageType::copy_resync);
}

bool carries_payload(MessageType t) {
  switch (t) {
    case MessageType::params_push:
    case MessageType::params_reply:
    case MessageType::pushsum_share:
    case MessageType::allreduce_chunk:
    case MessageType::state_reply:
      return true;
    default:
      return false;
  }
}

std::string_view to_string(Dtype d) {
  switch (d) {
    case Dtype::none:
      return "none";
    case Dtype::f32:
      return "f32";
    case Dtype::f16:
      return "f16";
    case Dtype::bf16:
      return "bf16";
    case Dtype::int8:
      return "int8";
    case Dtype::compressed:
      return "compressed";
  }
  return "unknown";
}

std::optional<std::uint64_t> payload_bytes(Dtype d, std::uint64_t count) {
  if (count > kMaxElements) return std::nullopt;
  switch (d) {
    case Dtype::none:
      return count == 0 ? std::optional<std::uint64_t>(0) : std::nullopt;
    case Dtype::f32:
      return count * 4;
    case Dtype::f16:
    case Dtype::bf16:
      return count * 2;
    case Dtype::int8:
      return int8_payload_bytes(count, (count + kInt8Chunk - 1) / kInt8Chunk);
    case Dtype::compressed:
      return std::nullopt;
  }
  return std::nullopt;
}

bool payload_size_fits(Dtype d, std::uint64_t count, std::uint64_t size) {
  if (d == Dtype::compressed)
    return count >= 1 && count <= kMaxElements && size >= kCompressedMinBytes &&
           size <= compressed_max_bytes(count);
  if (d == Dtype::int8) {
    if (count > kMaxElements || size < int8_payload_bytes(count, 0)) return false;
    const std::uint64_t rest = size - int8_payload_bytes(count, 0);
    const std::uint64_t blocks = rest / 5;
    return rest % 5 == 0 && blocks >= (count + kInt8Chunk - 1) / kInt8Chunk && blocks <= count;
  }
  const auto bytes = payload_bytes(d, count);
  return bytes && *bytes == size;
}

std::string_view to_string(DropReason r) {
  switch (r) {
    case DropReason::bad_frame_count:
      return "bad_frame_count";
    case DropReason::header_too_large:
      return "header_too_large";
    case DropReason::bad_msgpack:
      return "bad_msgpack";
    case DropReason::missing_field:
      return "missing_field";
    case DropReason::bad_field_type:
      return "bad_field_type";
    case DropReason::unknown_type:
      return "unknown_type";
    case DropReason::bad_version:
      return "bad_version";
    case DropReason::wrong_run:
      return "wrong_run";
    case DropReason::wrong_fingerprint:
      return "wrong_fingerprint";
    case DropReason::bad_dtype:
      return "bad_dtype";
    case DropReason::size_mismatch:
      return "size_mismatch";
    case DropReason::bad_checksum:
      return "bad_checksum";
    case DropReason::non_finite:
      return "non_finite";
    case DropReason::spoofed_sender:
      return "spoofed_sender";
    case DropReason::count_:
      break;
  }
  return "unknown";
}

namespace {

// A field is written when the type requires it or when it differs from its default,
// so the same Header always encodes to the same bytes.
std::array<bool, kFieldCount> fields_to_write(const Header& h) {
  const bool payload = carries_payload(h.type);
  std::array<bool, kFieldCount> write{};
  auto set = [&](Field f, bool on) { write[static_cast<std::size_t>(f)] = on; };
  for (Field f : {Field::version, Field::run, Field::fingerprint, Field::sender, Field::type}) set(f, true);
  set(Field::step, h.step != 0);
  set(Field::nonce, h.nonce != 0);
  set(Field::weight, needs_weight(h.type) || h.weight != 1.0);
  set(Field::dtype, payload || h.dtype != Dtype::none);
  set(Field::count, payload || h.count != 0);
  set(Field::offset, needs_offset(h.type) || h.offset != 0);
  set(Field::checksum, payload || h.checksum != 0);
  set(Field::address, needs_address(h.type) || !h.address.empty());
  set(Field::members, needs_members(h.type) || !h.members.empty());
  set(Field::parts, !h.parts.empty());
  set(Field::session, h.session != 0);
  set(Field::peer_session, h.peer_session != 0);
  set(Field::trained, h.trained != 0);
  set(Field::due, h.due_ns != 0);
  set(Field::why, needs_why(h.type) || !h.why.empty());
  set(Field::base, h.base != 0);
  return write;
}

void pack_str(msgpack::packer<ByteSink>& pack, std::string_view s) {
  pack.pack_str(static_cast<std::uint32_t>(s.size()));
  pack.pack_str_body(s.data(), static_cast<std::uint32_t>(s.size()));
}

// Field f's key and value.
void pack_field(msgpack::packer<ByteSink>& pack, ByteSink& sink, Field f, const Header& h) {
  pack_str(pack, kKeys[static_cast<std::size_t>(f)]);
  switch (f) {
    case Field::version:
      pack.pack_uint32(h.version);
      break;
    case Field::run:
      pack_str(pack, h.run_id);
      break;
    case Field::fingerprint:
      pack_str(pack, h.fingerprint);
      break;
    case Field::sender:
      pack_str(pack, h.sender);
      break;
    case Field::type:
      pack.pack_uint8(static_cast<std::uint8_t>(h.type));
      break;
    case Field::step:
      pack.pack_uint64(h.step);
      break;
    case Field::nonce:
      pack.pack_uint64(h.nonce);
      break;
    case Field::weight:
      write_float64(sink, h.weight);
      break;
    case Field::dtype:
      pack.pack_uint8(static_cast<std::uint8_t>(h.dtype));
      break;
    case Field::count:
      pack.pack_uint64(h.count);
      break;
    case Field::offset:
      pack.pack_uint64(h.offset);
      break;
    case Field::checksum:
      pack.pack_uint64(h.checksum);
      break;
    case Field::address:
      pack_str(pack, h.address);
      break;
    case Field::why:
      pack_str(pack, h.why);
      break;
    case Field::members:
      pack.pack_array(static_cast<std::uint32_t>(h.members.size()));
      for (const auto& m : h.members) pack_str(pack, m);
      break;
    case Field::parts:
      pack.pack_array(static_cast<std::uint32_t>(h.parts.size()));
      for (std::uint64_t p : h.parts) pack.pack_uint64(p);
      break;
    case Field::session:
      pack.pack_uint64(h.session);
      break;
    case Field::peer_session:
      pack.pack_uint64(h.peer_session);
      break;
    case Field::trained:
      pack.pack_uint64(h.trained);
      break;
    case Field::due:
      pack.pack_uint64(h.due_ns);
      break;
    case Field::base:
      pack.pack_uint64(h.base);
      break;
    case Field::count_:
      break;
  }
}

// The map of the fields to write, in field order.
void pack_fields(ByteSink& sink, const Header& h) {
  const std::array<bool, kFieldCount> write = fields_to_write(h);
  std::uint32_t fields = 0;
  for (bool on : write) fields += on ? 1 : 0;
  msgpack::packer<ByteSink> pack(sink);
  pack.pack_map(fields);
  for (std::size_t i = 0; i < kFieldCount; ++i)
    if (write[i]) pack_field(pack, sink, static_cast<Field>(i), h);
}

}  // namespace

std::vector<std::uint8_t> encode_header(const Header& h) {
  std::vector<std::uint8_t> bytes;
  bytes.reserve(96 + h.run_id.size() + h.fingerprint.size() + h.sender.size() + h.address.size());
  ByteSink sink{bytes};
  pack_fields(sink, h);
  return bytes;
}

DecodeResult decode_header(std::span<const std::uint8_t> frame) {
  if (frame.size() > kMaxHeaderBytes) return {std::nullopt, DropReason::header_too_large};
  if (frame.empty()) return {std::nullopt, DropReason::bad_msgpack};
  try {
    const msgpack::unpack_limit limit(kMaxArray, kMaxMap, kMaxHeaderBytes, kMaxHeaderBytes, kMaxHeaderBytes,
                                      kMaxDepth);
    std::size_t offset = 0;
    bool referenced = false;
    const msgpack::object_handle handle =
        msgpack::unpack(reinterpret_cast<const char*>(frame.data()), frame.size(), offset, referenced,
                        reference_frame, nullptr, limit);
    // Exactly one map and nothing after it: trailing bytes would be a second object that
    // some decoders read and others ignore.
    if (offset != frame.size()) return {std::nullopt, DropReason::bad_msgpack};
    const msgpack::object& root = handle.get();
    if (root.type != msgpack::type::MAP) return {std::nullopt, DropReason::bad_msgpack};

    std::array<const msgpack::object*, kFieldCount> at{};
    for (const msgpack::object_kv& kv : std::span(root.via.map.ptr, root.via.map.size)) {
      const auto field = field_of(kv.key);
      if (!field) continue;  // unknown keys: a later minor addition, ignored
      auto& slot = at[static_cast<std::size_t>(*field)];
      // A repeated key means different decoders would see different headers.
      if (slot != nullptr) return {std::nullopt, DropReason::bad_msgpack};
      slot = &kv.val;
    }
    Header h;
    read_fields(at, h);
    return {std::move(h), DropReason{}};
  } catch (const FieldError& e) {
    return {std::nullopt, e.reason};
  } catch (const msgpack::unpack_error&) {
    return {std::nullopt, DropReason::bad_msgpack};
  } catch (const msgpack::type_error&) {
    return {std::nullopt, DropReason::bad_msgpack};
  }
}

std::optional<DropReason> validate(const Header& h, const Expectation& expect,
                                   std::span<const std::uint8_t> payload, bool has_payload_frame,
                                   bool verify_checksum) {
  // A refusal tells a joiner of another run or model so: it is taken from them (it carries
  // no payload, only the refuser's run, fingerprint and words).
  if (h.type != MessageType::refused) {
    if (h.run_id != expect.run_id) return DropReason::wrong_run;
    if (h.fingerprint != expect.fingerprint) return DropReason::wrong_fingerprint;
  }
  const bool payload_type = carries_payload(h.type);
  if (has_payload_frame != payload_type) return DropReason::bad_frame_count;
  if (!payload_type) {
    // Types without a payload announce none.
    if (h.dtype != Dtype::none) return DropReason::bad_dtype;
    if (h.count != 0 || h.offset != 0 || !h.parts.empty()) return DropReason::size_mismatch;
    return std::nullopt;
  }
  if (h.dtype == Dtype::none ||
      static_cast<std::uint8_t>(h.dtype) > static_cast<std::uint8_t>(Dtype::compressed))
    return DropReason::bad_dtype;
  if (!payload_size_fits(h.dtype, h.count, payload.size())) return DropReason::size_mismatch;
  if (h.offset > kMaxElements - h.count) return DropReason::size_mismatch;
  if (!h.parts.empty()) {
    std::uint64_t sum = 0;
    for (std::uint64_t p : h.parts) {
      if (p > h.count - sum) return DropReason::size_mismatch;
      sum += p;
    }
    if (sum != h.count) return DropReason::size_mismatch;
  }
  if (verify_checksum && checksum(payload) != h.checksum) return DropReason::bad_checksum;
  return std::nullopt;
}

std::optional<DropReason> check_sender(const Header& h, std::string_view routing_id) {
  if (h.sender != routing_id) return DropReason::spoofed_sender;
  return std::nullopt;
}

std::uint64_t checksum(std::span<const std::uint8_t> bytes) {
#if defined(__x86_64__)
  // libxxhash's run-time dispatch picks its AVX2/AVX-512 loop where the CPU has one; the
  // plain entry point is built for baseline x86-64 (SSE2), about half the speed. Same hash.
  return XXH3_64bits_dispatch(bytes.data(), bytes.size());
#else
  return XXH3_64bits(bytes.data(), bytes.size());
#endif
}

}  // namespace hearsay::wire
