// The wire format's frame 1: a MessagePack map header, and the payload rules that tie
// it to frame 2. docs/PROTOCOL.md is the normative description; this file is its code.
//
// Decoding never trusts the sender: every field is type-checked, every announced size
// is checked against the bytes actually received, and a message that fails any check
// is dropped with a DropReason (counted by the receiver), never turned into a crash or
// an allocation sized by the sender.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hearsay::wire {

inline constexpr std::uint32_t kProtocolVersion = 1;
// Largest header frame a receiver accepts; anything longer is dropped undecoded.
inline constexpr std::size_t kMaxHeaderBytes = 64 * 1024;
// Largest element count any message may announce (2^31 - 1 elements: 8 GiB of f32).
inline constexpr std::uint64_t kMaxElements = (1ull << 31) - 1;
// Longest run id, fingerprint and sender id (a ZeroMQ routing id is at most 255 bytes).
inline constexpr std::size_t kMaxIdBytes = 255;
// Most entries in Header::parts.
inline constexpr std::size_t kMaxParts = 16;

enum class MessageType : std::uint8_t {
  hello = 1,    // joiner -> member: "I am <sender>, reachable at <address>"
  welcome = 2,  // member -> joiner: accepted; members list attached
  ping = 3,
  pong = 4,
  members = 5,           // current membership view
  params_push = 6,       // unsolicited parameters (gossip push, D-PSGD neighbour send)
  params_pull = 7,       // request for parameters (no payload)
  params_reply = 8,      // answer to params_pull (payload)
  pushsum_share = 9,     // push-sum share: payload = weighted params, weight field = share
  allreduce_chunk = 10,  // ring all-reduce chunk: offset + payload
  state_request = 11,    // a joining peer asks for the full training state
  state_reply = 12,      // parameters + optimizer state for a joiner
  bye = 13,              // leaving cleanly
  pushsum_ack = 14,      // push-sum share received: nonce = the share's sequence number (no payload)
  refused = 15,          // member -> joiner: the hello is refused, `why` says why (PROTOCOL.md 4.4)
  copy_resync = 16,      // CHOCO: "my copy of your public copy is stale; send it whole" (no payload)
};
std::string_view to_string(MessageType t);
// True for the types above; anything else on the wire is rejected (DropReason::unknown_type).
bool is_known_type(std::uint64_t raw);
// Whether this type carries a payload frame.
bool carries_payload(MessageType t);

enum class Dtype : std::uint8_t {
  none = 0,  // no payload
  f32 = 1,
  f16 = 2,   // IEEE binary16, round to nearest even
  bf16 = 3,  // bfloat16, round to nearest even
  int8 = 4,  // symmetric int8 per chunk of kInt8Chunk elements, one f32 scale per chunk
  // A compressed difference (CHOCO): bytes in the format of the run's --compress
  // (gossip/mixing/compress), count = the dense values. The wire checks its size within
  // kCommonBytes..compressed_max_bytes(count) and its checksum; the compressor the rest.
  compressed = 5,
};
inline constexpr std::uint64_t kCompressedMinBytes = 8;
// The largest compressed payload of count values (top-k at 100%: an index and a value each).
inline constexpr std::uint64_t compressed_max_bytes(std::uint64_t count) { return 8 * count + 64; }
std::string_view to_string(Dtype d);
// The value dtype a payload may carry, by the name to_string gives it ("f32", "f16",
// "bf16", "int8"); nullopt for anything else, "none" included.
std::optional<Dtype> parse_value_dtype(std::string_view name);
// int8's longest block: one scale for at most this many values (payload.hpp).
inline constexpr std::uint64_t kInt8Chunk = 256;
// Exact payload size in bytes of `count` elements of dtype d; for int8, that of the
// default blocks (kInt8Chunk values each; int8_payload_bytes for others). nullopt when it
// would overflow (count > kMaxElements), for Dtype::none with a non-zero count (none
// carries no elements), and for Dtype::compressed (its size varies).
std::optional<std::uint64_t> payload_bytes(Dtype d, std::uint64_t count);
// An int8 payload of count values in `blocks` blocks: the values, a scale and a length
// byte per block, and the block count (payload.hpp).
inline constexpr std::uint64_t int8_payload_bytes(std::uint64_t count, std::uint64_t blocks) {
  return count + 5 * blocks + 4;
}
// Whether `size` bytes can be a payload of count elements of dtype d: payload_bytes's
// size; for int8, one of between ceil(count / kInt8Chunk) and count blocks; for
// compressed, one within its bounds.
bool payload_size_fits(Dtype d, std::uint64_t count, std::uint64_t size);

struct Header {
  std::uint32_t version = kProtocolVersion;
  std::string run_id;       // all peers of one training run share it
  std::string fingerprint;  // Model::fingerprint(); mismatches are refused
  std::string sender;       // peer id, also the ZeroMQ routing identity
  MessageType type = MessageType::ping;
  std::uint64_t step = 0;  // training step or algorithm round
  double weight = 1.0;     // push-sum weight (1.0 when unused)
  Dtype dtype = Dtype::none;
  std::uint64_t count = 0;     // element count of the payload
  std::uint64_t offset = 0;    // first element of the payload in the flat buffer (chunks)
  std::uint64_t checksum = 0;  // XXH3-64 of the payload frame's bytes (0 when no payload)
  std::uint64_t nonce = 0;     // request id: a reply echoes the request's nonce
  // Type-specific extras; empty when unused.
  std::string address;               // hello: where the sender can be reached
  std::vector<std::string> members;  // welcome / members / hello / bye: entries, PROTOCOL.md 4.4
  // Optional split of the payload into consecutive parts, as element counts summing to
  // count; state_reply uses {parameters, optimizer state}. Empty when unused.
  std::vector<std::uint64_t> parts;
  // pushsum_share and its pushsum_ack: the sender's link session, a random number a
  // push-sum sender draws when it starts, so that a restarted peer's links start anew
  // (PROTOCOL.md 4.1). 0: none (a sender that numbers its shares from 1 for good).
  std::uint64_t session = 0;
  // pushsum_share: the receiver's link session as the sender last learnt it from the
  // receiver's acknowledgements (0: none yet); pushsum_ack: the acknowledging peer's own
  // session. A restarted receiver thereby tells a share meant for its earlier life, which
  // that life may have applied, from one meant for it (PROTOCOL.md 4.1).
  std::uint64_t peer_session = 0;
  // The training steps the sender has taken (0: not said), on any message: from it peers
  // estimate the whole run's progress (transport/progress_estimate.hpp).
  std::uint64_t trained = 0;
  // Link emulation held at the receiver (emulated_transport.hpp): when the message is due
  // at the receiver, in nanoseconds of the machine's monotonic clock, which sender and
  // receiver share as processes of one machine. 0: deliver on arrival.
  std::uint64_t due_ns = 0;
  // params_push of a compressed difference (CHOCO): the version of the sender's public copy
  // it applies to (the round after which that copy was last changed, plus one); 0 on a
  // whole copy, which replaces the receiver's (PROTOCOL.md, "Compressed differences"). On
  // relaysgd's params_push: how many peers' models the relayed sum holds (PROTOCOL.md 4.11).
  std::uint64_t base = 0;
  // refused: why the hello was refused, for the joiner to print. A refused message is the
  // one type a receiver takes from another run or model: it is how a joiner learns that
  // its --run or --model differs (validate() does not check its run and fingerprint).
  std::string why;

  bool operator==(const Header&) const = default;
};

enum class DropReason : std::uint8_t {
  bad_frame_count,  // not 1 or 2 frames, or a payload frame where none belongs
  header_too_large,
  bad_msgpack,  // frame 1 is not one well-formed MessagePack map
  missing_field,
  bad_field_type,
  unknown_type,
  bad_version,
  wrong_run,
  wrong_fingerprint,
  bad_dtype,
  size_mismatch,  // count/dtype disagree with the payload frame's length, or giant count
  bad_checksum,
  non_finite,      // NaN or Inf in the decoded values
  spoofed_sender,  // header sender differs from the transport-level identity
  count_           // number of reasons (not a reason)
};
inline constexpr std::size_t kDropReasonCount = static_cast<std::size_t>(DropReason::count_);
std::string_view to_string(DropReason r);

// Encodes the header as one MessagePack map (keys are short strings, see PROTOCOL.md).
std::vector<std::uint8_t> encode_header(const Header& h);

struct DecodeResult {
  std::optional<Header> header;  // set on success
  DropReason reason{};           // why not, when header is empty
};
// Decodes and type-checks frame 1. Unknown keys are ignored (forward compatibility);
// unknown message types and versions other than kProtocolVersion are rejected.
DecodeResult decode_header(std::span<const std::uint8_t> frame);

// What a receiver expects of every message it accepts.
struct Expectation {
  std::string run_id;
  std::string fingerprint;
};
// Full check of a decoded header against the receiver's run and the payload frame
// (nullptr/empty when the message had one frame): run, fingerprint, dtype, sizes,
// checksum. Does not look at values (non-finite checks happen while decoding values).
// verify_checksum = false leaves the checksum to the caller (admission checks it in the
// same pass over the bytes as the values, see wire::check_payload).
std::optional<DropReason> validate(const Header& h, const Expectation& expect,
                                   std::span<const std::uint8_t> payload, bool has_payload_frame,
                                   bool verify_checksum = true);

// The transport's check of who sent a message: the header's sender must equal the
// routing identity the ROUTER socket reported for it. spoofed_sender otherwise.
std::optional<DropReason> check_sender(const Header& h, std::string_view routing_id);

// XXH3-64 of bytes (seed 0).
std::uint64_t checksum(std::span<const std::uint8_t> bytes);

}  // namespace hearsay::wire
