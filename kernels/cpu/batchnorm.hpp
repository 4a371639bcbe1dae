// BatchNorm over NCHW activations, one channel at a time (PyTorch's BatchNorm2d): each
// channel c is normalised over its N x HW values, y = (x - mean) * invstd * gamma + beta.
// All functions take x as [n][channels][pixels].
#pragma once

namespace hearsay::cpu {

struct BatchNormShape {
  long n;        // images
  int channels;  // C
  long pixels;   // H * W
  long per_channel() const { return n * pixels; }
};

// The batch's mean and biased variance of every channel, summed in double (two passes: a
// one-pass sum of squares loses digits when the mean is large against the spread).
void batchnorm_moments(const BatchNormShape& s, const float* x, float* mean, float* variance);
// y[.][c][.] = x * scale[c] + shift[c], then max(0, .) when relu is set. y may be x.
void batchnorm_apply(const BatchNormShape& s, const float* x, const float* scale, const float* shift,
                     bool relu, float* y);
// The parameter gradients: dgamma[c] = sum dy * (x - mean[c]) * invstd[c], dbeta[c] = sum dy.
void batchnorm_param_grads(const BatchNormShape& s, const float* x, const float* dy, const float* mean,
                           const float* invstd, float* dgamma, float* dbeta);
// The input gradient of a training pass, where mean and invstd are the batch's and depend
// on x: dx = gamma * invstd * (dy - dbeta / M - xhat * dgamma / M), M = n * pixels.
// dx may be dy.
void batchnorm_input_grad_train(const BatchNormShape& s, const float* x, const float* dy, const float* mean,
                                const float* invstd, const float* gamma, const float* dgamma,
                                const float* dbeta, float* dx);

}  // namespace hearsay::cpu
