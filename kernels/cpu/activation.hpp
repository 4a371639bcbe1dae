// Elementwise activations and the bias epilogues of Linear and Conv2d.
#pragma once

namespace hearsay::cpu {

void relu_forward(long n, const float* x, float* y);
// dx = dy where y > 0, else 0. Uses the output, so it also serves fused bias+ReLU.
void relu_backward(long n, const float* y, const float* dy, float* dx);

// Channel-major rows (conv, one image: [channels x pixels]): y[c][p] += bias[c], then
// max(0, .) when relu is set. Fusing the two saves one pass over the activations.
void bias_rows(int channels, long pixels, const float* bias, bool relu, float* y);
// Feature-major columns (linear: [batch x features]): y[b][f] += bias[f] (+ ReLU).
void bias_cols(long batch, int features, const float* bias, bool relu, float* y);
// db[c] (+)= sum_p dy[c][p]: the bias gradient of one conv image.
void bias_grad_rows(int channels, long pixels, const float* dy, bool accumulate, float* db);
// db[f] = sum_b dy[b][f]: the bias gradient of a linear layer.
void bias_grad_cols(long batch, int features, const float* dy, float* db);

}  // namespace hearsay::cpu
