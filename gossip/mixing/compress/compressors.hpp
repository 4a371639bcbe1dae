// The compressors behind make_compressor (compressor.hpp), one file each. Internal to
// hearsay_mixing: everything else builds them from a --compress spec.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "gossip/mixing/compress/compressor.hpp"

namespace hearsay::compress {

// Values kept of n at `percent`: ceil(percent / 100 x n), at least 1, at most n.
std::uint64_t kept_count(double percent, std::uint64_t n);
// "1%", "0.5%": the percentage as a spec writes it.
std::string percent_text(double percent);

// top-k: the k = ceil(percent / 100 x n) values of largest magnitude, exactly, with their
// indices (ties to the lower index); the rest decode to 0.
std::unique_ptr<Compressor> make_topk(double percent, std::uint64_t n);
// rand-k: k values at indices drawn from the payload's seed (k distinct, every index as
// likely), exactly; the indices are not sent.
std::unique_ptr<Compressor> make_randk(double percent, std::uint64_t n);
// sign: one bit per value and one scale per block, the block's mean magnitude: each value
// decodes to +-scale.
std::unique_ptr<Compressor> make_sign(std::uint64_t n, std::span<const std::uint64_t> tensor_sizes);
// int4: a 4-bit integer per value in [-7, 7] and one scale per block (its largest
// magnitude / 7), rounded to nearest: each value within half a scale.
std::unique_ptr<Compressor> make_int4(std::uint64_t n, std::span<const std::uint64_t> tensor_sizes);

}  // namespace hearsay::compress
