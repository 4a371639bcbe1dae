// Where a model's training parameters live, as seen by code that mixes them from outside
// the training loop (gossip's Mixer). On the CPU they are a host span and the mixer's
// arithmetic runs over it in place; on a GPU they stay on the device, the mixer's host
// copies travel through pinned staging buffers on a copy stream, and the arithmetic runs
// on the device (model/cuda). The mixer only ever asks for these three things.
#pragma once
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>

namespace hearsay {

class ParameterStore {
 public:
  virtual ~ParameterStore() = default;
  virtual std::size_t size() const = 0;
  // out = params.
  virtual void read(std::span<float> out) = 0;
  // params = work + scale (params - base), element by element; then out = params. out may
  // be work. The mixer's sync: params - base are the local steps since the last one, scaled
  // by the peer's shard share, and work - base the round's change. With scale 1 it is
  // params += work - base, rounded as written (equal shards keep their results to the bit).
  virtual void add_difference_and_read(std::span<const float> work, std::span<const float> base, float scale,
                                       std::span<float> out) = 0;
  // params = values.
  virtual void write(std::span<const float> values) = 0;
  // Host memory the mixer may keep its working copy (0) and its base (1) in, size() floats
  // each, valid as long as the store; empty: the mixer allocates its own. The GPU store
  // gives page-locked memory, so that its copies to and from the device need no staging.
  virtual std::span<float> mixer_buffer(int /*which*/) { return {}; }

 protected:
  void check(std::size_t n, const char* what) const {
    if (n != size())
      throw std::invalid_argument(std::string("ParameterStore::") + what + ": " + std::to_string(n) +
                                  " values for " + std::to_string(size()) + " parameters");
  }
};

// Parameters in host memory: one pass over the buffers, in place.
class HostParameterStore final : public ParameterStore {
 public:
  explicit HostParameterStore(std::span<float> params) : params_(params) {}
  std::size_t size() const override { return params_.size(); }
  void read(std::span<float> out) override {
    check(out.size(), "read");
    if (out.data() != params_.data())
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = params_[i];
  }
  void add_difference_and_read(std::span<const float> work, std::span<const float> base, float scale,
                               std::span<float> out) override {
    check(work.size(), "add_difference_and_read");
    check(base.size(), "add_difference_and_read");
    check(out.size(), "add_difference_and_read");
    float* const p = params_.data();
    if (scale == 1.0f) {
      for (std::size_t i = 0; i < params_.size(); ++i) out[i] = p[i] = p[i] + (work[i] - base[i]);
    } else {
      for (std::size_t i = 0; i < params_.size(); ++i) out[i] = p[i] = work[i] + scale * (p[i] - base[i]);
    }
  }
  void write(std::span<const float> values) override {
    check(values.size(), "write");
    for (std::size_t i = 0; i < values.size(); ++i) params_[i] = values[i];
  }

 private:
  std::span<float> params_;
};

}  // namespace hearsay
