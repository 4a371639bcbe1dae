// The receive side of the wire format as one function over untrusted bytes, shared by
// the libFuzzer target (fuzz_decode) and its gcc-buildable replay driver
// (fuzz_decode_replay).
//
// Input format: byte 0 holds the frame count (low 2 bits, 0-3) and whether the receiver
// expects the sender's own run and model (bit 2; otherwise the fixed kFuzzRun/kFuzzModel);
// then each frame but the last is a 4-byte little-endian length (clamped to what is left)
// and its bytes; the last frame takes the rest.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace hearsay::wire::fuzz {

inline constexpr const char* kFuzzRun = "fuzz-run";
inline constexpr const char* kFuzzModel = "fuzz-model";

// How far an input got: dropped for its frame count, refused by decode_header, by
// validate, by check_values, or accepted whole (values decoded). The replay driver
// requires every real message to be accepted, so that a decoder refusing everything
// cannot pass for one that survives everything.
enum class Reached { frames, header, validate, values, accepted };
inline constexpr int kReachedCount = 5;

// Runs decode_header, validate, check_values and decode_values on one input, and checks
// the properties every accepted message must have (the header re-encodes to a header
// that decodes equal; f32/f16/bf16 values re-encode to the received bytes). A broken
// property calls __builtin_trap() so that the fuzzer and the replay driver both stop
// on it. Never allocates more than a small multiple of the input size.
Reached run_receive_pipeline(std::span<const std::uint8_t> input);

// Packs frames into the input format above (for writing seed inputs).
std::vector<std::uint8_t> join_frames(const std::vector<std::vector<std::uint8_t>>& frames,
                                      bool own_expectation);

}  // namespace hearsay::wire::fuzz
