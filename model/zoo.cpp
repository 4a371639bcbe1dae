#include "model/zoo.hpp"

#include <stdexcept>

#include "model/layers/conv2d.hpp"
#include "model/layers/elementwise.hpp"
#include "model/layers/linear.hpp"
#include "model/layers/pool2d.hpp"
#include "model/layers/residual.hpp"

namespace hearsay {

namespace {

template <class... L>
std::vector<std::unique_ptr<Layer>> sequence(L&&... layers) {
  std::vector<std::unique_ptr<Layer>> v;
  (v.push_back(std::make_unique<std::decay_t<L>>(std::forward<L>(layers))), ...);
  return v;
}

std::unique_ptr<Model> mlp(bool fuse) {
  return std::make_unique<Model>(
      "mlp", Shape{784}, 10,
      sequence(Linear(784, 256), ReLU(), Linear(256, 128), ReLU(), Linear(128, 10, Init::xavier_uniform)), fuse);
}

std::unique_ptr<Model> lenet(bool fuse) {
  return std::make_unique<Model>(
      "lenet", Shape{1, 28, 28}, 10,
      sequence(Conv2d(1, 20, 3), ReLU(), AvgPool2d(2), Conv2d(20, 50, 5), ReLU(), AvgPool2d(2), Flatten(),
               Linear(800, 128), ReLU(), Linear(128, 10, Init::xavier_uniform)),
      fuse);
}

// ResNet-20 (He et al. 2016, the CIFAR variant) on 1x28x28: a 3x3 stem of 16 channels,
// three stages of three BasicBlocks (16, 32, 64 channels; the first block of stages 2 and 3
// halves the resolution, 28 -> 14 -> 7, with a projection shortcut), global average
// pooling and a linear layer: 272,186 parameters. The layer indices are those of the
// PyTorch reference module in bench/pytorch_resnet.py, so checkpoints load into it, and
// the convolutions start as its do (He normal over fan-out, torchvision's choice).
std::unique_ptr<Model> resnet20(bool fuse) {
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(
      std::make_unique<Conv2d>(1, 16, 3, 1, 1, Init::kaiming_normal_fan_out, Conv2d::Bias::without));
  layers.push_back(std::make_unique<BatchNorm2d>(16));
  layers.push_back(std::make_unique<ReLU>());
  int in = 16;
  for (int width : {16, 32, 64})
    for (int block = 0; block < 3; ++block) {
      layers.push_back(std::make_unique<BasicBlock>(in, width, block == 0 && width != 16 ? 2 : 1));
      in = width;
    }
  layers.push_back(std::make_unique<GlobalAvgPool2d>());
  layers.push_back(std::make_unique<Linear>(64, 10));
  return std::make_unique<Model>("resnet20", Shape{1, 28, 28}, 10, std::move(layers), fuse);
}

}  // namespace

const std::vector<ModelEntry>& registered_models() {
  static const std::vector<ModelEntry> all{
      {"mlp", "a 784-256-128-10 perceptron (235,146 parameters)", mlp},
      {"lenet", "a small CNN with average pooling (129,068 parameters)", lenet},
      {"resnet20", "ResNet-20 with BatchNorm (272,186 parameters)", resnet20},
  };
  return all;
}

std::unique_ptr<Model> make_model(const std::string& name, bool fuse) {
  for (const auto& m : registered_models())
    if (m.name == name) return m.make(fuse);
  std::string known;
  for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown model '" + name + "' (known: " + known + ")");
}

std::string model_flag_help() {
  std::string help = "Model from the zoo:";
  for (const auto& m : registered_models())
    help += std::string(&m == &registered_models().front() ? " " : "; ") + std::string(m.name) + " = " +
            std::string(m.description);
  return help;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& m : registered_models()) names.emplace_back(m.name);
  return names;
}

}  // namespace hearsay
