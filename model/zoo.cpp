#include "model/zoo.hpp"

#include <stdexcept>

#include "model/layers/conv2d.hpp"
#include "model/layers/elementwise.hpp"
#include "model/layers/linear.hpp"
#include "model/layers/pool2d.hpp"

namespace hearsay {

namespace {

template <class... L>
std::vector<std::unique_ptr<Layer>> sequence(L&&... layers) {
  std::vector<std::unique_ptr<Layer>> v;
  (v.push_back(std::make_unique<std::decay_t<L>>(std::forward<L>(layers))), ...);
  return v;
}

}  // namespace

std::unique_ptr<Model> make_model(const std::string& name, bool fuse) {
  if (name == "mlp")
    return std::make_unique<Model>(
        "mlp", Shape{784}, 10,
        sequence(Linear(784, 256), ReLU(), Linear(256, 128), ReLU(), Linear(128, 10, Init::xavier_uniform)),
        fuse);
  if (name == "lenet")
    return std::make_unique<Model>(
        "lenet", Shape{1, 28, 28}, 10,
        sequence(Conv2d(1, 20, 3), ReLU(), AvgPool2d(2), Conv2d(20, 50, 5), ReLU(), AvgPool2d(2), Flatten(),
                 Linear(800, 128), ReLU(), Linear(128, 10, Init::xavier_uniform)),
        fuse);
  std::string known;
  for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown model '" + name + "' (known: " + known + ")");
}

std::vector<std::string> model_names() { return {"mlp", "lenet"}; }

}  // namespace hearsay
