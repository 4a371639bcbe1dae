// Shapes and non-owning tensor views. Parameters and gradients of a model live in two
// flat buffers (see FlatBuffer); layers hold TensorViews into them. Activations are
// also views, into per-thread workspaces.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace hearsay {

// Up to 4 dimensions, row-major (NCHW for images). Unused trailing dims are 1.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) {
    if (dims.size() > 4) throw std::invalid_argument("Shape: at most 4 dimensions");
    for (auto d : dims) {
      if (d < 0) throw std::invalid_argument("Shape: negative dimension");
      dims_[rank_++] = d;
    }
  }
  int rank() const { return rank_; }
  std::int64_t operator[](int i) const { return dims_.at(static_cast<std::size_t>(i)); }
  std::int64_t& operator[](int i) { return dims_.at(static_cast<std::size_t>(i)); }
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<std::size_t>(i)];
    return n;
  }
  // Elements per item of the leading (batch) dimension.
  std::int64_t per_item() const { return rank_ == 0 || dims_[0] == 0 ? 0 : numel() / dims_[0]; }
  Shape with_batch(std::int64_t n) const {
    Shape s = *this;
    if (s.rank_ > 0) s.dims_[0] = n;
    return s;
  }
  bool operator==(const Shape& o) const {
    if (rank_ != o.rank_) return false;
    for (int i = 0; i < rank_; ++i)
      if (dims_[static_cast<std::size_t>(i)] != o.dims_[static_cast<std::size_t>(i)]) return false;
    return true;
  }
  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < rank_; ++i) s += (i ? "," : "") + std::to_string(dims_[static_cast<std::size_t>(i)]);
    return s + "]";
  }

 private:
  std::array<std::int64_t, 4> dims_{1, 1, 1, 1};
  int rank_ = 0;
};

struct TensorView {
  float* data = nullptr;
  Shape shape;
  std::int64_t numel() const { return shape.numel(); }
};

struct ConstTensorView {
  const float* data = nullptr;
  Shape shape;
  ConstTensorView() = default;
  ConstTensorView(const float* d, Shape s) : data(d), shape(s) {}
  ConstTensorView(const TensorView& t) : data(t.data), shape(t.shape) {}  // NOLINT: views convert
  std::int64_t numel() const { return shape.numel(); }
};

}  // namespace hearsay
