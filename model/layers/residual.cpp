#include "model/layers/residual.hpp"

#include <algorithm>
#include <stdexcept>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/vector.hpp"

namespace hearsay {

namespace {
std::int64_t aligned(std::int64_t floats) { return (floats + 15) / 16 * 16; }
}  // namespace

BasicBlock::BasicBlock(int in_channels, int out_channels, int stride)
    : in_(in_channels),
      out_(out_channels),
      stride_(stride),
      conv1_(in_channels, out_channels, 3, stride, 1, Init::kaiming_normal_fan_out, Conv2d::Bias::without),
      bn1_(out_channels),
      conv2_(out_channels, out_channels, 3, 1, 1, Init::kaiming_normal_fan_out, Conv2d::Bias::without),
      bn2_(out_channels) {
  if (stride != 1 || in_channels != out_channels) {
    shortcut_conv_.emplace(in_channels, out_channels, 1, stride, 0, Init::kaiming_normal_fan_out,
                           Conv2d::Bias::without);
    shortcut_bn_.emplace(out_channels);
  }
  bn1_.set_fused_relu(true);  // relu(bn1(.)): bn1's backward applies the mask
}

std::string BasicBlock::describe() const {
  return "basicblock(" + std::to_string(in_) + "," + std::to_string(out_) + ",s" + std::to_string(stride_) +
         (projects() ? ",proj" : "") + ")";
}

Shape BasicBlock::output_shape(const Shape& input) const { return conv1_.output_shape(input); }

std::vector<std::pair<const char*, Layer*>> BasicBlock::parts() {
  std::vector<std::pair<const char*, Layer*>> p{
      {"conv1", &conv1_}, {"bn1", &bn1_}, {"conv2", &conv2_}, {"bn2", &bn2_}};
  if (projects()) {
    p.emplace_back("shortcut.0", &*shortcut_conv_);
    p.emplace_back("shortcut.1", &*shortcut_bn_);
  }
  return p;
}

std::vector<std::pair<const char*, const Layer*>> BasicBlock::parts() const {
  std::vector<std::pair<const char*, const Layer*>> p;
  for (auto [name, layer] : const_cast<BasicBlock*>(this)->parts()) p.emplace_back(name, layer);
  return p;
}

std::int64_t BasicBlock::param_count() const {
  std::int64_t n = 0;
  for (auto [name, part] : parts()) n += part->param_count();
  return n;
}

std::int64_t BasicBlock::buffer_count() const {
  std::int64_t n = 0;
  for (auto [name, part] : parts()) n += part->buffer_count();
  return n;
}

std::vector<ParamTensor> BasicBlock::param_tensors() const {
  std::vector<ParamTensor> all;
  for (auto [name, part] : parts())
    for (auto& t : part->param_tensors()) all.push_back({std::string(name) + "." + t.suffix, t.shape});
  return all;
}

std::vector<BufferTensor> BasicBlock::buffer_tensors() const {
  std::vector<BufferTensor> all;
  for (auto [name, part] : parts())
    for (auto& t : part->buffer_tensors())
      all.push_back({std::string(name) + "." + t.suffix, t.shape, t.is_count});
  return all;
}

void BasicBlock::init_params(Rng& rng) {
  for (auto [name, part] : parts()) {
    Rng part_rng = rng.split();
    part->init_params(part_rng);
  }
}

void BasicBlock::init_buffers() {
  for (auto [name, part] : parts()) part->init_buffers();
}

void BasicBlock::bind(float* state, std::int64_t param_offset, std::int64_t buffer_offset) {
  Layer::bind(state, param_offset, buffer_offset);
  for (auto [name, part] : parts()) {
    part->bind(state, param_offset, buffer_offset);
    param_offset += part->param_count();
    buffer_offset += part->buffer_count();
  }
}

// The block's scratch: the inner activations forward keeps for backward (conv1's output a1,
// bn1's b1, conv2's a2, the shortcut convolution's s1), two gradient buffers as large as
// the larger of input and output, then each part's own scratch region. Offsets are worked
// out first, so that scratch_floats and the passes share one layout.
struct BasicBlock::Scratch {
  enum Region { a1_at, b1_at, a2_at, s1_at, grad_a_at, grad_b_at, part_at, regions = part_at + 6 };
  std::int64_t offset[regions + 1] = {};
  float *a1 = nullptr, *b1 = nullptr, *a2 = nullptr, *s1 = nullptr, *grad_a = nullptr, *grad_b = nullptr;
  float* part[6] = {};
  Shape in, out;

  Scratch(const BasicBlock& block, const Shape& input, float* base)
      : in(input), out(block.output_shape(input)) {
    const std::int64_t act = aligned(out.numel());
    const std::int64_t grad = aligned(std::max(in.numel(), out.numel()));
    std::int64_t size[regions] = {act, act, act, block.projects() ? act : 0, grad, grad};
    const Shape part_inputs[6] = {in, out, out, out, in, out};
    const auto parts = block.parts();
    for (std::size_t i = 0; i < parts.size(); ++i)
      size[part_at + i] = aligned(parts[i].second->scratch_floats(part_inputs[i]));
    for (int r = 0; r < regions; ++r) offset[r + 1] = offset[r] + size[r];
    if (base == nullptr) return;
    a1 = base + offset[a1_at];
    b1 = base + offset[b1_at];
    a2 = base + offset[a2_at];
    s1 = base + offset[s1_at];
    grad_a = base + offset[grad_a_at];
    grad_b = base + offset[grad_b_at];
    for (int i = 0; i < 6; ++i) part[i] = base + offset[part_at + i];
  }
  std::int64_t total() const { return offset[regions]; }
};

std::int64_t BasicBlock::scratch_floats(const Shape& input) const {
  return Scratch(*this, input, nullptr).total();
}

void BasicBlock::forward(ConstTensorView x, TensorView y, float* scratch, Pass pass) const {
  const Scratch s(*this, x.shape, scratch);
  conv1_.forward(x, TensorView{s.a1, s.out}, s.part[0], pass);
  bn1_.forward(ConstTensorView{s.a1, s.out}, TensorView{s.b1, s.out}, s.part[1], pass);
  conv2_.forward(ConstTensorView{s.b1, s.out}, TensorView{s.a2, s.out}, s.part[2], pass);
  bn2_.forward(ConstTensorView{s.a2, s.out}, y, s.part[3], pass);
  const auto n = static_cast<std::size_t>(s.out.numel());
  if (projects()) {
    shortcut_conv_->forward(x, TensorView{s.s1, s.out}, s.part[4], pass);
    // The shortcut's BatchNorm output is needed only for the sum: grad_a holds it.
    shortcut_bn_->forward(ConstTensorView{s.s1, s.out}, TensorView{s.grad_a, s.out}, s.part[5], pass);
    cpu::add(n, s.grad_a, y.data);
  } else {
    cpu::add(n, x.data, y.data);
  }
  cpu::relu_forward(static_cast<long>(n), y.data, y.data);
}

void BasicBlock::backward(ConstTensorView x, ConstTensorView y, TensorView dy, float* dx, float* grads,
                          float* scratch) const {
  const Scratch s(*this, x.shape, scratch);
  const auto n = static_cast<std::size_t>(s.out.numel());
  // g = dy masked by the final ReLU; it flows unchanged into both branches of the sum.
  cpu::relu_backward(static_cast<long>(n), y.data, dy.data, dy.data);
  const ConstTensorView a1{s.a1, s.out}, b1{s.b1, s.out}, a2{s.a2, s.out};
  if (projects()) {
    const ConstTensorView s1{s.s1, s.out};
    shortcut_bn_->backward(s1, s1, dy, s.grad_a, grads, s.part[5]);
    shortcut_conv_->backward(x, s1, TensorView{s.grad_a, s.out}, dx, grads, s.part[4]);
  }
  bn2_.backward(a2, a2, dy, s.grad_a, grads, s.part[3]);
  conv2_.backward(b1, a2, TensorView{s.grad_a, s.out}, s.grad_b, grads, s.part[2]);
  bn1_.backward(a1, b1, TensorView{s.grad_b, s.out}, s.grad_a, grads, s.part[1]);
  conv1_.backward(x, a1, TensorView{s.grad_a, s.out}, dx ? s.grad_b : nullptr, grads, s.part[0]);
  if (!dx) return;
  // dx = (the shortcut's input gradient, already in dx, or g itself) + the main branch's.
  if (!projects()) std::copy_n(dy.data, n, dx);
  cpu::add(static_cast<std::size_t>(x.numel()), s.grad_b, dx);
}

}  // namespace hearsay
