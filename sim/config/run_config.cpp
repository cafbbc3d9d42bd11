// The field table of RunConfig (visit_fields) and everything derived from it: reading JSON with typed, ranged,
// path-named errors, writing the resolved config, listing fields, did-you-mean for unknown keys. A new option is one
// line in visit_fields.
#include "sim/config/run_config.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "sim/config/config_read.h"
#include "sim/core/error.h"
#include "sim/core/json_io.h"

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
  // A kind field: its choices are a registry's names (KindCatalog), not written here.
  F& registry_choices() {
    info.registry_kind = true;
    return *this;
  }
};

// The one table. Order is the order of `gradsweep fields` and of scenarios/README.md. A doc that starts with
// "{<kind field>}: " starts, in field_table, with the kinds of that field whose registry entries name the field
// ("{compression.kind}: fraction ..." is "topk, randomk, dgc: fraction ..."): a new kind that takes the field is
// listed by its registry line.
template <class V>
void visit_fields(V& v, RunConfig& c) {
  v(c.name, F("name", "scenario name: the report folder and the prefix of run ids"));
  auto& m = c.model;
  v(m.kind, F("model.kind", "model (see `gradsweep list`)").registry_choices());
  v(m.layers, F("model.layers", "mlp: widths [in, hidden..., out]; linear: [in, out]").at_least(1).at_most(1 << 20));
  v(m.activation, F("model.activation", "{model.kind}: hidden activation").one_of({"relu", "gelu"}));
  v(m.loss, F("model.loss", "per-sample loss: softmax cross-entropy, or mse = 0.5*||y_hat - y||^2")
                .one_of({"cross_entropy", "mse"}));
  v(m.bias, F("model.bias", "mlp/linear: layers have a bias"));
  v(m.initial_weights, F("model.initial_weights", "{model.kind}: explicit initial weights, one row per output"));
  v(m.initial_bias, F("model.initial_bias", "{model.kind}: explicit initial bias"));
  v(m.a, F("model.a", "{model.kind}: curvatures a_ri, one row per rank or one row for all"));
  v(m.b, F("model.b", "{model.kind}: minimizers b_ri, one row per rank or one row for all"));
  v(m.initial_w, F("model.initial_w", "{model.kind}: initial parameters"));
  v(m.split, F("model.split", "{model.kind}: w as several tensors w0, w1, ... of these sizes, summing to the length of "
                              "model.initial_w, each its own layer (per-tensor optimizers: onebit_lamb; "
                              "uncompressed_tensors); [] (default): one tensor w").at_least(1).at_most(1e12));
  v(m.init_from, F("model.init.from", "{model.kind}: initial parameters from a .safetensors or .npz file "
                                      "(F32; F64, F16, BF16 converted), tensors named as torch's state_dict of the "
                                      "same model (docs/models.md); a relative path is taken from the scenario "
                                      "file's folder (empty: the model's own init)"));
  v(m.sequence_length, F("model.sequence_length", "{model.kind}: tokens per sample (0: the preset's "
                                                  "context)")
                           .at_least(0).at_most(1 << 20));

  auto& d = c.data;
  v(d.kind, F("data.kind", "dataset (see `gradsweep list`)").registry_choices());
  v(d.batch_per_rank, F("data.batch_per_rank", "samples per micro-batch per rank (b)").at_least(1).at_most(1 << 20));
  v(d.path, F("data.path", "{data.kind}: folder of the IDX .gz files; a relative path is taken from the scenario "
                          "file's folder (empty: Debian's dataset-fashion-mnist)"));
  v(d.shuffle, F("data.shuffle", "reshuffle the training set every epoch (from the seed)"));
  v(d.eval_samples, F("data.eval_samples", "{data.kind}: evaluate on the first n test samples (0: all)").at_least(0));
  auto& t = d.teacher;
  v(t.task, F("data.teacher.task", "{data.kind}: labels or regression targets")
                .one_of({"classification", "regression"}));
  v(t.in_dim, F("data.teacher.in_dim", "{data.kind}: input features").at_least(1).at_most(1 << 16));
  v(t.hidden, F("data.teacher.hidden", "{data.kind}: hidden width").at_least(1).at_most(1 << 16));
  v(t.out_dim, F("data.teacher.out_dim", "{data.kind}: classes or regression outputs").at_least(1).at_most(1 << 16));
  v(t.noise, F("data.teacher.noise", "{data.kind}: target noise stdev (regression) or label-flip probability")
                 .at_least(0));
  v(t.train_samples, F("data.teacher.train_samples", "{data.kind}: training set size (one epoch)").at_least(1)
                         .at_most(1e8));
  v(t.eval_samples, F("data.teacher.eval_samples", "{data.kind}: evaluation set size").at_least(1).at_most(1e7));
  v(t.seed, F("data.teacher.seed", "{data.kind}: seed of its weights and samples (fixed across repeats)").at_least(0));
  v(d.ranks, F("data.ranks", "{data.kind}: per rank, a list of micro-batches {\"x\": [[...]], \"y\": [[...]]}"));
  v(d.eval, F("data.eval", "{data.kind}: evaluation set {\"x\", \"y\"} (null: every training sample)"));
  v(d.prefetch, F("data.prefetch", "loader thread's queue bound in micro-batches (0: no loader thread, each rank reads "
                                   "its own micro-batches)").at_least(0).at_most(1 << 16));
  v(d.loader_threads, F("data.loader_threads", "threads that read each micro-batch's samples in parallel (1: the "
                                               "loader alone; more keep a fast GPU fed from a generated or decoded "
                                               "set; not with a node cache)").at_least(1).at_most(64));
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
  v(cl.backend, F("cluster.backend", "where ranks run; cuda runs the same rank loop with every buffer in GPU "
                                     "memory (mlp and linear models); auto takes cuda when a GPU is usable and the cuda "
                                     "backend runs the configuration (docs/device.md), else host")
                    .one_of({"auto", "host", "cuda"}));
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
                             "modeled clock: persistent compute slowdown per rank [f_0, ..., f_N-1], or {\"RANK\": f} naming some ranks, the others 1 (\"-1\": the last rank, so it follows a sweep of cluster.ranks; null: all 1)"));
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
                                         "zero_one_adam (DeepSpeed's 0/1 Adam), onebit_lamb (DeepSpeed's 1-bit LAMB); "
                                         "the last three: sync.kind \"allreduce\" only, they own the communication "
                                         "(docs/strategies.md)")
                .registry_choices());
  v(o.lr, F("training.optimizer.lr", "base learning rate").above(0));
  v(o.momentum, F("training.optimizer.momentum", "{training.optimizer.kind}: momentum").at_least(0).below(1));
  v(o.nesterov, F("training.optimizer.nesterov", "{training.optimizer.kind}: Nesterov momentum"));
  v(o.weight_decay, F("training.optimizer.weight_decay", "L2 (sgd, adam) or decoupled (adamw) decay; onebit_adam, "
                                                         "zero_one_adam, onebit_lamb: DeepSpeed's wd * p added to "
                                                         "the update")
                        .at_least(0));
  v(o.beta1, F("training.optimizer.beta1", "{training.optimizer.kind}: beta1 (DeepSpeed's betas[0])")
                   .at_least(0).below(1));
  v(o.beta2, F("training.optimizer.beta2", "{training.optimizer.kind}: beta2 (DeepSpeed's betas[1])")
                   .at_least(0).below(1));
  v(o.betas, F("training.optimizer.betas", "{training.optimizer.kind}: [beta1, beta2], DeepSpeed's and "
                                           "torch's "
                                           "spelling of beta1 and beta2 (give one or the other; null: beta1 and "
                                           "beta2)"));
  v(o.eps, F("training.optimizer.eps", "{training.optimizer.kind}: epsilon").above(0));
  v(o.freeze_step, F("training.optimizer.freeze_step", "{training.optimizer.kind}: optimizer steps before the "
                                                       "variance freezes and the momentum travels 1-bit compressed "
                                                       "(DeepSpeed's default 100000; steps 2 .. max(2, freeze_step) "
                                                       "are uncompressed Adam, or LAMB)")
                       .at_least(0).at_most(1e12));
  v(o.exp_avg_mask, F("training.optimizer.exp_avg_mask", "{training.optimizer.kind}: DeepSpeed's exp_avg_mask, "
                                                         "multiplied into the momentum after every compressed "
                                                         "all-reduce (1-bit values are never 0): none (DeepSpeed's "
                                                         "default), or zero_variance (0 where the frozen variance is "
                                                         "exactly 0)")
                        .one_of({"none", "zero_variance"}));
  v(o.var_freeze_step, F("training.optimizer.var_freeze_step", "{training.optimizer.kind}: the last step whose "
                                                               "variance may update; from the first step k > "
                                                               "var_freeze_step on (k >= 2) the variance is frozen "
                                                               "and the local steps begin (DeepSpeed's default 100000)")
                           .at_least(0).at_most(1e12));
  v(o.var_update_scaler, F("training.optimizer.var_update_scaler", "{training.optimizer.kind}: variance updates (every "
                                                                   "var_interval-th step, var_interval from 1) after "
                                                                   "which var_interval doubles (the paper's kappa; "
                                                                   "DeepSpeed's default 16)")
                             .at_least(1).at_most(1e12));
  v(o.local_step_scaler, F("training.optimizer.local_step_scaler", "{training.optimizer.kind}: frozen steps after "
                                                                   "which the local-step interval doubles "
                                                                   "(DeepSpeed's default 32678)")
                             .at_least(1).at_most(1e12));
  v(o.local_step_clipper, F("training.optimizer.local_step_clipper", "{training.optimizer.kind}: the largest "
                                                                     "local-step interval (the paper's H; DeepSpeed's "
                                                                     "default 16); a frozen step k syncs when k % "
                                                                     "interval == 0")
                              .at_least(1).at_most(1e12));
  v(o.uncompressed_tensors, F("training.optimizer.uncompressed_tensors", "{training.optimizer.kind}: DeepSpeed's "
                                                                         "non-freeze parameter group: a list of "
                                                                         "tensor names of the model's table or "
                                                                         "their file names (docs/models.md) whose "
                                                                         "momentum is never compressed: after the "
                                                                         "freeze they get uncompressed Adam on the "
                                                                         "all-reduced gradient, variance included "
                                                                         "(null or []: none)"));
  v(o.max_coeff, F("training.optimizer.max_coeff", "{training.optimizer.kind}: the largest LAMB coefficient ||w|| / "
                                                   "||update|| of a tensor in the warm-up (DeepSpeed's default 10)")
                     .above(0));
  v(o.min_coeff, F("training.optimizer.min_coeff", "{training.optimizer.kind}: the smallest LAMB coefficient, at most "
                                                   "max_coeff (DeepSpeed's default 0.01)")
                     .at_least(0));
  v(o.coeff_beta, F("training.optimizer.coeff_beta", "{training.optimizer.kind}: the running average of each tensor's "
                                                     "warm-up coefficients that freezes with the variance, f = "
                                                     "coeff_beta f + (1 - coeff_beta) coeff from f = 0 (DeepSpeed's "
                                                     "default 0.9; 1 / (1 - coeff_beta) at most freeze_step)")
                      .at_least(0).below(1));
  v(o.factor_max, F("training.optimizer.factor_max", "{training.optimizer.kind}: the largest factor on the frozen "
                                                     "coefficient after the freeze (DeepSpeed's default 4)")
                      .above(0));
  v(o.factor_min, F("training.optimizer.factor_min", "{training.optimizer.kind}: the smallest factor on the frozen "
                                                     "coefficient, at most factor_max (DeepSpeed's default 0.5)")
                      .above(0));
  v(o.factor_threshold, F("training.optimizer.factor_threshold", "{training.optimizer.kind}: how far the factor may "
                                                                 "move in one step, a fraction of its previous value "
                                                                 "(DeepSpeed's default 0.1)")
                            .at_least(0));
  v(o.first_moment, F("training.optimizer.first_moment", "{training.optimizer.kind}: the first moment's update as "
                                                         "PyTorch >= 2.0 (lerp: exp_avg.lerp_(grad, 1 - beta1)) or "
                                                         "1.13 (mul_add: exp_avg.mul_(beta1).add_(grad, alpha=1 - "
                                                         "beta1)) writes it; they differ in the last bit "
                                                         "(docs/parity.md)")
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
    F("training.activation_checkpointing", "{model.kind}: keep only each block's input and recompute the block "
                                           "in the backward (torch.utils.checkpoint per block): GPU memory "
                                           "estimate and modeled clock (one more forward of every block)"));

  auto& sy = c.sync;
  v(sy.kind, F("sync.kind", "sync strategy (see `gradsweep list`)").registry_choices());
  v(sy.stage, F("sync.stage", "{sync.kind}: DeepSpeed's ZeRO stage: 1 shards the optimizer state, 2 also the gradients "
                              "(FSDP SHARD_GRAD_OP), 3 also the parameters (FSDP FULL_SHARD); same arithmetic as "
                              "allreduce, GPU memory and modeled clock differ").at_least(1).at_most(3));
  v(sy.reduce_every_microbatch,
    F("sync.reduce_every_microbatch", "{sync.kind}: at sync.stage 2 or 3 with training.accumulation_steps > 1, "
                                      "reduce-scatter every micro-batch's gradient as its backward ends and keep "
                                      "only the shard's sum (DeepSpeed stage 2, FSDP without no_sync: the gradient "
                                      "stays sharded, K reduce-scatters per step); false: one reduce-scatter of the "
                                      "accumulated gradient after the last micro-batch (the whole gradient is held "
                                      "until then)"));
  v(sy.bucket_mb, F("sync.bucket_mb", "{sync.kind}: bucket size in MiB (after the first)").above(0).at_most(1 << 20));
  v(sy.first_bucket_mb, F("sync.first_bucket_mb", "{sync.kind}: first bucket in MiB").above(0).at_most(1 << 20));
  v(sy.staleness, F("sync.staleness", "allreduce: delayed update, the step-t update applies the averaged gradient of "
                                      "step t-s (0: synchronous; steps t < s apply nothing). parameter_server: 0 = BSP, "
                                      "s = SSP (a worker starts clock c only when every worker finished clock c - s - "
                                      "1), \"inf\" = asynchronous; SSP and asynchronous servers apply each push at "
                                      "lr / ranks").at_least(0).at_most(1024).or_inf());
  v(sy.overlap, F("sync.overlap", "{sync.kind}: buckets start during backward (false: after the whole backward, apex's "
                                  "delay_allreduce; same arithmetic, modeled clock only)"));
  v(sy.period, F("sync.period", "{sync.kind}: average the parameters after steps H, 2H, ... (H = period, counted "
                                "after the warm-up)").at_least(1).at_most(1e9));
  v(sy.average_optimizer_state, F("sync.average_optimizer_state",
                                  "{sync.kind}: also average the optimizer state (momentum, Adam moments) when "
                                  "averaging"));
  v(sy.warmup_steps, F("sync.warmup_steps", "{sync.kind}: first steps run as synchronous all-reduce (post-local SGD, "
                                            "Lin et al. 2020)").at_least(0).at_most(1e9));
  v(sy.shards, F("sync.shards", "{sync.kind}: server shards the parameters are split over (0: one per rank); "
                                  "priced on the modeled clock, which orders SSP and asynchronous pushes, so under "
                                  "those it also changes the result (BSP results do not change)")
                   .at_least(0).at_most(kMaxRanks));
  v(sy.dedicated, F("sync.dedicated", "{sync.kind}: shards on dedicated devices (every push and pull crosses the "
                                      "wire) instead of co-located with the workers; arithmetic unchanged, but the modeled prices "
                                      "order SSP and asynchronous pushes, so under those the result changes too"));
  v(sy.ordering, F("sync.ordering", "{sync.kind}: order of pushes and pulls, by modeled time with ties by rank "
                                    "(reproducible) or as the threads race (real)").one_of({"modeled", "real"}));
  auto& cp = c.compression;
  v(cp.kind, F("compression.kind", "gradient compressor (see `gradsweep list`); parameter_server: each worker encodes "
                                   "its push (own error feedback), the server decodes and sums in fp32, pulls stay "
                                   "dense fp32 (every kind but powersgd)")
                 .registry_choices());
  v(cp.error_feedback, F("compression.error_feedback",
                         "{compression.kind}: where error feedback sits (every lossy kind but dgc). gradient "
                         "(also true): each rank keeps e, sends C(g + e), e = g + e - decode(sent); momentum "
                         "(topk, randomk, threshold; allreduce, sgd without nesterov): DGC's momentum correction, "
                         "u = m u + g, v = v + u, send C(v), u and v zeroed where sent, the optimizer without its "
                         "momentum m; ef21 (allreduce): each rank sends c = C(g - g_i), g_i += c, the update is the "
                         "mean of the g_i; none (also false)")
                             .one_of({"none", "gradient", "momentum", "ef21"})
                             .bool_means("none", "gradient"));
  v(cp.divide, F("compression.divide", "{sync.kind}: casts send each rank's mean gradient (its sum / its samples, "
                                       "in fp32, as DDP's fp16_compress_hook) and divide by the ranks N in the "
                                       "format before the sum, after it, or split (2^floor(log2(N)/2) before, the "
                                       "rest after); not parameter_server (each worker pushes its mean gradient "
                                       "cast; the server rescales each by its samples, sums in fp32, then "
                                       "divides)").one_of({"pre", "post", "split"}));
  v(cp.accumulate, F("compression.accumulate", "{compression.kind}: the all-reduce sums in the wire "
                                               "format, rounding at every add as NCCL's ring does (wire), or in fp32 "
                                               "(fp32: a reduce-scatter of the cast values summed in fp32 by each "
                                               "chunk's owner, then an all-gather of the fp32 sums; wire bytes "
                                               "(N-1)/N x (cast + 4) per element, as Megatron's fp32 grad "
                                               "all-reduce of cast values)").one_of({"wire", "fp32"}));
  v(cp.ratio, F("compression.ratio", "{compression.kind}: fraction of values kept (when k is 0)").above(0)
                  .at_most(1));
  v(cp.k, F("compression.k", "{compression.kind}: values kept per bucket (0: use ratio)").at_least(0));
  v(cp.scope, F("compression.scope", "{compression.kind}: select per bucket or over the whole model")
                  .one_of({"bucket", "model"}));
  v(cp.shared_indices,
    F("compression.shared_indices", "{compression.kind}: the same index set on every rank (not sent)"));
  v(cp.unbiased, F("compression.unbiased", "{compression.kind}: scale kept values by d/k (unbiased)"));
  v(cp.tau, F("compression.tau", "{compression.kind}: send values with abs(p) >= tau").at_least(0));
  v(cp.levels, F("compression.levels", "{compression.kind}: quantization levels s").at_least(1).at_most(1 << 20));
  v(cp.vote, F("compression.vote", "{compression.kind}: receivers take the majority vote of signs (sign(0) = 0)"));
  v(cp.rank, F("compression.rank", "{compression.kind}: rank r per matrix").at_least(1).at_most(1 << 16));
  v(cp.start_step, F("compression.start_step", "{compression.kind}: dense fp32 all-reduce before this step (0-based)")
                       .at_least(0));
  v(cp.min_compression_rate,
    F("compression.min_compression_rate", "{compression.kind}: a matrix [rows, count / rows] is compressed iff (rows "
                                          "+ cols) r x this < rows cols, else sent dense (PowerSGDState's "
                                          "min_compression_rate; torch's default is 2)").at_least(1));
  v(cp.orthogonalization_epsilon,
    F("compression.orthogonalization_epsilon",
      "{compression.kind}: Gram-Schmidt divides each column of P and Q by its norm + this, in PyTorch's units of mean "
      "gradients (PowerSGDState's orthogonalization_epsilon; 0, torch's default, turns an all-zero column into NaN "
      "as torch does; 1e-8 keeps it 0)").at_least(0));
  v(cp.momentum, F("compression.momentum", "{compression.kind}: momentum of the local momentum correction")
                     .at_least(0).below(1));
  v(cp.clip_norm, F("compression.clip_norm", "{compression.kind}: local gradient clipping to this L2 norm (0: off)")
                      .at_least(0));
  v(cp.warmup_steps, F("compression.warmup_steps", "{compression.kind}: exponential warm-up of the ratio over these "
                                                   "steps (0: none)")
                         .at_least(0));
  v(cp.sample_ratio, F("compression.sample_ratio", "{compression.kind}: fraction of values sampled for the threshold")
                         .above(0).at_most(1));
  v(cp.expected_density,
    F("compression.expected_density", "{compression.kind}: the fraction of each bucket's values kept, which depends "
                                      "on the gradient: required in (0, 1] by timing-only runs (training.mode "
                                      "\"timing\"), which price the payload from it (dgc: the density after its "
                                      "warm-up, whose steps follow the warm-up schedule ending at it); training runs "
                                      "measure it (0: not given)")
        .at_least(0).at_most(1));
  v(cp.measure_error, F("compression.measure_error",
                        "{compression.kind}: report the relative error of the decoded average (costs "
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

// The field table as visit_fields writes it: paths, types, defaults, ranges; the kind fields without their choices
// and the docs with their "{<kind field>}: " heads (field_table fills both in from a KindCatalog).
const std::vector<FieldInfo>& bare_fields();

// The names of a kind field's choices in `kinds`; throws when the catalog lacks the field.
std::vector<std::string> kind_names(const KindCatalog& kinds, const std::string& path) {
  for (const KindField& f : kinds)
    if (f.path == path) {
      std::vector<std::string> names;
      for (const KindChoice& k : f.choices) names.push_back(k.name);
      return names;
    }
  throw Error("the kind catalog has no choices for " + path + " (registry_kinds(), sim/validate/validate.h)");
}

// The choices of a selector field: a kind field's from `kinds`, another's from the table.
std::vector<std::string> selector_choices(const KindCatalog& kinds, const std::string& path) {
  for (const auto& f : bare_fields())
    if (f.path == path) return f.registry_kind ? kind_names(kinds, path) : f.choices;
  return {};
}

// A field's default as a string (the kind fields' defaults: "mlp", "none", ...).
std::string field_default(const std::string& path) {
  for (const auto& f : bare_fields())
    if (f.path == path && f.default_value.is_string()) return f.default_value.get<std::string>();
  return "";
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
  Reader(const json& j, const KindCatalog& kinds, std::vector<ConfigIssue>& issues)
      : j_(j), kinds_(kinds), issues_(issues) {}

  template <class T>
  void operator()(T& ref, const F& f) {
    const json* v = find_path(j_, f.info.path);
    if (v == nullptr) return;  // default stays
    if (!f.info.registry_kind) return read(ref, *v, f.info);
    FieldInfo info = f.info;  // a kind field: its choices are the registry's
    info.choices = kind_names(kinds_, info.path);
    read(ref, *v, info);
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
  const KindCatalog& kinds_;
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
    for (const auto& f : bare_fields()) {
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
  for (const auto& f : bare_fields())
    if (f.path == path && !f.bool_true.empty()) return json(as_bool_alias(v) > 0 ? f.bool_true : f.bool_false);
  return v;
}

// Fields that only mean something for some kinds; giving them for another kind is a mistake, not a no-op. Every field
// whose doc starts with "<kinds>: " (choices of one selector field) has a rule (a test walks the docs): those of the
// registry kinds come from their entries' options (kind_rules), those of the other selectors are written here.
struct KindRule {
  std::string path;       // a field, or a section ("data.teacher")
  std::string kind_path;  // the selector
  std::string kind_default;
  std::vector<std::string> kinds;  // the choices under which the field applies
  bool loss_scale = false;  // kind_path is precision.loss_scale: "auto" is dynamic for fp16_mixed, none otherwise
};

const std::vector<KindRule>& fixed_kind_rules() {
  static const std::vector<std::string> kCaching = {"lru", "static", "partitioned"};
  static const std::vector<KindRule> kRules = {
      {"training.schedule.step_size", "training.schedule.kind", "constant", {"step"}},
      {"training.schedule.gamma", "training.schedule.kind", "constant", {"step"}},
      {"training.schedule.warmup_steps", "training.schedule.kind", "constant", {"warmup_cosine"}},
      {"training.schedule.min_lr", "training.schedule.kind", "constant", {"warmup_cosine"}},
      {"precision.growth_factor", "precision.loss_scale", "auto", {"dynamic"}, true},
      {"precision.backoff_factor", "precision.loss_scale", "auto", {"dynamic"}, true},
      {"precision.growth_interval", "precision.loss_scale", "auto", {"dynamic"}, true},
      {"precision.initial_scale", "precision.loss_scale", "auto", {"dynamic", "static"}, true},
      {"precision.amax_history_len", "precision.mode", "fp32", {"fp8_mixed"}},
      // "auto" may take the cuda backend; where it cannot, validate_config says why (it needs a usable GPU).
      {"cluster.stragglers.inject", "cluster.backend", "auto", {"cuda", "auto"}},
      {"cluster.stragglers.noise.sigma", "cluster.stragglers.noise.kind", "none", {"normal", "lognormal"}},
      {"data.cache.capacity_fraction", "data.cache.policy", "none", kCaching},
      {"data.cache.capacity_bytes", "data.cache.policy", "none", kCaching},
  };
  return kRules;
}

// The position of a field or a section in the field table (its first field's); throws when it names neither (an
// option path of a registry entry that is no field).
size_t table_position(const std::string& path, const std::string& named_by) {
  const auto& fields = bare_fields();
  for (size_t i = 0; i < fields.size(); ++i)
    if (fields[i].path == path || fields[i].path.rfind(path + ".", 0) == 0) return i;
  throw Error(fmt::format("{}: option \"{}\" is no field or section of the configuration", named_by, path));
}

bool names_option(const KindChoice& k, const std::string& path) {
  for (const auto& o : k.options)
    if (path == o || path.rfind(o + ".", 0) == 0) return true;
  return false;
}

// The rules of check_kind_specific, in the table order of their fields: one per option of a registry kind field
// (the kinds whose entries name it; none when every kind does), the option's own section's kind field first
// (compression.divide: compression.kind, then sync.kind), and the fixed rules.
std::vector<KindRule> kind_rules(const KindCatalog& kinds) {
  std::vector<std::pair<std::pair<size_t, int>, KindRule>> keyed;
  for (const KindField& kf : kinds) {
    std::vector<std::string> options;  // every option any kind names, once
    for (const KindChoice& k : kf.choices)
      for (const auto& o : k.options)
        if (std::find(options.begin(), options.end(), o) == options.end()) options.push_back(o);
    for (const auto& o : options) {
      KindRule r{o, kf.path, field_default(kf.path), {}};
      for (const KindChoice& k : kf.choices)
        if (names_option(k, o)) r.kinds.push_back(k.name);
      if (r.kinds.size() == kf.choices.size()) continue;  // applies under every kind
      const bool own = o.substr(0, o.find('.')) == kf.path.substr(0, kf.path.find('.'));
      keyed.push_back({{table_position(o, kf.path + " \"" + r.kinds.front() + "\""), own ? 0 : 1}, std::move(r)});
    }
  }
  for (const KindRule& r : fixed_kind_rules()) keyed.push_back({{table_position(r.path, "fixed rule"), 0}, r});
  std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<KindRule> out;
  for (auto& [key, r] : keyed) out.push_back(std::move(r));
  return out;
}

bool same_catalog(const KindCatalog& a, const KindCatalog& b) {
  if (a.size() != b.size()) return false;
  for (size_t f = 0; f < a.size(); ++f) {
    if (a[f].path != b[f].path || a[f].choices.size() != b[f].choices.size()) return false;
    for (size_t k = 0; k < a[f].choices.size(); ++k)
      if (a[f].choices[k].name != b[f].choices[k].name || a[f].choices[k].options != b[f].choices[k].options)
        return false;
  }
  return true;
}

// kind_rules(kinds), derived once per thread and catalog: a sweep reads every grid point's configuration with the
// same one (comparing it costs a few string compares per entry, deriving the rules a thousand).
const std::vector<KindRule>& cached_kind_rules(const KindCatalog& kinds) {
  thread_local KindCatalog cached_kinds;
  thread_local std::vector<KindRule> cached_rules;
  thread_local bool valid = false;
  if (!valid || !same_catalog(kinds, cached_kinds)) {
    cached_rules = kind_rules(kinds);
    cached_kinds = kinds;
    valid = true;
  }
  return cached_rules;
}

void check_kind_specific(const json& j, const KindCatalog& kinds, std::vector<ConfigIssue>& issues) {
  static const RunConfig kDefaultConfig;
  static const json defaults = config_to_json(kDefaultConfig);
  std::string mode = "fp32";  // precision.mode, for "auto" loss scale
  if (const json* m = find_path(j, "precision.mode"); m != nullptr && m->is_string()) mode = m->get<std::string>();
  for (const auto& r : cached_kind_rules(kinds)) {
    const json* v = find_path(j, r.path);
    if (v == nullptr || v->is_null()) continue;
    const json* dv = find_path(defaults, r.path);
    if (dv != nullptr && *dv == resolved_value(r.path, *v)) continue;  // the default, as a resolved config writes it
    const json* k = find_path(j, r.kind_path);
    std::string kind = k != nullptr && k->is_string() ? k->get<std::string>() : r.kind_default;
    if (k != nullptr && !k->is_string()) continue;  // the kind's own error is reported
    // A kind that is no choice has its own error; the rule would depend on a mistyped field.
    const std::vector<std::string> choices = selector_choices(kinds, r.kind_path);
    if (std::find(choices.begin(), choices.end(), kind) == choices.end()) continue;
    std::string shown = "\"" + kind + "\"";
    if (r.loss_scale && kind == "auto") {
      kind = mode == "fp16_mixed" ? "dynamic" : "none";
      shown = fmt::format("\"auto\", which is \"{}\" for precision.mode \"{}\"", kind, mode);
    }
    if (std::find(r.kinds.begin(), r.kinds.end(), kind) == r.kinds.end()) {
      std::string allowed = "\"" + r.kinds.front() + "\"";
      for (size_t i = 1; i < r.kinds.size(); ++i)
        allowed += (i + 1 == r.kinds.size() ? " or \"" : ", \"") + r.kinds[i] + "\"";
      issues.push_back({r.path, fmt::format("only applies when {} is {} (it is {})", r.kind_path, allowed, shown)});
    }
  }
}

}  // namespace

// The fields of j into c (Reader, then betas into beta1 and beta2); returns the fields whose value was refused.
std::vector<std::string> read_fields(const json& j, const KindCatalog& kinds, RunConfig& c,
                                     std::vector<ConfigIssue>& issues) {
  Reader r(j, kinds, issues);
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

std::vector<std::string> read_config(const json& j, const KindCatalog& kinds, RunConfig& c,
                                     std::vector<ConfigIssue>& issues) {
  find_unknown(j, "", issues);
  check_kind_specific(j, kinds, issues);
  {
    const json* value = find_path(j, "training.target.value");
    const json* metric = find_path(j, "training.target.metric");
    bool is_default = value != nullptr && value->is_number() && value->get<double>() == 0.0;  // as resolved configs write it
    if (value != nullptr && !is_default &&
        (metric == nullptr || (metric->is_string() && metric->get<std::string>().empty())))
      issues.push_back({"training.target.value", "a target value needs training.target.metric"});
  }
  std::vector<std::string> bad = read_fields(j, kinds, c, issues);
  for (const auto& f : bare_fields()) {
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
  return bad;
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

bool is_config_field(const std::string& path) {
  for (const auto& f : bare_fields())
    if (f.path == path) return true;
  return false;
}

namespace {

const std::vector<FieldInfo>& bare_fields() {
  static const std::vector<FieldInfo> fields = [] {
    RunConfig defaults;
    Lister l;
    visit_fields(l, defaults);
    return l.fields_;
  }();
  return fields;
}

}  // namespace

std::vector<FieldInfo> field_table(const KindCatalog& kinds) {
  std::vector<FieldInfo> out = bare_fields();
  for (FieldInfo& f : out) {
    if (f.registry_kind) f.choices = kind_names(kinds, f.path);
    if (f.doc.rfind('{', 0) != 0) continue;
    // "{kind field}: doc" -> "kind, kind: doc", the kinds whose entries name the field, in registry order.
    const size_t close = f.doc.find("}: ");
    const std::string kind_path = f.doc.substr(1, close - 1);
    std::string names;
    for (const KindField& kf : kinds)
      if (kf.path == kind_path)
        for (const KindChoice& k : kf.choices)
          if (names_option(k, f.path)) names += (names.empty() ? "" : ", ") + k.name;
    if (names.empty())
      throw Error(fmt::format("{}: its doc starts with the kinds of {}, and no entry of {} names it", f.path,
                              kind_path, kind_path));
    f.doc = names + f.doc.substr(close + 1);
  }
  for (const KindField& kf : kinds)  // every option names a field or a section
    for (const KindChoice& k : kf.choices)
      for (const auto& o : k.options) table_position(o, kf.path + " \"" + k.name + "\"");
  return out;
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

json config_to_json(const RunConfig& c) {
  Writer w;
  visit_fields(w, const_cast<RunConfig&>(c));  // Writer only reads
  return w.out_;
}

}  // namespace gs
