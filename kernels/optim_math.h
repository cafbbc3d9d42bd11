// Element math of the optimizers (torch.optim.SGD, Adam, AdamW for fp32 tensors), shared by the host loop
// (sim/optim/optimizer.cpp) and a CUDA twin. Per-step scalars are computed once on the host (in double, as PyTorch's
// Python code does) and rounded to float; the element functions then do PyTorch's float operations in its order.
// A new optimizer adds one scalars struct and one element function here. Note: the CUDA twin must be compiled
// without FMA contraction (-fmad=false or __fmul_rn/__fadd_rn) to match the host bit for bit.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/rng.h"

namespace gs {

// torch.optim.SGD scalars (dampening 0). lr, momentum, weight_decay as float (PyTorch casts Python scalars to the
// tensor's dtype inside each op).
struct SgdScalars {
  float lr = 0.0f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  bool first_step = false;  // t == 1: the momentum buffer starts as a copy of the gradient
};

// One element of SGD. w: parameter, g: gradient, buf: momentum buffer (ignored when momentum == 0).
// PyTorch (_single_tensor_sgd): d = g + wd*w; buf = d (first step) else buf = momentum*buf + d;
// d = nesterov ? d + momentum*buf : buf; w = w - lr*d.
GS_HD inline void sgd_element(float& w, float g, float& buf, const SgdScalars& s) {
  float d = g;
  if (s.weight_decay != 0.0f) d = d + s.weight_decay * w;
  if (s.momentum != 0.0f) {
    if (s.first_step) {
      buf = d;
    } else {
      buf = buf * s.momentum;
      buf = buf + d;
    }
    d = s.nesterov ? d + s.momentum * buf : buf;
  }
  w = w + (-s.lr) * d;
}

// torch.optim.Adam / AdamW scalars of one step t (1-based). Made by adam_scalars().
struct AdamScalars {
  float lerp_weight = 0.0f;        // 1 - beta1 (m.lerp_(g, 1 - beta1))
  float beta2 = 0.0f;
  float one_minus_beta2 = 0.0f;    // 1 - beta2 (v.mul_(beta2).addcmul_(g, g, value=1 - beta2))
  float neg_step_size = 0.0f;      // -lr / (1 - beta1^t)
  float bias_correction2_sqrt = 0.0f;  // sqrt(1 - beta2^t)
  float eps = 0.0f;
  float weight_decay = 0.0f;       // Adam: L2 added to the gradient (0 for AdamW)
  float decay_factor = 1.0f;       // AdamW: w *= 1 - lr*weight_decay before the update (1 for Adam)
};

// Per-step scalars, computed in double like PyTorch's Python side, then rounded to float.
// decoupled = true gives AdamW (Loshchilov & Hutter, ICLR'19), false gives Adam with L2 (Kingma & Ba, ICLR'15).
inline AdamScalars adam_scalars(double lr, double beta1, double beta2, double eps, double weight_decay,
                                bool decoupled, int64_t t) {
  AdamScalars s;
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(t));
  const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(t));
  s.lerp_weight = static_cast<float>(1.0 - beta1);
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  s.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = static_cast<float>(eps);
  s.weight_decay = decoupled ? 0.0f : static_cast<float>(weight_decay);
  s.decay_factor = decoupled ? static_cast<float>(1.0 - lr * weight_decay) : 1.0f;
  return s;
}

// PyTorch's lerp (ATen/native/Lerp.h): exact at both ends, the form chosen by |weight| < 0.5.
GS_HD inline float torch_lerp(float self, float end, float weight) {
  return (weight < 0.5f && weight > -0.5f) ? self + weight * (end - self) : end - (end - self) * (1.0f - weight);
}

// One element of Adam/AdamW (PyTorch _single_tensor_adam, non-capturable, amsgrad off), op for op:
// w *= decay_factor; g += wd*w; m = lerp(m, g, 1 - b1); v = v*b2 + (1 - b2)*g*g;
// denom = sqrt(v)/sqrt(1 - b2^t) + eps; w = w + (-lr/(1 - b1^t))*m/denom.
GS_HD inline void adam_element(float& w, float g, float& m, float& v, const AdamScalars& s) {
  if (s.decay_factor != 1.0f) w = w * s.decay_factor;
  if (s.weight_decay != 0.0f) g = g + s.weight_decay * w;
  m = torch_lerp(m, g, s.lerp_weight);
  v = v * s.beta2;
  v = v + s.one_minus_beta2 * g * g;
  const float denom = std::sqrt(v) / s.bias_correction2_sqrt + s.eps;
  w = w + s.neg_step_size * m / denom;
}

}  // namespace gs
