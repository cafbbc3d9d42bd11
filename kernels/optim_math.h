// Element math of the optimizers (torch.optim.SGD, Adam, AdamW for fp32 tensors), shared by the host loop
// (sim/optim/optimizer.cpp) and a CUDA twin. Per-step scalars are computed once on the host (in double, as PyTorch's
// Python code does) and rounded to float; the element functions then do PyTorch's float operations in its order.
// A new optimizer adds one scalars struct and one element function here.
// Rounding: PyTorch's add_(x, alpha=a), addcmul_ and lerp_ are fused multiply-adds (one rounding) on CPU (its
// kernels are built with contraction, vector and scalar paths alike) and on CUDA (nvcc contracts by default);
// mul_, add_ without alpha, addcdiv_ (a division) and sqrt round each operation. The build disables implicit
// contraction (host: -ffp-contract=off, CUDA: --fmad=false) so host and device agree bit for bit, and these
// functions call fmaf explicitly exactly where PyTorch fuses (docs/parity.md shows the check against PyTorch).
#pragma once
#include <math.h>

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
// PyTorch 1.13 and 2.x (_single_tensor_sgd, dampening 0), op for op:
// d = d_p.add(w, alpha=wd)           -> fma(wd, w, g)                (one rounding)
// buf = d (first step), else buf.mul_(momentum).add_(d, alpha=1)    (two: the product, then the sum)
// d = d.add(buf, alpha=momentum) (Nesterov) -> fma(momentum, buf, d); else d = buf
// w.add_(d, alpha=-lr)               -> fma(-lr, d, w).
GS_HD inline void sgd_element(float& w, float g, float& buf, const SgdScalars& s) {
  float d = g;
  if (s.weight_decay != 0.0f) d = fmaf(s.weight_decay, w, d);
  if (s.momentum != 0.0f) {
    if (s.first_step) {
      buf = d;
    } else {
      buf = buf * s.momentum;
      buf = buf + d;
    }
    d = s.nesterov ? fmaf(s.momentum, buf, d) : buf;
  }
  w = fmaf(-s.lr, d, w);
}

// torch.optim.Adam / AdamW scalars of one step t (1-based). Made by adam_scalars().
struct AdamScalars {
  bool lerp = true;                // first moment as PyTorch >= 2.0 (m.lerp_(g, 1 - beta1)); false: 1.13's
                                   // m.mul_(beta1).add_(g, alpha=1 - beta1)
  float beta1 = 0.0f;
  float lerp_weight = 0.0f;        // 1 - beta1
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
// lerp: the first moment's form (AdamScalars::lerp; training.optimizer.first_moment).
inline AdamScalars adam_scalars(double lr, double beta1, double beta2, double eps, double weight_decay,
                                bool decoupled, int64_t t, bool lerp = true) {
  AdamScalars s;
  s.lerp = lerp;
  s.beta1 = static_cast<float>(beta1);
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

// PyTorch's lerp (ATen/native/Lerp.h): exact at both ends, the form chosen by |weight| < 0.5, each one fused:
// self + weight*(end - self) = fma(weight, end - self, self); end - (end - self)*(1 - weight) =
// fma(-(end - self), 1 - weight, end).
GS_HD inline float torch_lerp(float self, float end, float weight) {
  const float diff = end - self;
  return (weight < 0.5f && weight > -0.5f) ? fmaf(weight, diff, self) : fmaf(-diff, 1.0f - weight, end);
}

// One element of Adam/AdamW (PyTorch _single_tensor_adam / _single_tensor_adamw, non-capturable, amsgrad off),
// op for op:
// w.mul_(1 - lr*wd) (AdamW); g = g.add(w, alpha=wd) (Adam) -> fma(wd, w, g);
// m: 2.x m.lerp_(g, 1 - b1) (torch_lerp), 1.13 m.mul_(b1).add_(g, alpha=1 - b1) -> fma(1 - b1, g, m*b1);
// v.mul_(b2).addcmul_(g, g, value=1 - b2) -> fma((1 - b2)*g, g, v*b2);
// denom = (v.sqrt() / sqrt(1 - b2^t)).add_(eps); w.addcdiv_(m, denom, value=-lr/(1 - b1^t)) -> w + (-step*m)/denom.
GS_HD inline void adam_element(float& w, float g, float& m, float& v, const AdamScalars& s) {
  if (s.decay_factor != 1.0f) w = w * s.decay_factor;
  if (s.weight_decay != 0.0f) g = fmaf(s.weight_decay, w, g);
  m = s.lerp ? torch_lerp(m, g, s.lerp_weight) : fmaf(s.lerp_weight, g, m * s.beta1);
  v = v * s.beta2;
  v = fmaf(s.one_minus_beta2 * g, g, v);
  const float denom = std::sqrt(v) / s.bias_correction2_sqrt + s.eps;
  w = w + s.neg_step_size * m / denom;
}

}  // namespace gs
