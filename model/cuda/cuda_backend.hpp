// The CUDA backend and its training session (built only with CUDA; see model/backend.hpp
// and model/training_session.hpp for what they promise).
#pragma once
#include <memory>

#include "model/backend.hpp"
#include "model/training_session.hpp"

namespace hearsay {

// The backend of CUDA device `index`. CudaError when the device cannot be used.
std::shared_ptr<Backend> make_cuda_backend(int index);

// A session on `backend` (a CUDA backend): parameters, gradients, optimizer state and data
// on its device; cuDNN for convolutions, cuBLAS for linear layers, kernels/cuda for the rest.
std::unique_ptr<TrainingSession> make_cuda_session(std::shared_ptr<Backend> backend, Model& model,
                                                   Optimizer& optimizer, const SessionOptions& options);

}  // namespace hearsay
