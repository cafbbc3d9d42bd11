"""An independent NumPy re-implementation of DeepSpeed's 1-bit Adam, written from DeepSpeed's source (not from
gradsweep's): OnebitAdam.step in deepspeed/runtime/fp16/onebit/adam.py and compressed_allreduce in
deepspeed/runtime/comm/nccl.py (NcclBackend) / compressed.py (CompressedBackend). Every tensor operation is done in
float32 as the torch tensors are; the all-to-all and all-gathers are plain array indexing over the ranks' buffers.

Where a choice is not fixed by DeepSpeed's code, this file states the one it makes:
- torch's fused CPU kernels: exp_avg.mul_(b1).add_(1 - b1, g) rounds m * b1, then fuses (1 - b1) * g + that (one
  rounding); addcmul_ likewise fuses ((1 - b2) * g) * g + v * b2. An FMA of float32 operands is emulated exactly
  enough here by one float64 operation (the product of two float32 is exact in float64) rounded to float32.
- torch.linalg.norm of a float32 vector: summed here in float64 and rounded to float32 (torch sums in float32 with
  its own order; the two differ by float32 rounding at most).
- the server's sum over ranks: in rank order.
"""
import numpy as np

F32 = np.float32


def padded_size(n, size):
    """corrected_tensor_size of OnebitAdam.step: n padded up to a multiple of size * lcm(size, 8)."""
    divider = size * 8 // np.gcd(size, 8)
    unit = size * divider
    return n if n % unit == 0 else n + unit - n % unit


def fma32(a, b, c):
    return (np.float64(a) * np.float64(b) + np.float64(c)).astype(F32)


def norm32(x):
    return F32(np.sqrt(np.sum(np.asarray(x, dtype=np.float64) ** 2)))


def sign_pm1(x):
    """x.sign().add_(1).bool().float().add_(-0.5).mul_(2.0): +1 where sign(x) + 1 != 0 (x >= 0, also 0), else -1."""
    return np.where(np.sign(x) + 1 != 0, F32(1.0), F32(-1.0)).astype(F32)


def compressed_allreduce(buffers, worker_errors, server_errors):
    """DeepSpeed's compressed_allreduce called by every rank: buffers[r] is rank r's exp_avg (n floats),
    worker_errors[r] its padded worker error, server_errors[r] its server error (padded / size). Returns the new
    exp_avg (the same on every rank) and updates the error lists in place."""
    size = len(buffers)
    n = buffers[0].size
    padded = worker_errors[0].size
    chunk = padded // size
    signs, scales = [], []
    for r in range(size):
        # buffer_m = torch.cat([buffer_m, zeros]); buffer_m.add_(worker_error)
        x = np.concatenate([buffers[r].astype(F32), np.zeros(padded - n, F32)]) + worker_errors[r]
        x = x.astype(F32)
        ws = F32(norm32(x) / F32(np.sqrt(padded)))
        s = sign_pm1(x)
        worker_errors[r][:] = (x - (ws * s).astype(F32)).astype(F32)
        signs.append(s)
        scales.append(ws)
    # all_to_all_single of the sign chunks, all_gather of the scales; server q owns chunk q
    server_signs, server_scales = [], []
    for q in range(size):
        scaled = [(scales[j] * F32(1.0 / size)).astype(F32) for j in range(size)]  # stack(recvbuf_scale).mul_(1/size)
        c = (signs[0][q * chunk:(q + 1) * chunk] * scaled[0]).astype(F32)
        for j in range(1, size):  # .sum(0), in rank order
            c = (c + (signs[j][q * chunk:(q + 1) * chunk] * scaled[j]).astype(F32)).astype(F32)
        c = (c + server_errors[q]).astype(F32)  # compensated_server_m.add_(server_error)
        ss = F32(norm32(c) / F32(np.sqrt(chunk)))
        s = sign_pm1(c)
        server_errors[q][:] = (c - (ss * s).astype(F32)).astype(F32)
        server_signs.append(s)
        server_scales.append(ss)
    # all_gather of the server signs and scales; buffer_m = unpacked signs * scales, cut to n
    out = np.concatenate([(server_signs[q] * server_scales[q]).astype(F32) for q in range(size)])
    return out[:n].copy()


class OnebitAdam:
    """The optimizer state of every rank and DeepSpeed's step, for a model whose gradient the caller supplies."""

    def __init__(self, params, size, lr, beta1, beta2, eps, weight_decay, freeze_step, exp_avg_mask="none"):
        self.size = size
        self.lr, self.b1, self.b2, self.eps, self.wd = lr, beta1, beta2, eps, weight_decay
        self.freeze_step = freeze_step
        # exp_avg_mask: DeepSpeed's group['exp_avg_mask'] is the user's tensor; "zero_variance" builds it as
        # gradsweep's option describes (0 where the frozen exp_avg_sq is exactly 0, else 1).
        self.mask_kind = exp_avg_mask
        self.mask = None
        n = params.size
        self.params = [params.astype(F32).copy() for _ in range(size)]
        self.m = [np.zeros(n, F32) for _ in range(size)]
        self.v = [np.zeros(n, F32) for _ in range(size)]
        self.worker_error = None
        self.server_error = None
        self.initialize = False
        self.freeze_key = False
        self.step_count = 0

    def _update(self, r):
        p, m, v = self.params[r], self.m[r], self.v[r]
        update = (m / (np.sqrt(v).astype(F32) + F32(self.eps))).astype(F32)
        if self.wd > 0.0:
            update = (update + (F32(self.wd) * p).astype(F32)).astype(F32)
        self.params[r] = (p + (F32(-self.lr) * update).astype(F32)).astype(F32)

    def _first_moment(self, r, g):
        self.m[r] = fma32(F32(1.0 - self.b1), g, (self.m[r] * F32(self.b1)).astype(F32))

    def step(self, averaged=None, local=None):
        """One optimizer step. averaged: the all-reduced mean gradient (what the engine hands over while its
        all-reduce is on); local: the list of each rank's mean gradient (after the freeze)."""
        self.step_count += 1
        n = self.params[0].size
        if not self.initialize:
            # State initialization: error buffers made, the zero exp_avg compressed, no update, errors popped.
            padded = padded_size(n, self.size)
            we = [np.zeros(padded, F32) for _ in range(self.size)]
            se = [np.zeros(padded // self.size, F32) for _ in range(self.size)]
            if self.size > 1:
                out = compressed_allreduce(self.m, we, se)
                self.m = [out.copy() for _ in range(self.size)]
            self.initialize = True
            return "init"
        if not self.freeze_key:
            for r in range(self.size):
                self._first_moment(r, averaged)
                self.v[r] = fma32((F32(1.0 - self.b2) * averaged).astype(F32), averaged,
                                  (self.v[r] * F32(self.b2)).astype(F32))
                self._update(r)
            if self.step_count >= self.freeze_step:
                self.freeze_key = True
            return "warmup"
        if self.worker_error is None:
            padded = padded_size(n, self.size)
            self.worker_error = [np.zeros(padded, F32) for _ in range(self.size)]
            self.server_error = [np.zeros(padded // self.size, F32) for _ in range(self.size)]
        for r in range(self.size):
            self._first_moment(r, local[r])
        if self.size > 1:
            out = compressed_allreduce(self.m, self.worker_error, self.server_error)
            self.m = [out.copy() for _ in range(self.size)]
        if self.mask_kind == "zero_variance":  # exp_avg.mul_(group['exp_avg_mask'])
            if self.mask is None:
                self.mask = np.where(self.v[0] == 0, F32(0.0), F32(1.0)).astype(F32)
            self.m = [(m * self.mask).astype(F32) for m in self.m]
        for r in range(self.size):
            self._update(r)
        return "compressed"


class ZeroOneAdam:
    """DeepSpeed's 0/1 Adam (ZeroOneAdam.step in deepspeed/runtime/fp16/onebit/zoadam.py; arXiv 2202.06009) for every
    rank, transcribed state by state: the per-parameter counters (var_interval, var_counter, local_step_interval,
    local_step_counter, lrs), the optimizer's initialize / freeze_key / reinitial_error_buffer flags, and the engine's
    enable_backward_allreduce flag that the optimizer sets for the next step (true at the start). One parameter
    group holding one flat tensor; the same float32 conventions as OnebitAdam above, and for a tensor divided by a
    Python float (comm_buffer / state['lrs']) torch's CPU kernel: a / float32(lrs)."""

    def __init__(self, params, size, lr, beta1, beta2, eps, weight_decay, var_freeze_step=100000,
                 var_update_scaler=16, local_step_scaler=32678, local_step_clipper=16):
        self.size = size
        self.lr, self.b1, self.b2, self.eps, self.wd = lr, beta1, beta2, eps, weight_decay
        self.var_freeze_step, self.var_update_scaler = var_freeze_step, var_update_scaler
        self.local_step_scaler, self.local_step_clipper = local_step_scaler, local_step_clipper
        n = params.size
        self.params = [params.astype(F32).copy() for _ in range(size)]
        self.m = [np.zeros(n, F32) for _ in range(size)]
        self.v = [np.zeros(n, F32) for _ in range(size)]
        self.worker_error = None  # 'worker_error' not in state
        self.initialize = False
        self.freeze_key = False
        self.reinitial_error_buffer = False
        self.enable_backward_allreduce = True
        self.step_count = 0

    def _init_state(self):
        """The `if not self.initialize or 'worker_error' not in state.keys()` block."""
        n = self.params[0].size
        self.var_interval, self.var_counter = 1, 0
        self.local_step_interval, self.local_step_counter = 1, 0
        self.lrs = [0.0] * self.size
        padded = padded_size(n, self.size)
        self.worker_error = [np.zeros(padded, F32) for _ in range(self.size)]
        self.server_error = [np.zeros(padded // self.size, F32) for _ in range(self.size)]
        self.cb = [np.zeros(n, F32) for _ in range(self.size)]  # momentum_accumulator

    def _first_moment(self, r, g):
        self.m[r] = fma32(F32(1.0 - self.b1), g, (self.m[r] * F32(self.b1)).astype(F32))

    def _denominator(self, r):
        return (np.sqrt(self.v[r]).astype(F32) + F32(self.eps)).astype(F32)

    def _moments(self, grads):
        """The first `if self.initialize:` block; returns the step's kind."""
        if self.freeze_key:
            for r in range(self.size):
                self._first_moment(r, grads[r])
                self.lrs[r] += self.lr
            return "local"
        if self.step_count % self.var_interval == 0:
            for r in range(self.size):
                self.v[r] = fma32((F32(1.0 - self.b2) * grads[r]).astype(F32), grads[r],
                                  (self.v[r] * F32(self.b2)).astype(F32))
                self._first_moment(r, grads[r])
            return "variance"
        if self.size > 1:
            g = compressed_allreduce([x.copy() for x in grads], self.worker_error, self.server_error)
            for r in range(self.size):
                self._first_moment(r, g)
        return "onebit_gradient"

    def _update_and_sync(self):
        """The second `if self.initialize:` block: the update, and the sync when one is due."""
        for r in range(self.size):
            update = (self.m[r] / self._denominator(r)).astype(F32)
            if self.wd > 0.0:
                update = (update + (F32(self.wd) * self.params[r]).astype(F32)).astype(F32)
            x = (F32(-self.lr) * update).astype(F32)
            self.params[r] = (self.params[r] + x).astype(F32)
            if self.freeze_key:
                self.cb[r] = (self.cb[r] + x).astype(F32)
        if not (self.step_count % self.local_step_interval == 0 and self.freeze_key):
            return False
        for r in range(self.size):
            self.params[r] = (self.params[r] + (F32(-1.0) * self.cb[r]).astype(F32)).astype(F32)
            self.cb[r] = (self.cb[r] * self._denominator(r)).astype(F32)
        if self.size > 1:
            out = compressed_allreduce(self.cb, self.worker_error, self.server_error)
            self.cb = [out.copy() for _ in range(self.size)]
        for r in range(self.size):
            q = (self.cb[r] / F32(self.lrs[r])).astype(F32)
            self.m[r] = (np.zeros_like(q) + (F32(-1.0) * q).astype(F32)).astype(F32)
            self.params[r] = (self.params[r] + (self.cb[r] / self._denominator(r)).astype(F32)).astype(F32)
            self.cb[r] = np.zeros_like(self.cb[r])
            self.lrs[r] = 0.0
        return True

    def _counters(self):
        k = self.step_count
        if not self.freeze_key:
            if k % self.var_interval == 0:
                self.var_counter += 1
                if self.var_counter == self.var_update_scaler:
                    self.var_counter = 0
                    self.var_interval *= 2
            self.enable_backward_allreduce = (k + 1) % self.var_interval == 0
        else:
            self.local_step_counter += 1
            if self.local_step_counter == self.local_step_scaler:
                self.local_step_counter = 0
                self.local_step_interval = min(self.local_step_clipper, self.local_step_interval * 2)

    def step(self, averaged, local):
        """One step. averaged: the all-reduced mean gradient (used while the engine's all-reduce is on); local: each
        rank's own mean gradient. Returns the step's kind: init, variance, onebit_gradient, local or sync."""
        grads = [averaged] * self.size if self.enable_backward_allreduce else local
        if not self.initialize or self.worker_error is None:
            self._init_state()
        self.step_count += 1
        if not self.initialize:
            if self.size > 1:  # comm_buffer.set_(compressed_allreduce(comm_buffer, ...)) of the zero accumulator
                out = compressed_allreduce(self.cb, self.worker_error, self.server_error)
                self.cb = [out.copy() for _ in range(self.size)]
            self.freeze_key = False
            self.worker_error = self.server_error = None  # state.pop('worker_error'), state.pop('server_error')
            self.initialize = True
            return "init"
        kind = self._moments(grads)
        if self._update_and_sync():
            kind = "sync"
        self._counters()
        if self.step_count > self.var_freeze_step:
            self.freeze_key = True
            self.enable_backward_allreduce = False
        if self.freeze_key and not self.reinitial_error_buffer:
            for e in self.worker_error + self.server_error:
                e[:] = 0
            self.reinitial_error_buffer = True
        return kind


class OnebitLamb:
    """DeepSpeed's 1-bit LAMB (OnebitLamb.step in deepspeed/runtime/fp16/onebit/lamb.py; arXiv 2104.06069) for every
    rank, transcribed from DeepSpeed's source: per parameter (here: per tensor of `sizes`, cut from one flat vector in
    order) exp_avg, exp_avg_sq, exp_avg_sq_fresh, lamb_coeff_freeze (0.0), last_factor (1.0) and, from the first
    compressed step, scaling_coeff; one flat momentum (exp_avg_flat) through the compressed all-reduce. The same
    float32 conventions as OnebitAdam above; a Python scalar that multiplies or divides a tensor is rounded to float32
    first (torch's CPU kernels); the coefficients, factors and their clipping are Python floats (float64); .item() of a
    float32 tensor is that float32 value as a float64."""

    def __init__(self, params, size, sizes, lr, beta1, beta2, eps, weight_decay, freeze_step, max_coeff=10.0,
                 min_coeff=0.01, coeff_beta=0.9, factor_max=4.0, factor_min=0.5, factor_threshold=0.1,
                 exp_avg_mask="none"):
        self.size, self.sizes = size, list(sizes)
        assert sum(self.sizes) == params.size
        self.lr, self.b1, self.b2, self.eps, self.wd = lr, beta1, beta2, eps, weight_decay
        self.freeze_step = freeze_step
        self.max_coeff, self.min_coeff, self.coeff_beta = max_coeff, min_coeff, coeff_beta
        self.factor_max, self.factor_min, self.factor_threshold = factor_max, factor_min, factor_threshold
        self.mask_kind, self.mask = exp_avg_mask, None
        self.params = [params.astype(F32).copy() for _ in range(size)]
        n = params.size
        self.m = [np.zeros(n, F32) for _ in range(size)]
        self.v = [np.zeros(n, F32) for _ in range(size)]
        self.fresh = [np.zeros(n, F32) for _ in range(size)]
        t = len(self.sizes)
        self.coeff_freeze = [[0.0] * t for _ in range(size)]
        self.last_factor = [[1.0] * t for _ in range(size)]
        self.lamb_coeffs = [[0.0] * t for _ in range(size)]
        self.scaling = None
        self.worker_error = self.server_error = None
        self.initialize = False
        self.freeze_key = False
        self.step_count = 0

    def _slices(self):
        o = 0
        for c in self.sizes:
            yield slice(o, o + c)
            o += c

    def _clip(self, x, lo, hi):
        if x > hi:
            x = hi
        if x < lo:
            x = lo
        return x

    def _warmup(self, r, g):
        self.m[r] = fma32(F32(1.0 - self.b1), g, (self.m[r] * F32(self.b1)).astype(F32))
        self.v[r] = fma32((F32(1.0 - self.b2) * g).astype(F32), g, (self.v[r] * F32(self.b2)).astype(F32))
        if self.step_count == self.freeze_step:
            self.fresh[r] = self.v[r].copy()
        for j, s in enumerate(self._slices()):
            p = self.params[r][s]
            weight_norm = norm32(p)
            update = (self.m[r][s] / (np.sqrt(self.v[r][s]).astype(F32) + F32(self.eps))).astype(F32)
            if self.wd > 0.0:
                update = (update + (F32(self.wd) * p).astype(F32)).astype(F32)
            update_norm = norm32(update)
            coeff = 1.0
            if weight_norm != 0 and update_norm != 0:
                coeff = float(F32(weight_norm / update_norm))
                coeff = self._clip(coeff, self.min_coeff, self.max_coeff)
            if coeff != 1.0:
                self.coeff_freeze[r][j] = self.coeff_beta * self.coeff_freeze[r][j] + (1 - self.coeff_beta) * coeff
            self.lamb_coeffs[r][j] = coeff
            self.params[r][s] = (p + (F32(-self.lr * coeff) * update).astype(F32)).astype(F32)

    def _frozen_update(self, r, last):
        for j, s in enumerate(self._slices()):
            m = self.m[r][s]
            p = self.params[r][s]
            g = ((m - (last[s] * F32(self.b1)).astype(F32)).astype(F32) / F32(1.0 - self.b1)).astype(F32)
            self.fresh[r][s] = fma32((F32(1.0 - self.b2) * g).astype(F32), g,
                                     (self.fresh[r][s] * F32(self.b2)).astype(F32))
            denom = (np.sqrt(self.v[r][s]).astype(F32) + F32(self.eps)).astype(F32)
            prelim = (m / denom).astype(F32)
            update = (prelim + (F32(self.wd) * p).astype(F32)).astype(F32) if self.wd > 0.0 else prelim
            update_norm = norm32(update)
            denom_real = (np.sqrt(self.fresh[r][s]).astype(F32) + F32(self.eps)).astype(F32)
            factor = float(np.max((denom / denom_real).astype(F32)))
            if self.wd > 0.0:
                ratio = min(1.0, float(F32(norm32(prelim) / update_norm)))
                factor = factor * ratio + (1.0 - ratio)
            factor = self._clip(factor, self.factor_min, self.factor_max)
            last_factor = self.last_factor[r][j]
            if factor > last_factor * (1.0 + self.factor_threshold):
                factor = last_factor * (1.0 + self.factor_threshold)
            if factor < last_factor * (1.0 - self.factor_threshold):
                factor = last_factor * (1.0 - self.factor_threshold)
            self.last_factor[r][j] = factor
            coeff = self.coeff_freeze[r][j] * factor
            self.lamb_coeffs[r][j] = coeff
            self.params[r][s] = (p + (F32(-self.lr * coeff) * update).astype(F32)).astype(F32)

    def step(self, averaged, local):
        """One step; averaged: the all-reduced mean gradient (the engine's all-reduce on), local: each rank's own mean
        gradient. Returns init, warmup or compressed."""
        self.step_count += 1
        n = self.params[0].size
        padded = padded_size(n, self.size)
        if not self.initialize:  # the zero momentum through one compressed all-reduce, the buffers popped after it
            if self.size > 1:
                we = [np.zeros(padded, F32) for _ in range(self.size)]
                se = [np.zeros(padded // self.size, F32) for _ in range(self.size)]
                out = compressed_allreduce(self.m, we, se)
                self.m = [out.copy() for _ in range(self.size)]
            self.initialize = True
            return "init"
        if not self.freeze_key:
            for r in range(self.size):
                self._warmup(r, averaged)
            if self.step_count >= self.freeze_step:
                self.freeze_key = True
            return "warmup"
        last = [m.copy() for m in self.m]  # exp_avg_last_step
        if self.scaling is None:  # from rank 0's momentum (every rank's is the same)
            scales = [float(F32(norm32(self.m[0][s]) / F32(np.sqrt(s.stop - s.start)))) for s in self._slices()]
            united = sum(scales) / len(scales)
            self.scaling = [united / x for x in scales]
        for r in range(self.size):
            self.m[r] = fma32(F32(1.0 - self.b1), local[r], (self.m[r] * F32(self.b1)).astype(F32))
            for j, s in enumerate(self._slices()):
                self.m[r][s] = (self.m[r][s] * F32(self.scaling[j])).astype(F32)
        if self.size > 1:
            if self.worker_error is None:
                self.worker_error = [np.zeros(padded, F32) for _ in range(self.size)]
                self.server_error = [np.zeros(padded // self.size, F32) for _ in range(self.size)]
            out = compressed_allreduce(self.m, self.worker_error, self.server_error)
            self.m = [out.copy() for _ in range(self.size)]
        for r in range(self.size):
            for j, s in enumerate(self._slices()):
                self.m[r][s] = (self.m[r][s] / F32(self.scaling[j])).astype(F32)
            if self.mask_kind == "zero_variance":
                if self.mask is None:
                    self.mask = np.where(self.v[0] == 0, F32(0.0), F32(1.0)).astype(F32)
                self.m[r] = (self.m[r] * self.mask).astype(F32)
            self._frozen_update(r, last[r])
        return "compressed"
