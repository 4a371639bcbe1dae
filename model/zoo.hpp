// The model zoo: models by name.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/model.hpp"

namespace hearsay {

// "mlp": 784-256-128-10 with ReLU.
// "lenet": the LeNet of Dive into Deep Learning's multi-GPU chapter: conv 20@3x3 ->
//   ReLU -> avgpool 2 -> conv 50@5x5 -> ReLU -> avgpool 2 -> linear 800->128 -> ReLU ->
//   linear 128->10 (129,068 parameters), on 1x28x28 inputs.
// Throws std::invalid_argument naming the known models for any other name.
std::unique_ptr<Model> make_model(const std::string& name, bool fuse = true);
std::vector<std::string> model_names();

}  // namespace hearsay
