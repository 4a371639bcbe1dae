// What a backend may be asked to run. A layer says which op it is (Layer::op()), so the
// CPU model, the CUDA runner and Backend::supports() dispatch on the same fact, and a new
// layer kind is one enumerator here plus its case in each backend.
#pragma once

namespace hearsay {

// What a backend may be asked to run: one op per layer kind, the loss, the optimizers,
// and what mixing and the wire need.
enum class Op {
  linear,
  conv2d,
  relu,
  flatten,
  avgpool2d,
  maxpool2d,
  batchnorm2d,
  global_avgpool2d,
  basic_block,  // ResNet's residual block: its convolutions, BatchNorms and the residual add
  softmax_xent,
  sgd,
  adamw,
  axpby,
  weighted_sum,
  wire_f16,
  wire_bf16,
  wire_int8,
  finite_check,
};
inline constexpr int kOpCount = static_cast<int>(Op::finite_check) + 1;
const char* op_name(Op op);

}  // namespace hearsay
