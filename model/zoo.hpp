// The model zoo: every model hearsay trains, one row each. --model, the simulator, the
// docs and the tests take the names from registered_models(); a new model is a function
// building its layers and a row in zoo.cpp.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/model.hpp"

namespace hearsay {

struct ModelEntry {
  std::string_view name;         // as --model takes it
  std::string_view description;  // for --help
  std::unique_ptr<Model> (*make)(bool fuse);
};

// Every model, in the order --help lists them.
const std::vector<ModelEntry>& registered_models();
// Throws std::invalid_argument naming the known models for a name that is none of them.
std::unique_ptr<Model> make_model(const std::string& name, bool fuse = true);
// The names of registered_models(), in order.
std::vector<std::string> model_names();
// --model's help: every row's name and description.
std::string model_flag_help();

}  // namespace hearsay
