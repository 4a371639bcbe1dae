#include "model/trainer.hpp"

#include <algorithm>
#include <stdexcept>

#include "kernels/cpu/softmax_xent.hpp"
#include "kernels/cpu/vector.hpp"

namespace hearsay {

namespace {

// Chunk t of n items split T ways: sizes differ by at most one.
std::pair<std::int64_t, std::int64_t> chunk(std::int64_t n, int parts, int t) {
  const std::int64_t base = n / parts, extra = n % parts;
  const std::int64_t begin = t * base + std::min<std::int64_t>(t, extra);
  return {begin, begin + base + (t < extra ? 1 : 0)};
}

}  // namespace

Trainer::Trainer(Model& model, int threads, std::int64_t max_batch)
    : model_(model), max_batch_(max_batch), pool_(std::max(1, threads)) {
  if (max_batch < 1) throw std::invalid_argument("Trainer: batch size must be >= 1");
  const int t = pool_.size();
  const std::int64_t per_thread = (max_batch + t - 1) / t;
  for (int i = 0; i < t; ++i) workspaces_.push_back(std::make_unique<Workspace>(model, per_thread));
  if (t > 1)
    for (int i = 0; i < t; ++i) thread_grads_.emplace_back(static_cast<std::size_t>(model.param_count()));
}

BatchStats Trainer::compute_gradients(const float* x, const std::uint8_t* labels, std::int64_t batch) {
  if (batch < 1 || batch > max_batch_)
    throw std::invalid_argument("Trainer: batch " + std::to_string(batch) + " outside [1, " +
                                std::to_string(max_batch_) + "]");
  const int t_count = pool_.size();
  const std::int64_t in_floats = model_.input_floats();
  const int classes = model_.classes();
  const float grad_scale = 1.0f / static_cast<float>(batch);
  std::vector<BatchStats> stats(static_cast<std::size_t>(t_count));
  const std::size_t n_params = static_cast<std::size_t>(model_.param_count());

  pool_.run([&](int t) {
    const auto [begin, end] = chunk(batch, t_count, t);
    float* grads = t_count == 1 ? model_.grads().data() : thread_grads_[static_cast<std::size_t>(t)].data();
    if (begin == end) {
      cpu::fill(n_params, 0.0f, grads);
      return;
    }
    Workspace& ws = *workspaces_[static_cast<std::size_t>(t)];
    // Each thread normalises its chunk with the chunk's own BatchNorm statistics; the
    // first thread's chunk updates the running ones (as torch.nn.DataParallel does).
    const ConstTensorView logits =
        ws.forward(x + begin * in_floats, end - begin, t == 0 ? Pass::train : Pass::train_replica);
    TensorView dlogits = ws.logits_buffer();
    const auto r =
        cpu::softmax_xent(end - begin, classes, logits.data, labels + begin, grad_scale, dlogits.data);
    stats[static_cast<std::size_t>(t)] = BatchStats{r.loss_sum, r.correct, end - begin};
    ws.backward(dlogits.data, grads);
  });

  if (t_count > 1) {
    // Sum the per-thread gradients, each thread reducing one slice in fixed order.
    pool_.run([&](int t) {
      const auto [begin, end] = chunk(static_cast<std::int64_t>(n_params), t_count, t);
      const std::size_t len = static_cast<std::size_t>(end - begin);
      float* out = model_.grads().data() + begin;
      std::copy_n(thread_grads_[0].data() + begin, len, out);
      for (int s = 1; s < t_count; ++s)
        cpu::add(len, thread_grads_[static_cast<std::size_t>(s)].data() + begin, out);
    });
  }
  BatchStats total;
  for (const auto& s : stats) total += s;
  return total;
}

BatchStats Trainer::evaluate(const float* x, const std::uint8_t* labels, std::int64_t count) {
  const int t_count = pool_.size();
  const std::int64_t in_floats = model_.input_floats();
  std::vector<BatchStats> stats(static_cast<std::size_t>(t_count));
  pool_.run([&](int t) {
    const auto [begin, end] = chunk(count, t_count, t);
    Workspace& ws = *workspaces_[static_cast<std::size_t>(t)];
    BatchStats& s = stats[static_cast<std::size_t>(t)];
    for (std::int64_t at = begin; at < end; at += ws.max_batch()) {
      const std::int64_t n = std::min(ws.max_batch(), end - at);
      const ConstTensorView logits = ws.forward(x + at * in_floats, n, Pass::eval);
      const auto r = cpu::softmax_xent(n, model_.classes(), logits.data, labels + at, 0.0f, nullptr);
      s += BatchStats{r.loss_sum, r.correct, n};
    }
  });
  BatchStats total;
  for (const auto& s : stats) total += s;
  return total;
}

}  // namespace hearsay
