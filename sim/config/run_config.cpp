// The field table of RunConfig (visit_fields) and everything derived from it: reading JSON with typed, ranged,
// path-named errors, writing the resolved config, listing fields, did-you-mean for unknown keys. A new option is one
// line in visit_fields.
#include "sim/core/count_text.h"
#include "sim/config/run_config.h"

#include <algorithm>
#include <numeric>
#include <cctype>
#include <functional>
#include <map>
#include <mutex>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/core/json_io.h"
#include "sim/cost/hardware_profile.h"
#include "sim/cost/storage_model.h"
#include "sim/model/dataset.h"
#include "sim/model/model.h"
#include "sim/runtime/device.h"

namespace gs {
namespace {

// A bool given for a field with bool_means: JSON true / false, or the text "true" / "false" (`--set f=true` of a
// string field arrives as text). 1 for true, -1 for false, 0 for anything else.
int as_bool_alias(const json& v) {
  if (v.is_boolean()) return v.get<bool>() ? 1 : -1;
  if (v.is_string() && (v.get<std::string>() == "true" || v.get<std::string>() == "false"))
    return v.get<std::string>() == "true" ? 1 : -1;
  return 0;
}

// Builder for one FieldInfo inside visit_fields.
struct F {
  FieldInfo info;
  F(const char* path, const char* doc) {
    info.path = path;
    info.doc = doc;
  }
  F& one_of(std::initializer_list<const char*> c) {
    for (const char* s : c) info.choices.emplace_back(s);
    return *this;
  }
  F& at_least(double v) { info.min = v; return *this; }
  F& above(double v) { info.min = v; info.min_exclusive = true; return *this; }
  F& at_most(double v) { info.max = v; return *this; }
  F& below(double v) { info.max = v; info.max_exclusive = true; return *this; }
  F& or_inf() { info.allow_inf = true; return *this; }  // integer fields: "inf" is also a value (kStalenessInf)
  // String fields: JSON false and true are also values, read as these choices (a field that used to be a bool).
  F& bool_means(const char* when_false, const char* when_true) {
    info.bool_false = when_false;
    info.bool_true = when_true;
    return *this;
  }
};

// The one table. Order is the order of `gradsweep fields` and of scenarios/README.md.
template <class V>
void visit_fields(V& v, RunConfig& c) {
  v(c.name, F("name", "scenario name: the report folder and the prefix of run ids"));
  auto& m = c.model;
  v(m.kind, F("model.kind", "model (see `gradsweep list`)")
                .one_of({"mlp", "linear", "quadratic", "gpt2-small", "gpt2-xl", "llama-7b", "mpt-125m", "mpt-350m",
                        "mpt-760m", "mpt-1b", "mpt-3b", "mpt-7b"}));
  v(m.layers, F("model.layers", "mlp: widths [in, hidden..., out]; linear: [in, out]").at_least(1).at_most(1 << 20));
  v(m.activation, F("model.activation", "mlp: hidden activation").one_of({"relu", "gelu"}));
  v(m.loss, F("model.loss", "per-sample loss: softmax cross-entropy, or mse = 0.5*||y_hat - y||^2")
                .one_of({"cross_entropy", "mse"}));
  v(m.bias, F("model.bias", "mlp/linear: layers have a bias"));
  v(m.initial_weights, F("model.initial_weights", "linear: explicit initial weights, one row per output"));
  v(m.initial_bias, F("model.initial_bias", "linear: explicit initial bias"));
  v(m.a, F("model.a", "quadratic: curvatures a_ri, one row per rank or one row for all"));
  v(m.b, F("model.b", "quadratic: minimizers b_ri, one row per rank or one row for all"));
  v(m.initial_w, F("model.initial_w", "quadratic: initial parameters"));
  v(m.init_from, F("model.init.from", "mlp, linear, quadratic: initial parameters from a .safetensors or .npz file "
                                      "(F32; F64, F16, BF16 converted), tensors named as torch's state_dict of the "
                                      "same model (docs/models.md); a relative path is taken from the scenario "
                                      "file's folder (empty: the model's own init)"));
  v(m.sequence_length, F("model.sequence_length", "gpt2-small, gpt2-xl, llama-7b, mpt-125m, mpt-350m, mpt-760m, "
                                                  "mpt-1b, mpt-3b, mpt-7b: tokens per sample (0: the preset's "
                                                  "context)")
                           .at_least(0).at_most(1 << 20));

  auto& d = c.data;
  v(d.kind, F("data.kind", "dataset (see `gradsweep list`)").one_of({"fashion_mnist", "teacher", "inline", "none"}));
  v(d.batch_per_rank, F("data.batch_per_rank", "samples per micro-batch per rank (b)").at_least(1).at_most(1 << 20));
  v(d.path, F("data.path", "fashion_mnist: folder of the IDX .gz files; a relative path is taken from the scenario "
                          "file's folder (empty: Debian's dataset-fashion-mnist)"));
  v(d.shuffle, F("data.shuffle", "reshuffle the training set every epoch (from the seed)"));
  v(d.eval_samples, F("data.eval_samples", "fashion_mnist: evaluate on the first n test samples (0: all)").at_least(0));
  auto& t = d.teacher;
  v(t.task, F("data.teacher.task", "teacher: labels or regression targets").one_of({"classification", "regression"}));
  v(t.in_dim, F("data.teacher.in_dim", "teacher: input features").at_least(1).at_most(1 << 16));
  v(t.hidden, F("data.teacher.hidden", "teacher: hidden width").at_least(1).at_most(1 << 16));
  v(t.out_dim, F("data.teacher.out_dim", "teacher: classes or regression outputs").at_least(1).at_most(1 << 16));
  v(t.noise, F("data.teacher.noise", "teacher: target noise stdev (regression) or label-flip probability").at_least(0));
  v(t.train_samples, F("data.teacher.train_samples", "teacher: training set size (one epoch)").at_least(1)
                         .at_most(1e8));
  v(t.eval_samples, F("data.teacher.eval_samples", "teacher: evaluation set size").at_least(1).at_most(1e7));
  v(t.seed, F("data.teacher.seed", "teacher: seed of its weights and samples (fixed across repeats)").at_least(0));
  v(d.ranks, F("data.ranks", "inline: per rank, a list of micro-batches {\"x\": [[...]], \"y\": [[...]]}"));
  v(d.eval, F("data.eval", "inline: evaluation set {\"x\", \"y\"} (null: every training sample)"));
  v(d.prefetch, F("data.prefetch", "loader thread's queue bound in micro-batches (0: no loader thread, each rank reads "
                                   "its own micro-batches)").at_least(0).at_most(1 << 16));
  v(d.storage, F("data.storage", "storage profile of the modeled clock: local_nvme, nfs, object_store "
                                 "(scenarios/hardware/storage/) or {\"bandwidth_GBps\", \"latency_us\", "
                                 "\"concurrency\"}"));
  v(d.cache.policy, F("data.cache.policy", "node cache of decoded samples: none, lru, static (fill once, never evict), "
                                           "partitioned (each rank caches its own part; peers serve the rest)")
                        .one_of({"none", "lru", "static", "partitioned"}));
  v(d.cache.capacity_fraction, F("data.cache.capacity_fraction", "lru, static, partitioned: cache capacity per node "
                                                                 "as a fraction of the training set").at_least(0).at_most(1));
  v(d.cache.capacity_bytes, F("data.cache.capacity_bytes", "lru, static, partitioned: cache capacity per node in "
                                                           "decoded bytes (> 0: used instead of capacity_fraction)").at_least(0));

  auto& cl = c.cluster;
  v(cl.ranks, F("cluster.ranks", "data-parallel ranks (N), one thread each").at_least(1).at_most(kMaxRanks));
  v(cl.backend, F("cluster.backend", "where ranks run; cuda runs the device-resident cuda loop, or the staged path "
                                     "(host loop, GPU model) for what that loop does not run; auto takes cuda when a "
                                     "GPU is usable and the device loop runs the configuration (docs/device.md), else "
                                     "host").one_of({"auto", "host", "cuda"}));
  v(cl.hardware, F("cluster.hardware", "hardware profile of the modeled clock: a name from `gradsweep list`, the "
                                       "path of a profile file (a '/' or .json in it; a relative path is taken from "
                                       "the scenario file's folder), or detect (cuda backend: the detected GPU's "
                                       "profile)"));
  v(cl.nccl_algo, F("cluster.nccl_algo", "modeled clock: the NCCL algorithm collectives use where it serves them, as "
                                         "NCCL_ALGO does (auto: NCCL's choice; nvls needs a profile with NVLink "
                                         "SHARP)").one_of({"auto", "ring", "tree", "nvls"}));
  v(cl.gpu_memory, F("cluster.gpu_memory", "a run whose GPU memory estimate exceeds one GPU of the modeled node: skip "
                                           "(it does not start), or warn (it runs; the report's memory.gpu says it "
                                           "does not fit, e.g. to price a sharded setup the estimate does not model)")
                       .one_of({"skip", "warn"}));
  v(cl.share_identical, F("cluster.share_identical",
                          "in-process ranks share provably identical state (results are the same either way)"));
  v(cl.stragglers.factors, F("cluster.stragglers.factors",
                             "modeled clock: persistent compute slowdown per rank [f_0, ..., f_N-1] (null: all 1)"));
  v(cl.stragglers.noise, F("cluster.stragglers.noise.kind",
                           "modeled clock: per-step compute noise, normal max(0, 1+sigma*Z) or lognormal "
                           "exp(sigma*Z - sigma^2/2)").one_of({"none", "normal", "lognormal"}));
  v(cl.stragglers.sigma, F("cluster.stragglers.noise.sigma", "normal, lognormal: noise sigma (modeled clock)").at_least(0).at_most(10));
  v(cl.stragglers.inject, F("cluster.stragglers.inject",
                            "cuda, auto: also inject the delays for real on the measured clock (auto: "
                            "where it takes the cuda backend)"));

  auto& tr = c.training;
  v(tr.mode, F("training.mode", "train, or timing: no arithmetic and no model memory, the schedule alone is priced "
                                "on the modeled clock (--timing-only)").one_of({"train", "timing"}));
  v(tr.steps, F("training.steps", "optimizer steps (when epochs is 0)").at_least(1).at_most(1e9));
  v(tr.epochs, F("training.epochs", "> 0: train this many epochs instead of `steps`").at_least(0).at_most(1e6));
  v(tr.accumulation_steps, F("training.accumulation_steps", "K micro-batches per optimizer step").at_least(1)
                               .at_most(1 << 16));
  v(tr.pitfall, F("training.pitfall", "a known mistake reproduced on purpose (docs/pitfalls.md): zero_grad_in_loop "
                                      "(gradients zeroed before every micro-batch: each update uses the last "
                                      "micro-batch alone, divided by its own size); mean_of_means (each micro-batch's "
                                      "mean loss divided by K: the mean of per-micro-batch means, inline data); "
                                      "fp16_pure_unscaled (sets precision.mode fp16_pure, loss_scale none); "
                                      "delay_allreduce (sets sync.overlap false)")
                    .one_of({"none", "zero_grad_in_loop", "mean_of_means", "fp16_pure_unscaled", "delay_allreduce"}));
  auto& o = tr.optimizer;
  v(o.kind, F("training.optimizer.kind", "sgd (momentum, nesterov), adam, adamw, onebit_adam (DeepSpeed's 1-bit Adam), "
                                         "zero_one_adam (DeepSpeed's 0/1 Adam); the last two: sync.kind \"allreduce\" "
                                         "only, they own the communication (docs/strategies.md)")
                .one_of({"sgd", "adam", "adamw", "onebit_adam", "zero_one_adam"}));
  v(o.lr, F("training.optimizer.lr", "base learning rate").above(0));
  v(o.momentum, F("training.optimizer.momentum", "sgd: momentum").at_least(0).below(1));
  v(o.nesterov, F("training.optimizer.nesterov", "sgd: Nesterov momentum"));
  v(o.weight_decay, F("training.optimizer.weight_decay", "L2 (sgd, adam) or decoupled (adamw) decay; onebit_adam, "
                                                         "zero_one_adam: DeepSpeed's wd * p added to the update")
                        .at_least(0));
  v(o.beta1, F("training.optimizer.beta1", "adam, adamw, onebit_adam, zero_one_adam: beta1 (DeepSpeed's betas[0])")
                   .at_least(0).below(1));
  v(o.beta2, F("training.optimizer.beta2", "adam, adamw, onebit_adam, zero_one_adam: beta2 (DeepSpeed's betas[1])")
                   .at_least(0).below(1));
  v(o.betas, F("training.optimizer.betas", "adam, adamw, onebit_adam, zero_one_adam: [beta1, beta2], DeepSpeed's and "
                                           "torch's "
                                           "spelling of beta1 and beta2 (give one or the other; null: beta1 and "
                                           "beta2)"));
  v(o.eps, F("training.optimizer.eps", "adam, adamw, onebit_adam, zero_one_adam: epsilon").above(0));
  v(o.freeze_step, F("training.optimizer.freeze_step", "onebit_adam: optimizer steps before the variance freezes and "
                                                       "the momentum travels 1-bit compressed (DeepSpeed's default "
                                                       "100000; steps 2 .. max(2, freeze_step) are uncompressed Adam)")
                       .at_least(0).at_most(1e12));
  v(o.exp_avg_mask, F("training.optimizer.exp_avg_mask", "onebit_adam: DeepSpeed's exp_avg_mask, multiplied into "
                                                         "the momentum after every compressed all-reduce (1-bit "
                                                         "values are never 0): none (DeepSpeed's default), or "
                                                         "zero_variance (0 where the frozen variance is exactly 0)")
                        .one_of({"none", "zero_variance"}));
  v(o.var_freeze_step, F("training.optimizer.var_freeze_step", "zero_one_adam: the last step whose variance may "
                                                               "update; from the first step k > var_freeze_step on "
                                                               "(k >= 2) the variance is frozen and the local steps "
                                                               "begin (DeepSpeed's default 100000)")
                           .at_least(0).at_most(1e12));
  v(o.var_update_scaler, F("training.optimizer.var_update_scaler", "zero_one_adam: variance updates (every "
                                                                   "var_interval-th step, var_interval from 1) after "
                                                                   "which var_interval doubles (the paper's kappa; "
                                                                   "DeepSpeed's default 16)")
                             .at_least(1).at_most(1e12));
  v(o.local_step_scaler, F("training.optimizer.local_step_scaler", "zero_one_adam: frozen steps after which the "
                                                                   "local-step interval doubles (DeepSpeed's default "
                                                                   "32678)")
                             .at_least(1).at_most(1e12));
  v(o.local_step_clipper, F("training.optimizer.local_step_clipper", "zero_one_adam: the largest local-step "
                                                                     "interval (the paper's H; DeepSpeed's default "
                                                                     "16); a frozen step k syncs when k % interval "
                                                                     "== 0")
                              .at_least(1).at_most(1e12));
  v(o.first_moment, F("training.optimizer.first_moment", "adam, adamw: the first moment's update as PyTorch >= 2.0 "
                                                         "(lerp: exp_avg.lerp_(grad, 1 - beta1)) or 1.13 (mul_add: "
                                                         "exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)) writes it; "
                                                         "they differ in the last bit (docs/parity.md)")
                        .one_of({"lerp", "mul_add"}));
  auto& s = tr.schedule;
  v(s.kind, F("training.schedule.kind", "learning-rate schedule").one_of({"constant", "step", "warmup_cosine"}));
  v(s.step_size, F("training.schedule.step_size", "step: decay every n optimizer steps").at_least(1));
  v(s.gamma, F("training.schedule.gamma", "step: decay factor").above(0));
  v(s.warmup_steps, F("training.schedule.warmup_steps", "warmup_cosine: linear warm-up steps").at_least(0));
  v(s.min_lr, F("training.schedule.min_lr", "warmup_cosine: final learning rate").at_least(0));
  v(tr.eval_every, F("training.eval_every", "evaluate every E optimizer steps and after the last (0: last only)")
                       .at_least(0));
  v(tr.clip_grad_norm, F("training.clip_grad_norm", "clip the averaged gradient to this global L2 norm after "
                                                     "unscaling (torch clip_grad_norm_; 0: off); parameter_server: "
                                                     "each worker clips its own mean gradient before its push")
                           .at_least(0));
  v(tr.target.metric, F("training.target.metric", "time to target: metric (empty: none)")
                          .one_of({"", "eval_accuracy", "eval_loss", "train_loss"}));
  v(tr.target.value, F("training.target.value", "time to target: accuracy >= value, or loss <= value"));
  v(tr.seed, F("training.seed", "seed of initialization and shuffling (repeat r uses seed + r)").at_least(0)
                 .at_most(4294967295.0));
  v(tr.run_timeout_s, F("training.run_timeout_s", "wall-clock limit of one run in seconds: past it the run stops at "
                                                  "the next step boundary as `timeout` (0: none)").at_least(0).at_most(1e7));
  v(tr.activation_checkpointing,
    F("training.activation_checkpointing", "gpt2-small, gpt2-xl, llama-7b, mpt-125m, mpt-350m, mpt-760m, mpt-1b, "
                                           "mpt-3b, mpt-7b: keep only each block's input and recompute the block "
                                           "in the backward (torch.utils.checkpoint per block): GPU memory "
                                           "estimate and modeled clock (one more forward of every block)"));

  auto& sy = c.sync;
  v(sy.kind, F("sync.kind", "sync strategy (see `gradsweep list`)")
                 .one_of({"allreduce", "independent", "local_sgd", "parameter_server", "zero"}));
  v(sy.stage, F("sync.stage", "zero: DeepSpeed's ZeRO stage: 1 shards the optimizer state, 2 also the gradients "
                              "(FSDP SHARD_GRAD_OP), 3 also the parameters (FSDP FULL_SHARD); same arithmetic as "
                              "allreduce, GPU memory and modeled clock differ").at_least(1).at_most(3));
  v(sy.reduce_every_microbatch,
    F("sync.reduce_every_microbatch", "zero: at sync.stage 2 or 3 with training.accumulation_steps > 1, "
                                      "reduce-scatter every micro-batch's gradient as its backward ends and keep "
                                      "only the shard's sum (DeepSpeed stage 2, FSDP without no_sync: the gradient "
                                      "stays sharded, K reduce-scatters per step); false: one reduce-scatter of the "
                                      "accumulated gradient after the last micro-batch (the whole gradient is held "
                                      "until then)"));
  v(sy.bucket_mb, F("sync.bucket_mb", "allreduce, local_sgd, parameter_server, zero: bucket size in MiB (after the first)").above(0).at_most(1 << 20));
  v(sy.first_bucket_mb, F("sync.first_bucket_mb", "allreduce, local_sgd, parameter_server, zero: first bucket in MiB").above(0).at_most(1 << 20));
  v(sy.staleness, F("sync.staleness", "allreduce: delayed update, the step-t update applies the averaged gradient of "
                                      "step t-s (0: synchronous; steps t < s apply nothing). parameter_server: 0 = BSP, "
                                      "s = SSP (a worker starts clock c only when every worker finished clock c - s - "
                                      "1), \"inf\" = asynchronous; SSP and asynchronous servers apply each push at "
                                      "lr / ranks").at_least(0).at_most(1024).or_inf());
  v(sy.overlap, F("sync.overlap", "allreduce: buckets start during backward (false: after the whole backward, apex's "
                                  "delay_allreduce; same arithmetic, modeled clock only)"));
  v(sy.period, F("sync.period", "local_sgd: average the parameters after steps H, 2H, ... (H = period, counted "
                                "after the warm-up)").at_least(1).at_most(1e9));
  v(sy.average_optimizer_state, F("sync.average_optimizer_state",
                                  "local_sgd: also average the optimizer state (momentum, Adam moments) when averaging"));
  v(sy.warmup_steps, F("sync.warmup_steps", "local_sgd: first steps run as synchronous all-reduce (post-local SGD, "
                                            "Lin et al. 2020)").at_least(0).at_most(1e9));
  v(sy.shards, F("sync.shards", "parameter_server: server shards the parameters are split over (0: one per rank); "
                                  "priced on the modeled clock, which orders SSP and asynchronous pushes, so under "
                                  "those it also changes the result (BSP results do not change)")
                   .at_least(0).at_most(kMaxRanks));
  v(sy.dedicated, F("sync.dedicated", "parameter_server: shards on dedicated devices (every push and pull crosses the "
                                      "wire) instead of co-located with the workers; arithmetic unchanged, but the modeled prices "
                                      "order SSP and asynchronous pushes, so under those the result changes too"));
  v(sy.ordering, F("sync.ordering", "parameter_server: order of pushes and pulls, by modeled time with ties by rank "
                                    "(reproducible) or as the threads race (real)").one_of({"modeled", "real"}));
  auto& cp = c.compression;
  v(cp.kind, F("compression.kind", "gradient compressor (see `gradsweep list`); parameter_server: each worker encodes "
                                   "its push (own error feedback), the server decodes and sums in fp32, pulls stay "
                                   "dense fp32 (every kind but powersgd)")
                 .one_of({"none", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "topk", "randomk", "threshold", "dgc", "qsgd",
                          "terngrad", "signsgd", "onebit", "powersgd"}));
  v(cp.error_feedback, F("compression.error_feedback",
                         "fp16, bf16, fp8_e4m3, fp8_e5m2, topk, randomk, threshold, qsgd, terngrad, "
                         "signsgd, onebit, powersgd: where error feedback sits (every lossy kind but dgc). gradient "
                         "(also true): each rank keeps e, sends C(g + e), e = g + e - decode(sent); momentum "
                         "(topk, randomk, threshold; allreduce, sgd without nesterov): DGC's momentum correction, "
                         "u = m u + g, v = v + u, send C(v), u and v zeroed where sent, the optimizer without its "
                         "momentum m; ef21 (allreduce): each rank sends c = C(g - g_i), g_i += c, the update is the "
                         "mean of the g_i; none (also false)")
                             .one_of({"none", "gradient", "momentum", "ef21"})
                             .bool_means("none", "gradient"));
  v(cp.divide, F("compression.divide", "allreduce, zero: casts send each rank's mean gradient (its sum / its samples, "
                                       "in fp32, as DDP's fp16_compress_hook) and divide by the ranks N in the "
                                       "format before the sum, after it, or split (2^floor(log2(N)/2) before, the "
                                       "rest after); not parameter_server (each worker pushes its mean gradient "
                                       "cast; the server rescales each by its samples, sums in fp32, then "
                                       "divides)").one_of({"pre", "post", "split"}));
  v(cp.accumulate, F("compression.accumulate", "fp16, bf16, fp8_e4m3, fp8_e5m2: the all-reduce sums in the wire "
                                               "format, rounding at every add as NCCL's ring does (wire), or in fp32 "
                                               "(fp32: a reduce-scatter of the cast values summed in fp32 by each "
                                               "chunk's owner, then an all-gather of the fp32 sums; wire bytes "
                                               "(N-1)/N x (cast + 4) per element, as Megatron's fp32 grad "
                                               "all-reduce of cast values)").one_of({"wire", "fp32"}));
  v(cp.ratio, F("compression.ratio", "topk, randomk, dgc: fraction of values kept (when k is 0)").above(0)
                  .at_most(1));
  v(cp.k, F("compression.k", "topk, randomk: values kept per bucket (0: use ratio)").at_least(0));
  v(cp.scope, F("compression.scope", "topk: select per bucket or over the whole model").one_of({"bucket", "model"}));
  v(cp.shared_indices, F("compression.shared_indices", "randomk: the same index set on every rank (not sent)"));
  v(cp.unbiased, F("compression.unbiased", "randomk: scale kept values by d/k (unbiased)"));
  v(cp.tau, F("compression.tau", "threshold: send values with abs(p) >= tau").at_least(0));
  v(cp.levels, F("compression.levels", "qsgd: quantization levels s").at_least(1).at_most(1 << 20));
  v(cp.vote, F("compression.vote", "signsgd: receivers take the majority vote of signs (sign(0) = 0)"));
  v(cp.rank, F("compression.rank", "powersgd: rank r per matrix").at_least(1).at_most(1 << 16));
  v(cp.start_step, F("compression.start_step", "powersgd: dense fp32 all-reduce before this step (0-based)")
                       .at_least(0));
  v(cp.min_compression_rate,
    F("compression.min_compression_rate", "powersgd: a matrix [rows, count / rows] is compressed iff (rows + cols) "
                                          "r x this < rows cols, else sent dense (PowerSGDState's "
                                          "min_compression_rate; torch's default is 2)").at_least(1));
  v(cp.orthogonalization_epsilon,
    F("compression.orthogonalization_epsilon",
      "powersgd: Gram-Schmidt divides each column of P and Q by its norm + this, in PyTorch's units of mean "
      "gradients (PowerSGDState's orthogonalization_epsilon; 0, torch's default, turns an all-zero column into NaN "
      "as torch does; 1e-8 keeps it 0)").at_least(0));
  v(cp.momentum, F("compression.momentum", "dgc: momentum of the local momentum correction").at_least(0).below(1));
  v(cp.clip_norm, F("compression.clip_norm", "dgc: local gradient clipping to this L2 norm (0: off)").at_least(0));
  v(cp.warmup_steps, F("compression.warmup_steps", "dgc: exponential warm-up of the ratio over these steps (0: none)")
                         .at_least(0));
  v(cp.sample_ratio, F("compression.sample_ratio", "dgc: fraction of values sampled for the threshold").above(0)
                         .at_most(1));
  v(cp.expected_density,
    F("compression.expected_density", "threshold, dgc: the fraction of each bucket's values kept, which depends on the "
                                      "gradient: required in (0, 1] by timing-only runs (training.mode \"timing\"), "
                                      "which price the payload from it (dgc: the density after its warm-up, whose "
                                      "steps follow the warm-up schedule ending at it); training runs measure it (0: "
                                      "not given)")
        .at_least(0).at_most(1));
  v(cp.measure_error, F("compression.measure_error",
                        "fp16, bf16, fp8_e4m3, fp8_e5m2, topk, randomk, threshold, dgc, qsgd, "
                        "terngrad, signsgd, onebit, powersgd: report the relative error of the decoded average (costs "
                        "one fp32 all-reduce, not counted)"));
  auto& pr = c.precision;
  v(pr.mode, F("precision.mode", "fp32; tf32 (GPU only); bf16_mixed, fp16_mixed (fp32 master weights, operands rounded "
                                 "to the format, fp32 accumulation); fp16_pure (weights, gradients, optimizer state in "
                                 "fp16); fp8_mixed (E4M3 forward, E5M2 gradients, per-tensor amax scaling)")
                 .one_of({"fp32", "tf32", "bf16_mixed", "fp16_mixed", "fp16_pure", "fp8_mixed"}));
  v(pr.loss_scale, F("precision.loss_scale", "auto: dynamic for fp16_mixed, none otherwise; dynamic: "
                                             "torch.amp.GradScaler's rule; static: initial_scale throughout")
                       .one_of({"auto", "none", "static", "dynamic"}));
  v(pr.initial_scale, F("precision.initial_scale", "dynamic, static: initial (dynamic) or fixed (static) loss scale").above(0)
                          .at_most(3.4e38));
  v(pr.growth_factor, F("precision.growth_factor", "dynamic: scale multiplier after growth_interval clean steps")
                          .above(1));
  v(pr.backoff_factor, F("precision.backoff_factor", "dynamic: scale multiplier on an inf/NaN gradient").above(0)
                           .below(1));
  v(pr.growth_interval, F("precision.growth_interval", "dynamic: clean optimizer steps between growths").at_least(1)
                            .at_most(1e9));
  v(pr.amax_history_len, F("precision.amax_history_len", "fp8_mixed: steps of amax history per tensor (scale = "
                                                         "format max / max of the history)").at_least(1).at_most(1 << 20));
  v(c.report.trace, F("report.trace", "record every rank's parameters after every step (<= report.trace_max_params "
                                      "parameters)"));
  v(c.report.trace_max_params, F("report.trace_max_params", "the largest model report.trace records; a larger limit "
                                                            "is taken on request, up to a trace of about 256 MiB of "
                                                            "report ((steps + 1) x ranks x parameters numbers, about "
                                                            "28 bytes each)").at_least(1).at_most(1e9));
  v(c.report.save_weights, F("report.save_weights", "write the initial and/or final parameters as safetensors "
                                                   "files in weights/ beside the report, named in the run's "
                                                   "`weights` (torch state_dict names, docs/parity.md)")
                               .one_of({"none", "initial", "final", "both"}));
  v(c.report.save_batches, F("report.save_batches", "write the training-set indices of every step, rank and "
                                                    "micro-batch as batches/<run>.npz beside the report (int32 "
                                                    "[steps, ranks, micro-batches, batch]; fashion_mnist, teacher; "
                                                    "docs/parity.md)"));
  v(c.report.timeline, F("report.timeline", "write the modeled clock of the run as a Chrome trace-event file "
                                           "(Perfetto, chrome://tracing) in timeline/ beside the report; runs of at "
                                           "most 50 optimizer steps (docs/profiling.md)"));
}

// Walks a dotted path into j; nullptr if absent.
const json* find_path(const json& j, const std::string& path) {
  const json* cur = &j;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(key);
    if (it == cur->end()) return nullptr;
    cur = &*it;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

std::string range_text_numeric(const FieldInfo& f);
std::string range_text(const FieldInfo& f) {
  std::string r = range_text_numeric(f);
  if (!f.allow_inf) return r;
  return r.empty() ? "or \"inf\"" : r + " or \"inf\"";
}
std::string range_text_numeric(const FieldInfo& f) {
  bool has_min = f.min > -1e307, has_max = f.max < 1e307;
  auto num = [](double x) { return fmt::format("{}", x); };
  if (has_min && has_max && f.min == f.max && !f.min_exclusive && !f.max_exclusive)
    return fmt::format("equal to {}", num(f.min));
  if (has_min && has_max)
    return fmt::format("{} {} and {} {}", f.min_exclusive ? ">" : ">=", num(f.min), f.max_exclusive ? "<" : "<=",
                       num(f.max));
  if (has_min) return fmt::format("{} {}", f.min_exclusive ? ">" : ">=", num(f.min));
  if (has_max) return fmt::format("{} {}", f.max_exclusive ? "<" : "<=", num(f.max));
  return "";
}

bool in_range(const FieldInfo& f, double x) {
  if (f.min_exclusive ? !(x > f.min) : !(x >= f.min)) return false;
  if (f.max_exclusive ? !(x < f.max) : !(x <= f.max)) return false;
  return true;
}

// Integer from JSON: integers, and floats with an integral value (1e3) within int64.
bool as_int(const json& j, int64_t& out) {
  if (j.is_number_integer()) {
    if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return false;
    out = j.get<int64_t>();
    return true;
  }
  if (j.is_number_float()) {
    double d = j.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) {
      out = static_cast<int64_t>(d);
      return true;
    }
  }
  return false;
}

std::string show(const json& j) { return bounded_dump(j, 60); }

// Number fields the arithmetic holds as float32 (the optimizer's and loss scaler's scalars, clipping, the threshold
// compressor's tau): a value that would round to inf there, or, for a field that must be > 0, to 0, is refused with
// the field's path like any other out-of-range value. (true: the field must be > 0.)
const std::map<std::string, bool>& float32_fields() {
  static const std::map<std::string, bool> fields = {
      {"training.optimizer.lr", true},     {"training.optimizer.weight_decay", false},
      {"training.optimizer.eps", true},    {"training.schedule.min_lr", false},
      {"training.clip_grad_norm", false},  {"precision.initial_scale", true},
      {"precision.growth_factor", false},  {"precision.backoff_factor", true},
      {"compression.tau", false}};
  return fields;
}

class Reader {
 public:
  Reader(const json& j, std::vector<ConfigIssue>& issues) : j_(j), issues_(issues) {}

  template <class T>
  void operator()(T& ref, const F& f) {
    const json* v = find_path(j_, f.info.path);
    if (v == nullptr) return;  // default stays
    read(ref, *v, f.info);
  }

 private:
  void read(int64_t& ref, const json& v, const FieldInfo& f) {
    if (f.allow_inf && v.is_string() && v.get<std::string>() == "inf") {
      ref = std::numeric_limits<int64_t>::max();
      return;
    }
    int64_t x = 0;
    std::string r = range_text(f);
    if (!as_int(v, x)) return add(f, v, std::string("an integer") + (r.empty() ? "" : " " + r));
    if (!in_range(f, static_cast<double>(x))) return add(f, v, "an integer " + r);
    ref = x;
  }
  void read(double& ref, const json& v, const FieldInfo& f) {
    std::string r = range_text(f);
    if (!v.is_number()) return add(f, v, std::string("a number") + (r.empty() ? "" : " " + r));
    double x = v.get<double>();
    if (!std::isfinite(x) || !in_range(f, x)) return add(f, v, "a number " + r);
    if (const auto it = float32_fields().find(f.path); it != float32_fields().end()) {
      const std::string problem = float32_range_problem(x, it->second);
      if (!problem.empty())
        return add(f, v, std::string("a number") + (r.empty() ? "" : " " + r) + " that fits float32 (" + problem + ")");
    }
    ref = x;
  }
  void read(bool& ref, const json& v, const FieldInfo& f) {
    if (!v.is_boolean()) return add(f, v, "true or false");
    ref = v.get<bool>();
  }
  void read(std::string& ref, const json& v, const FieldInfo& f) {
    if (!f.bool_true.empty() && as_bool_alias(v) != 0) {
      ref = as_bool_alias(v) > 0 ? f.bool_true : f.bool_false;
      return;
    }
    std::string expected = "one of " + choices(f);
    if (!f.bool_true.empty())
      expected += fmt::format(" (or true for \"{}\", false for \"{}\")", f.bool_true, f.bool_false);
    if (!v.is_string()) return add(f, v, f.choices.empty() ? "a string" : expected);
    std::string s = v.get<std::string>();
    if (!f.choices.empty() && std::find(f.choices.begin(), f.choices.end(), s) == f.choices.end())
      return add(f, v, expected);
    ref = s;
  }
  void read(std::vector<int64_t>& ref, const json& v, const FieldInfo& f) {
    std::string r = range_text(f);
    std::string what = "a list of integers" + (r.empty() ? "" : " " + r);
    if (!v.is_array()) return add(f, v, what);
    std::vector<int64_t> out;
    for (size_t i = 0; i < v.size(); ++i) {
      int64_t x = 0;
      if (!as_int(v[i], x) || !in_range(f, static_cast<double>(x))) {
        issues_.push_back({fmt::format("{}[{}]", f.path, i), fmt::format("expected an integer {}, got {}", r,
                                                                        show(v[i]))});
        bad_.push_back(f.path);
        return;
      }
      out.push_back(x);
    }
    ref = out;
  }
  void read(json& ref, const json& v, const FieldInfo&) { ref = v; }

  static std::string choices(const FieldInfo& f) {
    std::string s;
    for (size_t i = 0; i < f.choices.size(); ++i) s += (i ? ", " : "") + json(f.choices[i]).dump();
    return s;
  }
  void add(const FieldInfo& f, const json& v, const std::string& expected) {
    issues_.push_back({f.path, fmt::format("expected {}, got {}", expected, show(v))});
    bad_.push_back(f.path);
  }

  const json& j_;
  std::vector<ConfigIssue>& issues_;
  std::vector<std::string> bad_;  // fields whose value was refused (they keep their default)

 public:
  const std::vector<std::string>& bad_fields() const { return bad_; }
};

// training.optimizer.betas [b1, b2] (DeepSpeed's and torch's spelling) into beta1 and beta2, and betas back to null
// (a resolved config writes beta1 and beta2). Refused, with its path, beside beta1 or beta2, or as anything but two
// numbers >= 0 and < 1. Returns false when refused.
bool read_betas(const json& j, OptimizerConfig& o, std::vector<ConfigIssue>& issues) {
  const std::string path = "training.optimizer.betas";
  const json v = o.betas;
  o.betas = nullptr;
  if (v.is_null()) return true;
  auto refuse = [&](const std::string& at, const std::string& msg) {
    issues.push_back({at, msg});
    return false;
  };
  for (const char* one : {"training.optimizer.beta1", "training.optimizer.beta2"})
    if (const json* b = find_path(j, one); b != nullptr && !b->is_null())
      return refuse(path, fmt::format("give the betas once, as betas [beta1, beta2] (DeepSpeed's spelling) or as "
                                      "beta1 and beta2, not both: {} is given too", one));
  if (!v.is_array() || v.size() != 2)
    return refuse(path, "expected a list of two numbers [beta1, beta2], each >= 0 and < 1, got " + show(v));
  for (size_t i = 0; i < 2; ++i)
    if (!v[i].is_number() || !(v[i].get<double>() >= 0.0 && v[i].get<double>() < 1.0))
      return refuse(fmt::format("{}[{}]", path, i), fmt::format("expected a number >= 0 and < 1 ({}), got {}",
                                                                i == 0 ? "beta1" : "beta2", show(v[i])));
  o.beta1 = v[0].get<double>();
  o.beta2 = v[1].get<double>();
  return true;
}

// The fields of j into c (Reader, then betas into beta1 and beta2); returns the fields whose value was refused.
std::vector<std::string> read_fields(const json& j, RunConfig& c, std::vector<ConfigIssue>& issues) {
  Reader r(j, issues);
  visit_fields(r, c);
  std::vector<std::string> bad = r.bad_fields();
  if (!read_betas(j, c.training.optimizer, issues)) bad.push_back("training.optimizer.betas");
  // Fields whose default 0 means "not given": whether the input gives them (null is the default, as in sweeps).
  auto given = [&](const char* path) {
    const json* v = find_path(j, path);
    return v != nullptr && !v->is_null();
  };
  c.training.target.value_given = given("training.target.value");
  c.compression.expected_density_given = given("compression.expected_density");
  return bad;
}

class Writer {
 public:
  template <class T>
  void operator()(T& ref, const F& f) {
    out_[json::json_pointer("/" + replace_dots(f.info.path))] = ref;
  }
  void operator()(int64_t& ref, const F& f) {
    json v = ref;
    if (f.info.allow_inf && ref == std::numeric_limits<int64_t>::max()) v = "inf";
    out_[json::json_pointer("/" + replace_dots(f.info.path))] = v;
  }
  json out_ = json::object();

 private:
  static std::string replace_dots(std::string p) {
    std::replace(p.begin(), p.end(), '.', '/');
    return p;
  }
};

class Lister {
 public:
  template <class T>
  void operator()(T& ref, const F& f) {
    FieldInfo info = f.info;
    info.type = type_of(ref);
    info.default_value = ref;
    fields_.push_back(info);
  }
  std::vector<FieldInfo> fields_;

 private:
  static FieldType type_of(int64_t&) { return FieldType::kInt; }
  static FieldType type_of(double&) { return FieldType::kNumber; }
  static FieldType type_of(bool&) { return FieldType::kBool; }
  static FieldType type_of(std::string&) { return FieldType::kString; }
  static FieldType type_of(std::vector<int64_t>&) { return FieldType::kIntList; }
  static FieldType type_of(json&) { return FieldType::kJson; }
};

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// Every known object path ("model", "training.optimizer", ...) and leaf path.
const std::set<std::string>& known_paths() {
  static const std::set<std::string> paths = [] {
    std::set<std::string> s;
    for (const auto& f : config_fields()) {
      s.insert(f.path);
      for (size_t dot = f.path.find('.'); dot != std::string::npos; dot = f.path.find('.', dot + 1))
        s.insert(f.path.substr(0, dot));
    }
    return s;
  }();
  return paths;
}


void find_unknown(const json& j, const std::string& prefix, std::vector<ConfigIssue>& issues) {
  if (!j.is_object()) {
    if (!prefix.empty()) issues.push_back({prefix, fmt::format("expected an object, got {}", show(j))});
    return;
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (!known_paths().count(path)) {
      std::string hint = suggest_key(path);
      issues.push_back({path, "unknown key" + (hint.empty() ? std::string() : "; did you mean \"" + hint + "\"?")});
    } else if (!is_config_field(path)) {
      find_unknown(it.value(), path, issues);
    }
  }
}

// v as a resolved config writes it: a bool given for a string field with bool_means becomes its choice.
json resolved_value(const std::string& path, const json& v) {
  if (as_bool_alias(v) == 0) return v;
  for (const auto& f : config_fields())
    if (f.path == path && !f.bool_true.empty()) return json(as_bool_alias(v) > 0 ? f.bool_true : f.bool_false);
  return v;
}

// Fields that only mean something for one kind; giving them for another kind is a mistake, not a no-op. Every field
// whose doc starts with "<kinds>: " (choices of one selector field) has a rule here (a test walks the docs).
void check_kind_specific(const json& j, std::vector<ConfigIssue>& issues) {
  struct Rule {
    const char* path;
    const char* kind_path;
    const char* kind_default;
    std::vector<const char*> kinds;
    bool loss_scale = false;  // kind_path is precision.loss_scale: "auto" is dynamic for fp16_mixed, none otherwise
  };
  static const std::vector<const char*> kBucketed = {"allreduce", "local_sgd", "parameter_server", "zero"};
  static const std::vector<const char*> kCaching = {"lru", "static", "partitioned"};
  static const std::vector<Rule> kRules = {
      {"data.ranks", "data.kind", "fashion_mnist", {"inline"}},
      {"data.eval", "data.kind", "fashion_mnist", {"inline"}},
      {"data.teacher", "data.kind", "fashion_mnist", {"teacher"}},
      {"data.path", "data.kind", "fashion_mnist", {"fashion_mnist"}},
      {"data.eval_samples", "data.kind", "fashion_mnist", {"fashion_mnist"}},
      {"model.initial_weights", "model.kind", "mlp", {"linear"}},
      {"model.initial_bias", "model.kind", "mlp", {"linear"}},
      {"model.a", "model.kind", "mlp", {"quadratic"}},
      {"model.b", "model.kind", "mlp", {"quadratic"}},
      {"model.initial_w", "model.kind", "mlp", {"quadratic"}},
      {"model.init.from", "model.kind", "mlp", {"mlp", "linear", "quadratic"}},
      {"model.sequence_length", "model.kind", "mlp",
       {"gpt2-small", "gpt2-xl", "llama-7b", "mpt-125m", "mpt-350m", "mpt-760m", "mpt-1b", "mpt-3b", "mpt-7b"}},
      {"training.activation_checkpointing", "model.kind", "mlp",
       {"gpt2-small", "gpt2-xl", "llama-7b", "mpt-125m", "mpt-350m", "mpt-760m", "mpt-1b", "mpt-3b", "mpt-7b"}},
      {"sync.stage", "sync.kind", "allreduce", {"zero"}},
      {"sync.reduce_every_microbatch", "sync.kind", "allreduce", {"zero"}},
      {"sync.shards", "sync.kind", "allreduce", {"parameter_server"}},
      {"sync.dedicated", "sync.kind", "allreduce", {"parameter_server"}},
      {"sync.ordering", "sync.kind", "allreduce", {"parameter_server"}},
      {"compression.error_feedback", "compression.kind", "none",
       {"fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "topk", "randomk", "threshold", "qsgd", "terngrad", "signsgd",
        "onebit", "powersgd"}},
      {"compression.divide", "compression.kind", "none", {"fp16", "bf16", "fp8_e4m3", "fp8_e5m2"}},
      {"compression.accumulate", "compression.kind", "none", {"fp16", "bf16", "fp8_e4m3", "fp8_e5m2"}},
      {"compression.measure_error", "compression.kind", "none",
       {"fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "topk", "randomk", "threshold", "dgc", "qsgd", "terngrad", "signsgd",
        "onebit", "powersgd"}},
      {"compression.ratio", "compression.kind", "none", {"topk", "randomk", "dgc"}},
      {"compression.k", "compression.kind", "none", {"topk", "randomk"}},
      {"compression.scope", "compression.kind", "none", {"topk"}},
      {"compression.shared_indices", "compression.kind", "none", {"randomk"}},
      {"compression.unbiased", "compression.kind", "none", {"randomk"}},
      {"compression.tau", "compression.kind", "none", {"threshold"}},
      {"compression.levels", "compression.kind", "none", {"qsgd"}},
      {"compression.vote", "compression.kind", "none", {"signsgd"}},
      {"compression.rank", "compression.kind", "none", {"powersgd"}},
      {"compression.start_step", "compression.kind", "none", {"powersgd"}},
      {"compression.min_compression_rate", "compression.kind", "none", {"powersgd"}},
      {"compression.orthogonalization_epsilon", "compression.kind", "none", {"powersgd"}},
      {"compression.momentum", "compression.kind", "none", {"dgc"}},
      {"compression.clip_norm", "compression.kind", "none", {"dgc"}},
      {"compression.warmup_steps", "compression.kind", "none", {"dgc"}},
      {"compression.sample_ratio", "compression.kind", "none", {"dgc"}},
      {"compression.expected_density", "compression.kind", "none", {"threshold", "dgc"}},
      {"sync.staleness", "sync.kind", "allreduce", {"allreduce", "parameter_server"}},
      {"sync.overlap", "sync.kind", "allreduce", {"allreduce"}},
      {"sync.period", "sync.kind", "allreduce", {"local_sgd"}},
      {"sync.average_optimizer_state", "sync.kind", "allreduce", {"local_sgd"}},
      {"sync.warmup_steps", "sync.kind", "allreduce", {"local_sgd"}},
      // The parameter server sums decoded casts in fp32 and divides after: divide is an all-reduce choice.
      {"compression.divide", "sync.kind", "allreduce", {"allreduce", "zero"}},
      {"compression.accumulate", "sync.kind", "allreduce", {"allreduce", "zero"}},
      {"sync.bucket_mb", "sync.kind", "allreduce", kBucketed},
      {"sync.first_bucket_mb", "sync.kind", "allreduce", kBucketed},
      {"training.optimizer.momentum", "training.optimizer.kind", "sgd", {"sgd"}},
      {"training.optimizer.nesterov", "training.optimizer.kind", "sgd", {"sgd"}},
      {"training.optimizer.beta1", "training.optimizer.kind", "sgd", {"adam", "adamw", "onebit_adam", "zero_one_adam"}},
      {"training.optimizer.beta2", "training.optimizer.kind", "sgd", {"adam", "adamw", "onebit_adam", "zero_one_adam"}},
      {"training.optimizer.betas", "training.optimizer.kind", "sgd", {"adam", "adamw", "onebit_adam", "zero_one_adam"}},
      {"training.optimizer.eps", "training.optimizer.kind", "sgd", {"adam", "adamw", "onebit_adam", "zero_one_adam"}},
      {"training.optimizer.freeze_step", "training.optimizer.kind", "sgd", {"onebit_adam"}},
      {"training.optimizer.exp_avg_mask", "training.optimizer.kind", "sgd", {"onebit_adam"}},
      {"training.optimizer.var_freeze_step", "training.optimizer.kind", "sgd", {"zero_one_adam"}},
      {"training.optimizer.var_update_scaler", "training.optimizer.kind", "sgd", {"zero_one_adam"}},
      {"training.optimizer.local_step_scaler", "training.optimizer.kind", "sgd", {"zero_one_adam"}},
      {"training.optimizer.local_step_clipper", "training.optimizer.kind", "sgd", {"zero_one_adam"}},
      {"training.optimizer.first_moment", "training.optimizer.kind", "sgd", {"adam", "adamw"}},
      {"training.schedule.step_size", "training.schedule.kind", "constant", {"step"}},
      {"training.schedule.gamma", "training.schedule.kind", "constant", {"step"}},
      {"training.schedule.warmup_steps", "training.schedule.kind", "constant", {"warmup_cosine"}},
      {"training.schedule.min_lr", "training.schedule.kind", "constant", {"warmup_cosine"}},
      {"precision.growth_factor", "precision.loss_scale", "auto", {"dynamic"}, true},
      {"precision.backoff_factor", "precision.loss_scale", "auto", {"dynamic"}, true},
      {"precision.growth_interval", "precision.loss_scale", "auto", {"dynamic"}, true},
      {"precision.initial_scale", "precision.loss_scale", "auto", {"dynamic", "static"}, true},
      {"precision.amax_history_len", "precision.mode", "fp32", {"fp8_mixed"}},
      {"model.activation", "model.kind", "mlp", {"mlp"}},
      {"model.bias", "model.kind", "mlp", {"mlp", "linear"}},
      {"model.layers", "model.kind", "mlp", {"mlp", "linear"}},
      // "auto" may take the cuda backend; where it cannot, validate_config says why (it needs a usable GPU).
      {"cluster.stragglers.inject", "cluster.backend", "auto", {"cuda", "auto"}},
      {"cluster.stragglers.noise.sigma", "cluster.stragglers.noise.kind", "none", {"normal", "lognormal"}},
      {"data.cache.capacity_fraction", "data.cache.policy", "none", kCaching},
      {"data.cache.capacity_bytes", "data.cache.policy", "none", kCaching},
  };
  static const RunConfig kDefaultConfig;
  static const json defaults = config_to_json(kDefaultConfig);
  std::string mode = "fp32";  // precision.mode, for "auto" loss scale
  if (const json* m = find_path(j, "precision.mode"); m != nullptr && m->is_string()) mode = m->get<std::string>();
  for (const auto& r : kRules) {
    const json* v = find_path(j, r.path);
    if (v == nullptr || v->is_null()) continue;
    const json* dv = find_path(defaults, r.path);
    if (dv != nullptr && *dv == resolved_value(r.path, *v)) continue;  // the default, as a resolved config writes it
    const json* k = find_path(j, r.kind_path);
    std::string kind = k != nullptr && k->is_string() ? k->get<std::string>() : r.kind_default;
    if (k != nullptr && !k->is_string()) continue;  // the kind's own error is reported
    bool known_kind = false;  // a kind that is no choice has its own error; the rule would depend on a mistyped field
    for (const auto& f : config_fields())
      if (f.path == r.kind_path)
        known_kind = std::find(f.choices.begin(), f.choices.end(), kind) != f.choices.end();
    if (!known_kind) continue;
    std::string shown = "\"" + kind + "\"";
    if (r.loss_scale && kind == "auto") {
      kind = mode == "fp16_mixed" ? "dynamic" : "none";
      shown = fmt::format("\"auto\", which is \"{}\" for precision.mode \"{}\"", kind, mode);
    }
    bool ok = false;
    for (const char* allowed : r.kinds) ok = ok || kind == allowed;
    if (!ok) {
      std::string allowed = "\"" + std::string(r.kinds.front()) + "\"";
      for (size_t i = 1; i < r.kinds.size(); ++i)
        allowed += (i + 1 == r.kinds.size() ? " or \"" : ", \"") + std::string(r.kinds[i]) + "\"";
      issues.push_back({r.path, fmt::format("only applies when {} is {} (it is {})", r.kind_path, allowed, shown)});
    }
  }
}

// An exception from a model or dataset factory as an issue: "path: message" split, internal file:line and the
// "(expected ...)" tail of GS_EXPECT dropped.
ConfigIssue issue_from_exception(const std::string& what, const std::string& fallback_path) {
  std::string m = what;
  if (m.rfind("sim/", 0) == 0) {
    size_t colon = m.find(": ");
    if (colon != std::string::npos) m = m.substr(colon + 2);
  }
  size_t tail = m.rfind(" (expected ");
  if (tail != std::string::npos && m.back() == ')') m = m.substr(0, tail);
  size_t colon = m.find(": ");
  if (colon != std::string::npos) {
    std::string head = m.substr(0, colon);
    bool is_path = !head.empty() && head.find(' ') == std::string::npos &&
                   (head.find('.') != std::string::npos || head.find('[') != std::string::npos);
    if (is_path) return {head, m.substr(colon + 2)};
  }
  return {fallback_path, m};
}

// training.pitfall fp16_pure_unscaled and delay_allreduce stand for settings of other fields: a field the scenario
// leaves out takes the pitfall's value; one it sets to anything else is refused (validate_config checks the result).
void apply_pitfall_alias(const json& j, RunConfig& c, std::vector<ConfigIssue>& issues) {
  const std::string& p = c.training.pitfall;
  auto given = [&](const char* path) {
    const json* v = find_path(j, path);
    return v != nullptr && !v->is_null();
  };
  if (p == "fp16_pure_unscaled") {
    if (!given("precision.mode")) c.precision.mode = "fp16_pure";
    else if (c.precision.mode != "fp16_pure")
      issues.push_back({"precision.mode", "training.pitfall \"fp16_pure_unscaled\" is precision.mode \"fp16_pure\" "
                                          "(leave it out or set \"fp16_pure\"), got \"" + c.precision.mode + "\""});
    if (!given("precision.loss_scale")) c.precision.loss_scale = "none";
    else if (c.precision.loss_scale != "none" && c.precision.loss_scale != "auto")
      issues.push_back({"precision.loss_scale", "training.pitfall \"fp16_pure_unscaled\" has no loss scaling (leave "
                                                "it out or set \"none\"), got \"" + c.precision.loss_scale + "\""});
  } else if (p == "delay_allreduce") {
    if (!given("sync.overlap")) c.sync.overlap = false;
    else if (c.sync.overlap)
      issues.push_back({"sync.overlap", "training.pitfall \"delay_allreduce\" is sync.overlap false (leave it out or "
                                        "set false), got true"});
  }
}

// Values a mistyped field could have been meant to take, for cross_field_issues_despite: its default, every choice
// (strings), true and false, the ends of its range and a few values between (numbers), a few layer lists.
std::vector<json> candidate_values(const FieldInfo& f) {
  std::vector<json> out{f.default_value};
  auto push = [&](const json& v) {
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  };
  switch (f.type) {
    case FieldType::kString:
      for (const auto& ch : f.choices) push(ch);
      if (f.choices.empty()) push("x");
      break;
    case FieldType::kBool:
      push(true);
      push(false);
      break;
    case FieldType::kInt:
    case FieldType::kNumber: {
      const bool integer = f.type == FieldType::kInt;
      std::vector<double> xs = {0.0, 0.5, 1.0, 2.0, 3.0, 8.0, 100.0, 1e4};
      if (f.min > -1e300) xs.push_back(f.min_exclusive ? (integer ? f.min + 1 : f.min + 1e-6) : f.min);
      if (f.max < 1e300) xs.push_back(f.max_exclusive ? (integer ? f.max - 1 : f.max * (1 - 1e-9)) : f.max);
      for (double x : xs) {
        if (integer && x != std::floor(x)) continue;
        if (!in_range(f, x)) continue;
        if (integer) push(static_cast<int64_t>(x));
        else push(x);
      }
      if (f.allow_inf) push("inf");
      break;
    }
    case FieldType::kIntList:
      push(json::array({1, 1}));
      push(json::array({784, 10}));
      push(json::array({784, 64, 10}));
      push(json::array({32, 64, 10}));
      break;
    case FieldType::kJson:
      break;
  }
  return out;
}

// report.trace's limits: the model's parameters against report.trace_max_params (with the size a larger limit would
// cost), and the trace's estimated size in the report against kTraceMaxBytes.
void trace_size_issues(const RunConfig& c, const Model& model, const std::function<bool(const std::string&)>& clean,
                       std::vector<ConfigIssue>& issues) {
  const auto n = static_cast<double>(model.num_params());
  const bool steps_known = c.training.epochs <= 0 && clean("training.steps") && clean("cluster.ranks");
  const double numbers = (static_cast<double>(c.training.steps) + 1) * static_cast<double>(c.cluster.ranks) * n;
  const double mib = numbers * kTraceBytesPerNumber / 1048576.0;
  // The most steps a trace of this run can have within kTraceMaxBytes (the initial snapshot is one more).
  const double max_steps =
      std::floor(kTraceMaxBytes / kTraceBytesPerNumber / (static_cast<double>(c.cluster.ranks) * n)) - 1;
  if (n > static_cast<double>(c.report.trace_max_params)) {
    // The way on that passes: raising the limit alone, when the trace also fits the size limit; else fewer steps too.
    std::string hint;
    if (steps_known && numbers * kTraceBytesPerNumber <= kTraceMaxBytes)
      hint = fmt::format(" (report.trace_max_params {:.0f} takes it: a trace of about {:.0f} MiB of report for {} x "
                         "{})", n, mib, count_text(c.training.steps, "step"), count_text(c.cluster.ranks, "rank"));
    else if (steps_known && max_steps >= 1)
      hint = fmt::format(" (report.trace_max_params {:.0f} with training.steps at most {:.0f} takes it: the trace of "
                         "{} would be about {:.0f} MiB of report, more than the limit of {:.0f} MiB)", n,
                         max_steps, count_text(c.training.steps, "step"), mib, kTraceMaxBytes / 1048576);
    else if (steps_known)
      hint = fmt::format(" (one step of {} would already be more than the limit of {:.0f} MiB of report)",
                         count_text(c.cluster.ranks, "rank"), kTraceMaxBytes / 1048576);
    issues.push_back({"report.trace", fmt::format("trace is refused above {} parameters; this model has {:.0f}{}",
                                                  c.report.trace_max_params, n, hint)});
    return;
  }
  if (steps_known && numbers * kTraceBytesPerNumber > kTraceMaxBytes)
    issues.push_back({"report.trace", fmt::format("a trace of {} steps x {} ranks x {:.0f} parameters is about {:.0f} "
                                                  "MiB of report, more than the limit of {:.0f} MiB: at most {:.0f} "
                                                  "steps of this run",
                                                  c.training.steps, c.cluster.ranks, n, mib, kTraceMaxBytes / 1048576,
                                                  max_steps)});
}

// The size limits of a run: model construction, parameters (2^32 for a run with arithmetic), compression.k at most
// the parameters, report.trace at most kTraceMaxParams, the teacher's size, the steps given as epochs. Each is judged
// whenever its own inputs are well-typed and free of other problems (`clean(p)`: no mistyped field and no issue at
// path p or under the prefix p), so a problem elsewhere (a mistyped cluster.ranks, a failing schedule rule) does not
// hide them. Inputs: model.* (and cluster.ranks for quadratic curvatures per rank), training.mode, compression.k,
// report.trace; report.timeline with training.steps, sync.*; data.kind, data.teacher.*; training.epochs,
// cluster.ranks, training.accumulation_steps, data.batch_per_rank.
void size_limit_issues(const RunConfig& c, const std::function<bool(const std::string&)>& clean,
                       std::vector<ConfigIssue>& issues) {
  auto add = [&](const std::string& path, const std::string& msg) { issues.push_back({path, msg}); };
  const bool arithmetic_known = clean("training.mode");
  const bool arithmetic = c.training.mode != "timing";
  if (clean("model.") && clean("model") && (c.model.kind != "quadratic" || clean("cluster.ranks"))) {
    try {
      auto model = make_model(c);
      if (arithmetic_known && static_cast<double>(model->num_params()) > kMaxParams && arithmetic)
        add("model.layers", fmt::format("{} parameters is more than the limit of {:.0f} (2^32) for a run with "
                                        "arithmetic", model->num_params(), kMaxParams));
      // k values per bucket: more than the whole model can never be kept (and each kept value also sends its index,
      // so k near the bucket size already costs more than the dense gradient).
      if (clean("compression.k") && c.compression.k > static_cast<int64_t>(model->num_params()))
        add("compression.k", fmt::format("at most the model's {} parameters, got {}", model->num_params(),
                                         c.compression.k));
      if (clean("report.trace") && clean("report.trace_max_params") && c.report.trace)
        trace_size_issues(c, *model, clean, issues);
      // report.timeline: per rank and step about 2 slices per micro-batch, 3 per bucket (encode, collective, decode)
      // and a dozen others (phases, the loader, the measured phases); buckets of the gradient in fp32 as
      // make_buckets cuts them (whole tensors make it a few more or fewer).
      if (clean("report.timeline") && c.report.timeline && c.training.epochs <= 0 && clean("training.steps") &&
          clean("cluster.ranks") && clean("training.accumulation_steps") && clean("sync.")) {
        const double bytes = 4.0 * static_cast<double>(model->num_params());
        const double first = c.sync.first_bucket_mb * 1048576.0, rest = c.sync.bucket_mb * 1048576.0;
        const double buckets = c.sync.kind == "independent" ? 0.0 : 1.0 + std::ceil(std::max(0.0, bytes - first) / rest);
        const double per_step = static_cast<double>(c.cluster.ranks) *
                                (2.0 * static_cast<double>(c.training.accumulation_steps) + 3.0 * buckets + 12.0);
        const double slices = per_step * static_cast<double>(c.training.steps);
        if (slices > kTimelineMaxSlices)
          add("report.timeline", fmt::format("the timeline would hold about {:.0f} slices (ranks x (2 x micro-batches "
                                             "+ 3 x {:.0f} buckets + 12) per step), more than the limit of {:.0f}: at "
                                             "most {} of this run, or larger sync.bucket_mb",
                                             slices, buckets, kTimelineMaxSlices,
                                             count_text(std::floor(kTimelineMaxSlices / per_step), "step")));
      }
    } catch (const std::exception& e) {
      issues.push_back(issue_from_exception(e.what(), "model"));
    }
  }
  if (!arithmetic_known || !arithmetic) return;  // timing-only runs read no data
  // Absurd data settings for a run with arithmetic, refused before anything is built (the limits are far above
  // any real use and keep validation itself bounded in time and memory).
  const auto& d = c.data;
  if (d.kind == "teacher" && clean("data.kind") && clean("data.teacher.")) {
    const auto& t = d.teacher;
    const double weights = static_cast<double>(t.hidden) * static_cast<double>(t.in_dim + t.out_dim);
    const double eval_madds = static_cast<double>(t.eval_samples) * weights;
    if (weights > kMaxTeacherWeights)
      add("data.teacher.hidden", fmt::format("the teacher has {:.0f} weights (hidden x (in_dim + out_dim)), more "
                                             "than the limit of {:.0f}", weights, kMaxTeacherWeights));
    else if (eval_madds > kMaxTeacherEvalMadds)
      add("data.teacher.eval_samples", fmt::format("generating the evaluation set takes {:.3g} multiply-adds "
                                                   "(eval_samples x hidden x (in_dim + out_dim)), more than the "
                                                   "limit of {:.0e}", eval_madds, kMaxTeacherEvalMadds));
  }
  if (c.training.epochs > 0 && (d.kind == "teacher" || d.kind == "fashion_mnist") && clean("training.epochs") &&
      clean("data.kind") && clean("data.teacher.train_samples") && clean("cluster.ranks") &&
      clean("training.accumulation_steps") && clean("data.batch_per_rank")) {
    const double train = d.kind == "teacher" ? static_cast<double>(d.teacher.train_samples) : 60000.0;
    const double global = static_cast<double>(c.cluster.ranks) * static_cast<double>(c.training.accumulation_steps) *
                          static_cast<double>(d.batch_per_rank);
    const double steps = std::floor(c.training.epochs * std::floor(train / global));
    if (steps > kMaxSteps)
      add("training.epochs", fmt::format("{} epoch{} {:.0f} optimizer steps, more than the limit of {:.0f}",
                                         c.training.epochs, c.training.epochs == 1 ? " is" : "s are", steps,
                                         kMaxSteps));
  }
}

// clean(p) for size_limit_issues: true when no path among `taken` (mistyped fields, issue paths) is p, is under p
// (p ends with '.'), or indexes into p (p[...]).
std::function<bool(const std::string&)> clean_unless(std::vector<std::string> taken) {
  return [taken = std::move(taken)](const std::string& p) {
    for (const auto& t : taken) {
      if (t == p || (t.rfind(p, 0) == 0 && (p.back() == '.' || t[p.size()] == '[' || t[p.size()] == '.')))
        return false;
    }
    return true;
  };
}

// The cross-field issues (pitfall aliases and validate_config without the structural checks) of a configuration
// with no type or range error.
std::vector<ConfigIssue> cross_field_issues(const json& j) {
  std::vector<ConfigIssue> out;
  RunConfig c;
  read_fields(j, c, out);
  if (!out.empty()) return out;
  apply_pitfall_alias(j, c, out);
  if (!out.empty()) return out;
  validate_config(c, out, /*structural_checks=*/false);
  return out;
}

// The cross-field issues of j that do not depend on the fields in `bad` (mistyped or out of range in j): those that
// are found whatever value each bad field takes among candidate_values (one field varied at a time, the others at
// their default). An issue on a bad field itself is left out (its own error is reported). When no rule fails and no
// bad field feeds the structural checks (model, data, ranks, steps, compression, precision, report), those run too.
std::vector<ConfigIssue> cross_field_issues_despite(const json& j, const std::vector<std::string>& bad) {
  if (!j.is_object()) return {};
  std::vector<const FieldInfo*> fields;
  for (const auto& path : bad)
    for (const auto& f : config_fields())
      if (f.path == path && std::find(fields.begin(), fields.end(), &f) == fields.end()) fields.push_back(&f);
  auto set = [](json& doc, const std::string& path, const json& v) {
    // Sections on the way that are no object (reported by find_unknown) become objects.
    for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', dot + 1)) {
      std::string section = "/" + path.substr(0, dot);
      std::replace(section.begin(), section.end(), '.', '/');
      const json::json_pointer sp(section);
      if (doc.contains(sp) && !doc[sp].is_object()) doc[sp] = json::object();
    }
    std::string ptr = "/" + path;
    std::replace(ptr.begin(), ptr.end(), '.', '/');
    doc[json::json_pointer(ptr)] = v;
  };
  json base = j;
  for (const FieldInfo* f : fields) set(base, f->path, f->default_value);
  auto key = [](const ConfigIssue& i) { return i.path + "\n" + i.message; };
  std::vector<ConfigIssue> kept;
  std::vector<ConfigIssue> at_default = cross_field_issues(base);
  // The size limits whose own inputs are neither mistyped nor part of a kept problem (size_limit_issues).
  auto with_size_limits = [&](std::vector<ConfigIssue> out) {
    std::vector<ConfigIssue> read_issues;
    RunConfig c;
    read_fields(base, c, read_issues);
    if (!read_issues.empty()) return out;
    std::vector<std::string> taken = bad;
    for (const auto& i : out) taken.push_back(i.path);
    size_limit_issues(c, clean_unless(std::move(taken)), out);
    return out;
  };
  if (at_default.empty()) {
    // No rule across fields fails: the structural checks (model and dataset construction, which run only on a config
    // whose rules hold) still can, unless a bad field is one of their inputs.
    static const char* const kStructuralInputs[] = {"model.", "data.", "cluster.ranks", "training.steps",
                                                    "training.epochs", "training.accumulation_steps",
                                                    "training.mode", "compression.", "precision.", "report."};
    bool touches = false;
    for (const FieldInfo* f : fields)
      for (const char* in : kStructuralInputs) touches = touches || f->path.rfind(in, 0) == 0;
    if (touches) return with_size_limits({});
    std::vector<ConfigIssue> out;
    RunConfig c;
    read_fields(base, c, out);
    if (out.empty()) apply_pitfall_alias(base, c, out);
    if (out.empty()) validate_config(c, out);
    return out;
  }
  for (auto& i : at_default) {
    bool on_bad = false;
    for (const FieldInfo* f : fields)
      on_bad = on_bad || i.path == f->path || i.path.rfind(f->path + "[", 0) == 0;
    if (!on_bad) kept.push_back(std::move(i));
  }
  for (const FieldInfo* f : fields) {
    for (const json& v : candidate_values(*f)) {
      if (kept.empty()) return with_size_limits({});
      if (v == f->default_value) continue;
      json variant = base;
      set(variant, f->path, v);
      std::set<std::string> found;
      for (const auto& i : cross_field_issues(variant)) found.insert(key(i));
      kept.erase(std::remove_if(kept.begin(), kept.end(), [&](const ConfigIssue& i) { return !found.count(key(i)); }),
                 kept.end());
    }
  }
  return with_size_limits(std::move(kept));
}

// The rules of the files exchanged with PyTorch (model.init.from, report.save_weights, report.save_batches;
// docs/parity.md): what they apply to and the size of the batches file.
void interop_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  auto add = [&](const std::string& path, const std::string& msg) { issues.push_back({path, msg}); };
  const bool timing = c.training.mode == "timing";
  if (!c.model.init_from.empty() && (!c.model.initial_weights.is_null() || !c.model.initial_bias.is_null()))
    add("model.init.from", "give the initial values once: a file (model.init.from) or model.initial_weights / "
                           "initial_bias, not both");
  if (timing && c.report.save_weights != "none")
    add("report.save_weights", "timing-only runs hold no parameters to save: use \"none\"");
  if (!c.report.save_batches) return;
  if (timing) return add("report.save_batches", "timing-only runs draw no batches: use false");
  const auto& d = c.data;
  if (d.kind != "fashion_mnist" && d.kind != "teacher")
    return add("report.save_batches", "the indices are of an indexed training set (data.kind fashion_mnist or "
                                      "teacher); data.kind \"" + d.kind + "\" has none" +
                                      (d.kind == "inline" ? " (its micro-batches are in the configuration: rank r's "
                                                            "step t uses data.ranks[r][(t K + k) mod its count])"
                                                          : ""));
  if (c.sync.kind == "parameter_server" && c.sync.staleness != 0)
    return add("report.save_batches", "SSP and asynchronous workers take different numbers of steps, so there is "
                                      "no [steps, ranks, ...] array of them: use sync.staleness 0 (BSP) or false");
  double steps = static_cast<double>(c.training.steps);
  const double global = static_cast<double>(c.cluster.ranks) * static_cast<double>(c.training.accumulation_steps) *
                        static_cast<double>(d.batch_per_rank);
  if (c.training.epochs > 0) {
    const double train = d.kind == "teacher" ? static_cast<double>(d.teacher.train_samples) : 60000.0;
    steps = std::max(1.0, std::floor(c.training.epochs * std::floor(train / global)));
  }
  if (steps * global > kSaveBatchesMaxIndices)
    add("report.save_batches", fmt::format("the file would hold {:.0f} indices (steps x ranks x accumulation_steps x "
                                           "batch_per_rank, {:.0f} MiB of int32), more than the limit of {:.0f} "
                                           "({:.0f} MiB): at most {} of this run",
                                           steps * global, steps * global * 4 / 1048576, kSaveBatchesMaxIndices,
                                           kSaveBatchesMaxIndices * 4 / 1048576,
                                           count_text(std::floor(kSaveBatchesMaxIndices / global), "step")));
}

}  // namespace

bool is_config_field(const std::string& path) {
  for (const auto& f : config_fields())
    if (f.path == path) return true;
  return false;
}

const std::vector<FieldInfo>& config_fields() {
  static const std::vector<FieldInfo> fields = [] {
    RunConfig defaults;
    Lister l;
    visit_fields(l, defaults);
    return l.fields_;
  }();
  return fields;
}

std::string suggest_key(const std::string& path) {
  size_t dot = path.rfind('.');
  std::string parent = dot == std::string::npos ? "" : path.substr(0, dot);
  std::string leaf = dot == std::string::npos ? path : path.substr(dot + 1);
  std::string best;
  size_t best_d = std::max<size_t>(2, leaf.size() / 3) + 1;
  // Siblings first (a typo), then the same leaf name elsewhere (a key in the wrong section).
  for (const auto& p : known_paths()) {
    size_t pd = p.rfind('.');
    std::string pp = pd == std::string::npos ? "" : p.substr(0, pd);
    std::string pl = pd == std::string::npos ? p : p.substr(pd + 1);
    if (pp != parent) continue;
    size_t d = edit_distance(leaf, pl);
    if (d < best_d) {
      best_d = d;
      best = p;
    }
  }
  if (!best.empty() && best != path) return best;
  for (const auto& p : known_paths()) {
    size_t pd = p.rfind('.');
    std::string pl = pd == std::string::npos ? p : p.substr(pd + 1);
    if (pl == leaf && p != path) return p;
  }
  return "";
}

RunConfig config_from_json(const json& j, std::vector<ConfigIssue>& issues) {
  RunConfig c;
  if (!j.is_object()) {
    issues.push_back({"", fmt::format("expected a JSON object, got {}", show(j))});
    return c;
  }
  find_unknown(j, "", issues);
  check_kind_specific(j, issues);
  {
    const json* value = find_path(j, "training.target.value");
    const json* metric = find_path(j, "training.target.metric");
    bool is_default = value != nullptr && value->is_number() && value->get<double>() == 0.0;  // as resolved configs write it
    if (value != nullptr && !is_default &&
        (metric == nullptr || (metric->is_string() && metric->get<std::string>().empty())))
      issues.push_back({"training.target.value", "a target value needs training.target.metric"});
  }
  size_t before = issues.size();
  std::vector<std::string> bad = read_fields(j, c, issues);
  for (const auto& f : config_fields()) {
    // A field under a section given as something else than an object ("model": "mlp", reported by find_unknown)
    // could not be read either: its default must not be judged against the other fields.
    for (size_t dot = f.path.find('.'); dot != std::string::npos; dot = f.path.find('.', dot + 1)) {
      const json* v = find_path(j, f.path.substr(0, dot));
      if (v != nullptr && !v->is_object()) {
        bad.push_back(f.path);
        break;
      }
    }
  }
  if (!bad.empty()) {
    // Some fields are mistyped: report the cross-field problems that do not depend on them (see the header).
    for (auto& i : cross_field_issues_despite(j, bad)) issues.push_back(std::move(i));
    return c;
  }
  if (issues.size() == before) apply_pitfall_alias(j, c, issues);
  if (issues.size() == before) {
    validate_config(c, issues);
  } else {  // a pitfall alias was refused: the size limits whose inputs it does not name are still judged
    std::vector<std::string> taken;
    for (size_t i = before; i < issues.size(); ++i) taken.push_back(issues[i].path);
    size_limit_issues(c, clean_unless(std::move(taken)), issues);
  }
  return c;
}

json config_to_json(const RunConfig& c) {
  Writer w;
  visit_fields(w, const_cast<RunConfig&>(c));  // Writer only reads
  return w.out_;
}

// compression.error_feedback "momentum" and "ef21": what each placement needs (sim/compress/reduce.cpp).
void check_error_feedback(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  const std::string& ef = c.compression.error_feedback;
  if (ef != "momentum" && ef != "ef21") return;
  // q names the field in messages at other paths; at its own path the value alone (the path is printed before it).
  const std::string q = "compression.error_feedback \"" + ef + "\"", own = "\"" + ef + "\"";
  if (c.sync.kind != "allreduce")
    issues.push_back({"compression.error_feedback",
                      fmt::format("{} applies to sync.kind \"allreduce\" (it is \"{}\"{})", own, c.sync.kind,
                                  c.sync.kind == "parameter_server"
                                      ? "; a parameter server's pushes take \"gradient\" or \"none\""
                                      : "")});
  if (ef != "momentum") return;
  const std::string& k = c.compression.kind;
  if (k != "topk" && k != "randomk" && k != "threshold")
    issues.push_back({"compression.error_feedback",
                      fmt::format("{} is DGC's momentum correction of a sparsifier: it needs compression.kind "
                                  "\"topk\", \"randomk\" or \"threshold\" (it is \"{}\"; \"dgc\" has its own)", own, k)});
  const OptimizerConfig& o = c.training.optimizer;
  if (o.kind != "sgd")
    issues.push_back({"training.optimizer.kind",
                      fmt::format("{} moves SGD's momentum into each rank's velocity: it needs \"sgd\", got \"{}\"",
                                  q, o.kind)});
  else if (o.nesterov)
    issues.push_back({"training.optimizer.nesterov",
                      q + " runs heavy-ball momentum in each rank's velocity; Nesterov is not modeled there, got true"});
}

// sync.reduce_every_microbatch (sync.kind "zero"; another kind is refused by check_kind_specific): sharded gradients
// (stage 2 or 3), reduced in fp32.
void check_reduce_every_microbatch(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  if (c.sync.kind != "zero" || !c.sync.reduce_every_microbatch) return;
  const std::string path = "sync.reduce_every_microbatch";
  if (c.sync.stage < 2)
    issues.push_back({path, "true needs sharded gradients, sync.stage 2 or 3 (stage 1 keeps the whole gradient on "
                            "every rank and reduces it once per accumulation window, as DeepSpeed's stage 1 does), got "
                            "sync.stage 1"});
  if (c.compression.kind != "none")
    issues.push_back({path, fmt::format("true reduce-scatters each micro-batch in fp32; with compression.kind \"{}\" "
                                        "use false (one cast reduce-scatter per step)", c.compression.kind)});
  else if (c.precision.mode == "fp16_pure")
    issues.push_back({path, "true reduce-scatters each micro-batch in fp32; precision.mode \"fp16_pure\" sends fp16 "
                            "gradients: use false (one fp16 reduce-scatter per step)"});
}

// training.optimizer.kind "onebit_adam" (sim/strategy/onebit_adam.cpp) and "zero_one_adam"
// (sim/strategy/zero_one_adam.cpp) own the gradient's communication: the full-precision all-reduce of the steps that
// update the variance and DeepSpeed's compressed all-reduce of the momentum (or, for 0/1 Adam, of the gradient and of
// the accumulated update). Settings that would change either are refused.
void check_onebit_adam(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  if (!owns_communication(c.training.optimizer)) return;
  const std::string by = "training.optimizer.kind \"" + c.training.optimizer.kind + "\" ";
  auto add = [&](const std::string& path, const std::string& msg) { issues.push_back({path, by + msg}); };
  if (c.sync.kind != "allreduce")
    add("sync.kind", "runs its own all-reduce (uncompressed while the variance updates, DeepSpeed's compressed "
                     "all-reduce otherwise); it replaces sync.kind \"allreduce\" and combines with no other strategy "
                     "(DeepSpeed refuses it under ZeRO too): expected \"allreduce\", got \"" + c.sync.kind + "\"");
  if (c.compression.kind != "none")
    add("compression.kind", "compresses what it sends itself (1 bit per value with error feedback on worker and "
                            "server): expected \"none\", got \"" + c.compression.kind + "\"");
  if (c.sync.kind == "allreduce" && c.sync.staleness != 0)
    add("sync.staleness", "applies every step's momentum in that step: expected 0, got " +
                              fmt::format("{}", c.sync.staleness));
  if (c.precision.mode == "fp16_pure")
    add("precision.mode", "keeps fp32 parameters and state here (fp16_pure's fp16 storage is not modeled for it): "
                          "expected another mode, got \"fp16_pure\"");
  else if (c.precision.loss_scale == "static" || c.precision.loss_scale == "dynamic" ||
           (c.precision.loss_scale == "auto" && c.precision.mode == "fp16_mixed"))
    add("precision.loss_scale", "runs without a loss scaler here (DeepSpeed's FP16_Optimizer scaler is not modeled "
                                "for it): expected \"none\" (or \"auto\" outside fp16_mixed), got \"" +
                                    c.precision.loss_scale + "\"");
  if (c.training.clip_grad_norm > 0)
    add("training.clip_grad_norm", fmt::format("does not clip (DeepSpeed's OnebitAdam and ZeroOneAdam keep "
                                               "max_grad_norm but never apply it): expected 0, got {}", c.training.clip_grad_norm));
  if (c.training.pitfall != "none")
    add("training.pitfall", "is modeled without the pitfalls (they change the divisors of the plain all-reduce): "
                            "expected \"none\", got \"" + c.training.pitfall + "\"");
}

void validate_config(const RunConfig& c, std::vector<ConfigIssue>& issues, bool structural_checks) {
  auto add = [&](const std::string& path, const std::string& msg) { issues.push_back({path, msg}); };
  {
    // The name is a folder name (reports/<name>) and the prefix of run ids.
    bool ok = !c.name.empty() && c.name.size() <= 100 && c.name[0] != '.' && c.name[0] != '-';
    for (char ch : c.name) ok = ok && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' ||
                                       ch == '.');
    if (!ok)
      add("name", fmt::format("expected 1 to 100 letters, digits, '_', '-' or '.' not starting with '.' or '-' "
                              "(it names the report folder), got {}", bounded_dump(json(c.name))));
  }
  if (c.training.schedule.kind == "warmup_cosine" && c.training.schedule.min_lr > c.training.optimizer.lr)
    add("training.schedule.min_lr", fmt::format("expected <= training.optimizer.lr ({}), got {}",
                                                c.training.optimizer.lr, c.training.schedule.min_lr));
  // (under another optimizer kind, check_kind_specific refuses nesterov)
  if (c.training.optimizer.nesterov && c.training.optimizer.kind == "sgd" && c.training.optimizer.momentum <= 0)
    add("training.optimizer.nesterov", "Nesterov needs training.optimizer.momentum > 0");
  // A field some mode requires, left out (read_fields' *_given), is said to be required, not to be "0"; a 0 given is
  // quoted.
  const TargetConfig& target = c.training.target;
  if (target.metric == "eval_accuracy" && !target.value_given)
    add("training.target.value", "required by training.target.metric \"eval_accuracy\": expected the accuracy to "
                                 "reach, in (0, 1] (e.g. 0.8)");
  else if ((target.metric == "eval_loss" || target.metric == "train_loss") && !target.value_given)
    add("training.target.value",
        fmt::format("required by training.target.metric \"{}\": expected the loss to reach (the target is met at "
                    "{} <= value; e.g. 0.5)", target.metric, target.metric));
  else if (c.training.target.metric == "eval_accuracy" && !(c.training.target.value > 0 && c.training.target.value <= 1))
    add("training.target.value", fmt::format("an accuracy target is in (0, 1], got {}", c.training.target.value));
  if (c.data.kind == "teacher" && c.data.teacher.task == "classification" && c.data.teacher.noise > 1)
    add("data.teacher.noise", fmt::format("classification: a label-flip probability, expected <= 1, got {}",
                                          c.data.teacher.noise));
  const auto& m = c.model;
  const auto& d = c.data;
  if (m.kind == "quadratic" && c.precision.mode != "fp32" && c.precision.mode != "tf32")
    add("precision.mode", "the quadratic model computes in fp32 only: expected \"fp32\" (reduced precision is "
                          "emulated by the mlp and linear models), got \"" + c.precision.mode + "\"");
  if (m.kind == "quadratic" && (c.precision.loss_scale == "static" || c.precision.loss_scale == "dynamic"))
    add("precision.loss_scale", "the quadratic model has no loss scaling: expected \"auto\" or \"none\", got \"" +
                                    c.precision.loss_scale + "\"");
  const bool timing = c.training.mode == "timing";
  const bool preset = m.kind == "gpt2-small" || m.kind == "gpt2-xl" || m.kind == "llama-7b" ||
                      m.kind.rfind("mpt-", 0) == 0;
  if (preset && !timing)
    add("training.mode", "model.kind \"" + m.kind + "\" is a shape preset: expected \"timing\" (--timing-only)");
  if (timing && c.training.epochs > 0)
    add("training.epochs", "timing-only runs have no data and no epochs: use training.steps");
  if (timing && c.report.trace)
    add("report.trace", "timing-only runs hold no parameters to trace: use false");
  interop_issues(c, issues);
  if (c.report.timeline) {
    // The file holds a slice per rank, phase and bucket of every step: bounded by the steps it may draw.
    double steps = static_cast<double>(c.training.steps);
    if (c.training.epochs > 0 && (d.kind == "teacher" || d.kind == "fashion_mnist")) {
      const double train = d.kind == "teacher" ? static_cast<double>(d.teacher.train_samples) : 60000.0;
      const double global = static_cast<double>(c.cluster.ranks) *
                            static_cast<double>(c.training.accumulation_steps) * static_cast<double>(d.batch_per_rank);
      steps = std::max(1.0, std::floor(c.training.epochs * std::floor(train / global)));
    }
    if (steps > static_cast<double>(kTimelineMaxSteps))
      add("report.timeline", fmt::format("a timeline draws runs of at most {} optimizer steps (its file grows with "
                                         "steps x ranks x buckets); this run has {:.0f}: use training.steps <= {}",
                                         kTimelineMaxSteps, steps, kTimelineMaxSteps));
  }
  if (timing && c.compression.kind != "none" && c.sync.kind == "parameter_server")
    add("compression.kind", "timing-only runs of sync.kind \"parameter_server\" price uncompressed pushes only: use "
                            "\"none\" (compressed pushes are priced on the modeled clock while they train)");
  if (c.compression.kind == "threshold" || c.compression.kind == "dgc") {
    const double density = c.compression.expected_density;
    if (timing && !c.compression.expected_density_given)
      add("compression.expected_density",
          fmt::format("required in timing-only runs (training.mode \"timing\", --timing-only) of compression.kind "
                      "\"{}\": the share of values it keeps depends on the gradient, which a timing-only run does "
                      "not compute; expected the fraction kept per bucket in (0, 1] (e.g. 0.001)",
                      c.compression.kind));
    else if (timing && !(density > 0.0 && density <= 1.0))
      add("compression.expected_density",
          fmt::format("out of range (0, 1], got {}: {} keeps a share of values that depends on the gradient, which "
                      "a timing-only run does not compute; expected the fraction kept per bucket in (0, 1] (e.g. "
                      "0.001)", density, c.compression.kind));
    if (!timing && density != 0.0)
      add("compression.expected_density",
          fmt::format("a training run measures the share of values {} keeps: remove it (it is for training.mode "
                      "\"timing\"), got {}", c.compression.kind, density));
  }
  if (m.kind == "quadratic" && d.kind != "none")
    add("data.kind", "the quadratic model takes no data: expected \"none\", got \"" + d.kind + "\"");
  if (m.kind != "quadratic" && d.kind == "none" && !timing)
    add("data.kind", "\"none\" is only for the quadratic model or timing-only runs (model.kind is \"" + m.kind +
                         "\")");
  if (preset && d.kind != "none")
    add("data.kind", "a shape preset reads no data: expected \"none\" (samples per micro-batch: data.batch_per_rank)");
  if (m.kind == "mlp" && m.layers.size() < 2)
    add("model.layers", fmt::format("expected at least 2 widths [in, ..., out], got {}", m.layers.size()));
  if (m.kind == "linear" && m.layers.size() != 2)
    add("model.layers", fmt::format("linear: expected [in, out], got {} widths", m.layers.size()));
  bool ce = m.loss == "cross_entropy";
  if (m.kind != "quadratic" && m.layers.size() >= 2) {
    int64_t in = m.layers.front(), out = m.layers.back();
    if (d.kind == "fashion_mnist") {
      if (in != 784) add("model.layers[0]", fmt::format("fashion_mnist has 784 inputs, got {}", in));
      if (!ce) add("model.loss", "fashion_mnist is classification: expected \"cross_entropy\"");
      else if (out != 10) add("model.layers", fmt::format("fashion_mnist has 10 classes: last width 10, got {}", out));
    } else if (d.kind == "teacher") {
      const auto& t = d.teacher;
      if (in != t.in_dim)
        add("model.layers[0]", fmt::format("must equal data.teacher.in_dim ({}), got {}", t.in_dim, in));
      if (out != t.out_dim)
        add("model.layers", fmt::format("last width must equal data.teacher.out_dim ({}), got {}", t.out_dim, out));
      if ((t.task == "classification") != ce)
        add("model.loss", fmt::format("data.teacher.task \"{}\" needs model.loss \"{}\"", t.task,
                                      t.task == "classification" ? "cross_entropy" : "mse"));
    }
  }
  if (c.training.target.metric == "eval_accuracy" && !ce)
    add("training.target.metric", "eval_accuracy needs a classification model (model.loss \"cross_entropy\")");
  if (c.training.epochs > 0 && (d.kind == "inline" || d.kind == "none"))
    add("training.epochs", "inline and none data have no epochs: use training.steps");
  {
    // training.pitfall: refused where the mistake has no effect or is not modeled (docs/pitfalls.md).
    const std::string& p = c.training.pitfall;
    const std::string q = "\"" + p + "\"";
    const int64_t K = c.training.accumulation_steps;
    if ((p == "zero_grad_in_loop" || p == "mean_of_means") && timing)
      add("training.pitfall", q + " changes the gradient; timing-only runs compute none (use training.mode \"train\")");
    if ((p == "zero_grad_in_loop" || p == "mean_of_means") && c.sync.kind != "allreduce")
      add("training.pitfall", q + " is modeled for sync.kind \"allreduce\" only (the divisor it changes travels in "
                              "the all-reduce's control values; other strategies divide by the sample count), got \"" +
                              c.sync.kind + "\"");
    if (p == "zero_grad_in_loop" && K < 2)
      add("training.pitfall", q + " needs training.accumulation_steps >= 2 (with one micro-batch per step zeroing "
                              "inside the loop is the correct loop), got " + std::to_string(K));
    if (p == "mean_of_means") {
      if (d.kind != "inline")
        add("training.pitfall", q + " needs micro-batches of different sizes, which only data.kind \"inline\" gives "
                                "(the other kinds deal b samples to every micro-batch and drop an epoch's partial "
                                "global batch, so the mean of means is the sample-weighted mean), got \"" + d.kind +
                                "\"");
      if (c.precision.mode != "fp32")
        add("training.pitfall", q + " is modeled in fp32 only (the per-micro-batch 1/(K b_k) scaling is not "
                                "emulated in other formats), got precision.mode \"" + c.precision.mode + "\"");
    }
    if (p == "fp16_pure_unscaled" && (c.precision.mode != "fp16_pure" ||
                                      (c.precision.loss_scale != "none" && c.precision.loss_scale != "auto")))
      add("training.pitfall", q + " is precision.mode \"fp16_pure\" with precision.loss_scale \"none\", got \"" +
                              c.precision.mode + "\" with \"" + c.precision.loss_scale + "\"");
    if (p == "delay_allreduce" && c.sync.kind != "allreduce")
      add("training.pitfall", q + " is apex DDP's all-reduce after the whole backward: it needs sync.kind "
                              "\"allreduce\", got \"" + c.sync.kind + "\"");
    else if (p == "delay_allreduce" && c.sync.overlap)
      add("training.pitfall", q + " is sync.overlap false, got true");
  }
  check_reduce_every_microbatch(c, issues);
  if (c.sync.kind == "zero" && c.compression.kind != "none" && c.compression.kind != "fp16" &&
      c.compression.kind != "bf16")
    add("compression.kind", fmt::format("sync.kind \"zero\" reduce-scatters its gradients in fp32 or in a cast "
                                        "format (communication_data_type): use \"none\", \"fp16\" or \"bf16\" "
                                        "(it is \"{}\")", c.compression.kind));
  else if (c.sync.kind == "zero" && c.compression.error_feedback != "none")
    add("compression.error_feedback", fmt::format("\"{}\": sync.kind \"zero\" casts without error feedback "
                                                  "(use \"none\")", c.compression.error_feedback));
  else if (c.compression.kind != "none" && c.sync.kind != "allreduce" && c.sync.kind != "parameter_server" &&
           c.sync.kind != "zero")
    add("compression.kind", fmt::format("compression applies to sync.kind \"allreduce\" and \"parameter_server\" "
                                        "(it is \"{}\")", c.sync.kind));
  if (c.compression.kind == "powersgd" && c.sync.kind == "parameter_server")
    add("compression.kind", "powersgd needs all-reduces of its factors between the workers, which a parameter server "
                            "does not do: with sync.kind \"parameter_server\" use another compressor (e.g. topk)");
  check_error_feedback(c, issues);
  check_onebit_adam(c, issues);
  {
    // Parameter server: what this version supports (docs/design.md, section 2; sim/strategy/parameter_server.cpp).
    const SyncConfig& sy = c.sync;
    const bool ps = sy.kind == "parameter_server";
    if (sy.kind == "allreduce" && sy.staleness > 0 && sy.staleness != kStalenessInf && c.training.epochs == 0 &&
        sy.staleness >= c.training.steps)
      add("sync.staleness", fmt::format("expected fewer than training.steps ({}): with staleness {} the first update "
                                        "is applied at step {}, so the run would never update the parameters",
                                        c.training.steps, sy.staleness, sy.staleness + 1));
    if (sy.staleness == kStalenessInf && !ps)
      add("sync.staleness", fmt::format("expected an integer >= 0 for sync.kind \"{}\": \"inf\" (fully "
                                        "asynchronous) applies to sync.kind \"parameter_server\" only", sy.kind));
    if (ps) {
      if (!sy.dedicated && sy.shards > c.cluster.ranks)
        add("sync.shards", fmt::format("co-located shards live on the workers: at most cluster.ranks ({}), got {} "
                                       "(or set sync.dedicated true)", c.cluster.ranks, sy.shards));
      if (c.precision.mode != "fp32" && c.precision.mode != "bf16_mixed" && c.precision.mode != "fp16_mixed" &&
          c.precision.mode != "fp16_pure")
        add("precision.mode", fmt::format("sync.kind \"parameter_server\" supports \"fp32\", \"bf16_mixed\", "
                                          "\"fp16_mixed\" (fp32 master weights on the server, each worker its own loss "
                                          "scaler) and \"fp16_pure\" in this version, got \"{}\"", c.precision.mode));
      if (c.report.trace)
        add("report.trace", "sync.kind \"parameter_server\" has no per-step snapshot of every rank (ranks do not "
                            "step together): use false");
      if (c.training.mode == "timing" && sy.staleness != 0)
        add("training.mode", "timing-only runs of sync.kind \"parameter_server\" price BSP (sync.staleness 0) only: "
                             "SSP and asynchronous schedules need the event order of a training run");
    }
  }
  {
    // Every problem of the storage profile, one issue each (a profile file's problems name the file).
    std::vector<std::string> problems;
    try {
      load_storage_profile(d.storage);
    } catch (const ProfileError& e) {
      problems = e.problems();
    } catch (const std::exception& e) {
      problems = {e.what()};
    }
    for (const std::string& msg : problems) {
      const std::string prefix = "data.storage";
      if (msg.rfind(prefix, 0) == 0 && msg.size() > prefix.size() &&
          (msg[prefix.size()] == '.' || msg[prefix.size()] == ':')) {
        const size_t colon = msg.find(": ");
        add(msg.substr(0, colon), msg.substr(colon + 2));
      } else {
        add("data.storage", msg);
      }
    }
  }
  if (d.cache.policy != "none" && d.kind != "fashion_mnist" && d.kind != "teacher")
    add("data.cache.policy", "a cache needs an indexed training set (data.kind fashion_mnist or teacher), got \"" +
                                 d.kind + "\"");
  if (d.cache.policy != "none" && c.sync.kind == "parameter_server")
    add("data.cache.policy", "the node cache fills and evicts at a barrier per step, which assumes ranks step "
                             "together; sync.kind \"parameter_server\" ranks run free: use \"none\"");
  if (d.cache.capacity_fraction > 0 && d.cache.capacity_bytes > 0)
    add("data.cache.capacity_bytes", "give the capacity once: capacity_bytes or capacity_fraction, not both");
  // The machine and build decide (like data paths below): "cuda" needs a usable GPU and the cuda rank loop.
  if (auto why = backend_issue(c.cluster.backend)) add("cluster.backend", *why);
  // What neither cuda path runs (choose_cuda_path, device.h: the device-resident loop, else the staged path); "auto"
  // falls back to host for those instead.
  if (c.cluster.backend == "cuda")
    for (const ConfigIssue& i : choose_cuda_path(c).refusals) add(i.path, i.message);
  // The backend the run takes here ("cuda" counts even where validation refuses it above: one message is enough).
  const bool on_cuda = c.cluster.backend == "cuda" || choose_backend(c).backend == Backend::kCuda;
  auto check_profile = [&](const std::string& name) {
    try {
      load_hardware_profile(name);
    } catch (const ProfileError& e) {
      for (const std::string& p : e.problems()) add("cluster.hardware", p);  // "file: JSON path: expected ..." each
    } catch (const std::exception& e) {
      add("cluster.hardware", e.what());
    }
  };
  if (c.cluster.hardware == "detect") {
    // The profile of the GPU the run uses (resolve_hardware): there is none on the host backend.
    if (!on_cuda) {
      add("cluster.hardware", "\"detect\" takes the profile of the GPU a run uses, so it needs the cuda backend "
                              "(cluster.backend \"cuda\", or \"auto\" where a GPU is usable and the cuda loop runs "
                              "the configuration); this run is on host: name a profile from `gradsweep list`");
    } else if (!backend_issue("cuda")) {
      std::string resolved;
      try {
        resolved = resolve_hardware(c);
      } catch (const std::exception& e) {
        issues.push_back(issue_from_exception(e.what(), "cluster.hardware"));
      }
      if (!resolved.empty()) check_profile(resolved);
    }
  } else {
    check_profile(c.cluster.hardware);
    if (c.cluster.nccl_algo == "nvls") {
      try {
        if (!load_hardware_profile(c.cluster.hardware)->nvls)
          add("cluster.nccl_algo", fmt::format("nvls needs NVLink SHARP, and hardware profile \"{}\" has none "
                                               "(fabric.nvls false): ring or tree", c.cluster.hardware));
      } catch (const std::exception&) {
        // the profile's own problems are listed under cluster.hardware above
      }
    }
  }
  {
    const json& f = c.cluster.stragglers.factors;
    bool ok = f.is_null() || (f.is_array() && static_cast<int64_t>(f.size()) == c.cluster.ranks);
    if (ok && f.is_array())
      for (const auto& x : f) ok = ok && x.is_number() && x.get<double>() > 0 && x.get<double>() < 1e6;
    if (!ok)
      add("cluster.stragglers.factors", fmt::format("expected null or a list of {} numbers > 0 and < 1e6 (one per "
                                                    "rank), got {}",
                                                    c.cluster.ranks, bounded_dump(f)));
    if (c.cluster.stragglers.inject && !on_cuda && c.cluster.backend != "host")  // host: the kind rule says it
      add("cluster.stragglers.inject", "injecting real delays needs the cuda backend (cluster.backend \"cuda\", or "
                                       "\"auto\" where a GPU is usable and the cuda loop runs the configuration); "
                                       "the host backend models stragglers on the modeled clock only: use false");
  }
  if (d.kind == "fashion_mnist") {
    std::string dir = d.path.empty() ? "/usr/share/datasets/fashion-mnist" : d.path;
    for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                          "t10k-labels-idx1-ubyte.gz"}) {
      std::string file = dir + "/" + f;
      if (FILE* fp = std::fopen(file.c_str(), "rb")) {
        std::fclose(fp);
      } else {
        add(d.path.empty() ? "data.kind" : "data.path",
            "missing " + file + (d.path.empty() ? " (install Debian's dataset-fashion-mnist: tools/setup.sh)" : ""));
        break;
      }
    }
  }
  // Structural checks of the model and of cheap datasets, by constructing them (their errors name the JSON path).
  // Size limits (model, compression.k, report.trace, teacher, epochs): each judged when its own inputs have no
  // problem, even when other rules failed (size_limit_issues).
  if (structural_checks) {
    std::vector<std::string> taken;
    for (const auto& i : issues) taken.push_back(i.path);
    size_limit_issues(c, clean_unless(std::move(taken)), issues);
  }
  // The dataset checks (building it: shapes, sizes, files) read data.*, model.*, cluster.ranks, training.steps,
  // epochs, accumulation_steps and mode: they run whenever none of those has a problem, whatever else failed.
  bool structural_ok = structural_checks;
  if (structural_ok) {
    std::vector<std::string> taken;
    for (const auto& i : issues) taken.push_back(i.path);
    const auto clean = clean_unless(std::move(taken));
    for (const char* in : {"data.", "data", "model.", "model", "cluster.ranks", "training.steps", "training.epochs",
                           "training.accumulation_steps", "training.mode", ""})
      structural_ok = structural_ok && (*in == '\0' || clean(in));
    for (const auto& i : issues) structural_ok = structural_ok && !i.path.empty();  // a whole-config problem
  }
  if (structural_ok) {
    if (c.training.mode == "timing") return;  // timing-only runs read no data
    // Build the dataset once per distinct data setting (Fashion-MNIST is decoded once per process and cached), so
    // shapes, sizes and files are checked before any run starts.
    static std::mutex mu;
    struct Checked {
      std::string error;  // "" when the dataset was built
      int64_t in_dim = 0, out_dim = 0;
    };
    static std::map<std::string, Checked> checked;
    json key = config_to_json(c)["data"];
    key["_"] = {c.cluster.ranks, c.training.accumulation_steps, c.model.loss, c.model.layers, c.training.epochs > 0};
    // CBOR, not dump(): a --set string that is not UTF-8 (a folder named so) is kept byte for byte and does not throw
    // (dump() throws type_error 316, which hid every other problem); two such paths stay two keys.
    const std::vector<std::uint8_t> cbor = json::to_cbor(key);
    const std::string cache_key(cbor.begin(), cbor.end());
    Checked result;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = checked.find(cache_key);
      const auto& t = d.teacher;
      const double teacher_weights = static_cast<double>(t.hidden) * static_cast<double>(t.in_dim + t.out_dim);
      const double global = static_cast<double>(c.cluster.ranks) * static_cast<double>(c.training.accumulation_steps) *
                            static_cast<double>(d.batch_per_rank);
      if (it != checked.end()) {
        result = it->second;
      } else if (d.kind == "teacher" &&
                 (teacher_weights > 1e7 || teacher_weights * static_cast<double>(t.eval_samples) > 1e8)) {
        // Too large to build just to check it (validation stays fast and small): the constructor's checks here.
        result.in_dim = t.in_dim;
        result.out_dim = t.out_dim;
        if (t.task == "classification" && t.out_dim < 2)
          result.error = "data.teacher.out_dim: classification needs at least 2 classes";
        else if (global > static_cast<double>(t.train_samples))
          result.error = fmt::format("data.batch_per_rank: one global batch (ranks x accumulation_steps x "
                                     "batch_per_rank = {:.0f} samples) exceeds the training set ({} samples)",
                                     global, t.train_samples);
      } else {
        if (checked.size() >= 4096) checked.clear();  // bounded (the fuzzer validates millions of settings)
        try {
          auto ds = make_dataset(c);
          result.in_dim = ds->in_dim();
          result.out_dim = ds->out_dim();
          if (c.training.epochs > 0 && ds->steps_per_epoch() == 0)
            result.error = "training.epochs: the data has no epochs; use training.steps";
        } catch (const std::exception& e) {
          result.error = e.what();
          if (result.error.empty()) result.error = "cannot build the dataset";
        }
        checked[cache_key] = result;
      }
    }
    if (!result.error.empty()) {
      issues.push_back(issue_from_exception(result.error, "data"));
      return;
    }
    if (d.kind == "inline" && d.ranks.is_array()) {
      // A step needs at least one sample on some rank. Rank r's step t uses its micro-batches t*K .. t*K+K-1 (mod
      // its count), so the steps repeat with the least common multiple of the counts: check one period.
      std::vector<std::vector<size_t>> sizes;
      for (const auto& row : d.ranks) {
        std::vector<size_t> v;
        for (const auto& mb : row) v.push_back(mb.contains("y") ? mb["y"].size() : 0);
        sizes.push_back(v);
      }
      const int64_t K = c.training.accumulation_steps;
      int64_t period = 1;
      for (const auto& v : sizes)
        if (!v.empty()) period = std::min<int64_t>(std::lcm(period, static_cast<int64_t>(v.size())), 100000);
      // Samples in K consecutive micro-batches from position s of a rank's cyclic list, from its prefix sums in
      // O(1) (K can be 65536 and the period 100000).
      std::vector<std::vector<size_t>> prefix;
      for (const auto& v : sizes) {
        std::vector<size_t> p(v.size() + 1, 0);
        for (size_t i = 0; i < v.size(); ++i) p[i + 1] = p[i] + v[i];
        prefix.push_back(p);
      }
      for (int64_t t = 0; t < std::min(period, c.training.steps); ++t) {
        size_t n = 0;
        for (const auto& p : prefix) {
          const auto L = static_cast<int64_t>(p.size()) - 1;
          if (L <= 0) continue;
          const int64_t s = (t * K) % L, rem = K % L;
          n += static_cast<size_t>(K / L) * p.back();
          n += s + rem <= L ? p[static_cast<size_t>(s + rem)] - p[static_cast<size_t>(s)]
                            : (p.back() - p[static_cast<size_t>(s)]) + p[static_cast<size_t>(s + rem - L)];
        }
        if (n == 0) {
          add("data.ranks", fmt::format("step {} has no samples on any rank (its micro-batches are all empty)", t + 1));
          break;
        }
      }
    }
    if (d.kind == "inline" && m.kind != "quadratic" && m.layers.size() >= 2) {
      // Dimensions inferred from the inline samples must fit the model.
      if (result.in_dim != m.layers.front())
        add("model.layers[0]", fmt::format("inline samples have {} inputs, got {}", result.in_dim, m.layers.front()));
      if (ce && result.out_dim > m.layers.back())
        add("data.ranks", fmt::format("labels must be < {} (the model's classes, model.layers' last width); "
                                      "the data has labels up to {}", m.layers.back(), result.out_dim - 1));
      if (!ce && result.out_dim != m.layers.back())
        add("model.layers", fmt::format("inline targets have {} outputs, last width is {}", result.out_dim,
                                        m.layers.back()));
    }
  }
}

}  // namespace gs
