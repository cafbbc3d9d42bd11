// RunConfig: one fully resolved point of a sweep, a plain struct with every field typed. The field table in
// run_config.cpp (visit_fields) is the single source of paths, types, defaults, ranges and docs: loading, writing,
// validation, `gradsweep fields` and scenarios/README.md all come from it. A new option is one struct member here
// plus one line in that table. This layer is a leaf (it includes sim/core/ only): reading with the cross-field rules
// (config_from_json, validate_config) is above the registries, in sim/validate/validate.h.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gs {

using json = nlohmann::json;

struct OptimizerConfig {
  // registry: sim/optim/optimizer.cpp (sgd, adam, adamw), then the optimizers that are sync strategies of their own
  // (onebit_adam, zero_one_adam, onebit_lamb: optimizer_strategy_registry, sim/strategy/registry.cpp)
  std::string kind = "sgd";
  double lr = 0.05;
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  // adam, adamw, onebit_adam, zero_one_adam, onebit_lamb: DeepSpeed's and torch's spelling [beta1, beta2], read into
  // beta1 and beta2 (a config read from JSON holds null here: the values are in beta1 and beta2).
  json betas = nullptr;
  // adam, adamw: the first moment's update as PyTorch >= 2.0 writes it, "lerp" (exp_avg.lerp_(grad, 1 - beta1)), or
  // as 1.13 did, "mul_add" (exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)); they differ in the last bit.
  std::string first_moment = "lerp";
  // onebit_adam, onebit_lamb: the optimizer steps before the variance freezes and the momentum is compressed
  // (DeepSpeed OnebitAdam's and OnebitLamb's freeze_step and default).
  int64_t freeze_step = 100000;
  // onebit_adam, onebit_lamb: DeepSpeed's exp_avg_mask, the momentum multiplied by a 0/1 mask after every compressed all-reduce
  // (1-bit values cannot be zero). "none" (DeepSpeed's default: no mask) or "zero_variance" (0 where the frozen
  // variance is exactly 0: coordinates whose gradient was zero through the whole warm-up).
  std::string exp_avg_mask = "none";
  // zero_one_adam (DeepSpeed ZeroOneAdam's names and defaults, deepspeed/runtime/fp16/onebit/zoadam.py): the last
  // step whose variance may update (the freeze comes after the first step k > var_freeze_step); the number of
  // variance updates after which their interval doubles (the paper's kappa); the frozen steps after which the
  // local-step interval doubles; the largest local-step interval (the paper's H).
  int64_t var_freeze_step = 100000;
  int64_t var_update_scaler = 16;
  int64_t local_step_scaler = 32678;
  int64_t local_step_clipper = 16;
  // onebit_adam: DeepSpeed's non-freeze parameter group: tensors of the model's table (their table or file names,
  // docs/models.md) whose momentum is not compressed; after the freeze they get DeepSpeed's uncompressed Adam on the
  // all-reduced gradient (their variance keeps updating). null or []: every tensor is compressed.
  json uncompressed_tensors = nullptr;
  // onebit_lamb (DeepSpeed OnebitLamb's names and defaults, deepspeed/runtime/fp16/onebit/lamb.py): the bounds of
  // LAMB's per-tensor coefficient ||w|| / ||update|| during the warm-up; the running average's beta of the frozen
  // coefficient; the bounds of the factor that scales the frozen coefficient after the freeze, and how far that
  // factor may move from one step to the next (a fraction of its previous value).
  double max_coeff = 10.0;
  double min_coeff = 0.01;
  double coeff_beta = 0.9;
  double factor_max = 4.0;
  double factor_min = 0.5;
  double factor_threshold = 0.1;
};

// Whether the rank loop evaluates after 1-based optimizer step `step` of a run of `total` planned steps with
// training.eval_every `eval_every`: every eval_every steps (0: never) and after the last planned step.
inline bool evaluation_due(int64_t step, int64_t total, int64_t eval_every) {
  return step >= total || (eval_every > 0 && step % eval_every == 0);
}

struct ScheduleConfig {
  std::string kind = "constant";  // constant | step | warmup_cosine
  int64_t step_size = 100;        // step: multiply lr by gamma every step_size optimizer steps
  double gamma = 0.1;
  int64_t warmup_steps = 0;       // warmup_cosine: linear warm-up, then cosine decay to min_lr at the last step
  double min_lr = 0.0;
};

struct TargetConfig {
  std::string metric;  // "" (none) | eval_accuracy | eval_loss | train_loss
  double value = 0.0;  // reached when accuracy >= value, or loss <= value
  bool value_given = false;  // written in the input (read_fields): a 0 given is a value, not a missing one
};

struct ModelConfig {
  std::string kind = "mlp";                 // registry: sim/model/model_registry.cpp
  std::vector<int64_t> layers{784, 256, 256, 10};  // mlp: widths in->...->out; linear: [in, out]
  std::string activation = "relu";          // relu | gelu (mlp hidden layers)
  std::string loss = "cross_entropy";       // cross_entropy | mse (per-sample 0.5*||y_hat-y||^2)
  bool bias = true;
  json initial_weights;  // linear: [[w_00..w_0,in-1], ...] (out rows); null = seeded init
  json initial_bias;     // linear: [b_0, ...]; null = seeded init (zeros when bias false)
  json a;                // quadratic: per-rank curvatures [[a_r0, ...], ...] (one row per rank, or one row for all)
  json b;                // quadratic: per-rank minimizers, same shape as a
  json initial_w;        // quadratic: [w_0, ...]
  // quadratic: w cut into tensors w0, w1, ... of these sizes (summing to the length of initial_w); empty: one tensor w
  std::vector<int64_t> split;
  // mlp, linear, quadratic: a .safetensors or .npz file holding the initial parameters ("" = the model's own init).
  // Resolved against the scenario file's folder when relative (scenario.cpp).
  std::string init_from;
  int64_t sequence_length = 0;  // transformer presets: tokens per sample (0 = the preset's context)
};

struct TeacherConfig {
  std::string task = "classification";  // classification | regression
  int64_t in_dim = 32;
  int64_t hidden = 64;
  int64_t out_dim = 10;      // classes (classification) or outputs (regression)
  double noise = 0.1;        // regression: target noise stdev; classification: label-flip probability
  int64_t train_samples = 65536;
  int64_t eval_samples = 4096;
  int64_t seed = 1234;       // teacher weights and samples (fixed across training repeats)
};

// The node cache of decoded training samples (data_cache.h; docs/data.md).
struct CacheConfig {
  std::string policy = "none";     // none | lru | static | partitioned
  double capacity_fraction = 0.0;  // of the training set, per node (when capacity_bytes is 0)
  int64_t capacity_bytes = 0;      // per node, in decoded bytes (> 0: overrides capacity_fraction)
};

struct DataConfig {
  std::string kind = "fashion_mnist";  // registry: sim/model/dataset_registry.cpp
  int64_t batch_per_rank = 32;         // samples per micro-batch per rank (b)
  std::string path;                    // fashion_mnist: folder of the IDX .gz files ("" = Debian's package path)
  bool shuffle = true;                 // per-epoch shuffling from the seed
  int64_t eval_samples = 0;            // evaluation subset size (0 = the whole test split)
  TeacherConfig teacher;
  json ranks;  // inline: [[micro-batch, ...] per rank], micro-batch = {"x": [[...], ...], "y": [[...], ...]}
  json eval;   // inline: {"x": ..., "y": ...} evaluation set (null = every training sample)
  int64_t prefetch = 2;                // loader queue bound in micro-batches (0: the rank reads its own data)
  int64_t loader_threads = 1;          // threads reading one micro-batch's samples (1: the loader alone; loader.h)
  json storage = "local_nvme";         // storage profile name (scenarios/hardware/storage/) or {bandwidth_GBps, ...}
  CacheConfig cache;
};

// Stragglers of the modeled clock (cost-model issue): a rank's compute is multiplied by factors[rank] and by per-step
// noise; synchronous steps wait for the slowest rank.
struct StragglerConfig {
  json factors;                // [f_0, ..., f_{N-1}] persistent slowdown per rank (> 0); null = all 1; the scenario
                               // form {"RANK": f} ("-1": last rank) becomes this list in config_from_json
  std::string noise = "none";  // none | normal: max(0, 1 + sigma Z) | lognormal: exp(sigma Z - sigma^2/2)
  double sigma = 0.0;
  bool inject = false;         // apply the same delays for real on a measured GPU clock (cuda backend only)
};

struct ClusterConfig {
  int64_t ranks = 1;
  std::string backend = "auto";        // auto | host | cuda
  std::string hardware = "h100-sxm-8"; // hardware profile of the modeled clock (cost-model issue)
  std::string nccl_algo = "auto";      // auto | ring | tree | nvls: the modeled clock's NCCL algorithm (NCCL_ALGO)
  std::string gpu_memory = "skip";     // skip | warn: a run whose GPU memory estimate exceeds one GPU (app/memory.h)
  bool share_identical = true;         // in-process ranks may share provably identical state (results unchanged)
  StragglerConfig stragglers;
};

struct TrainingConfig {
  std::string mode = "train";          // train | timing (no arithmetic: the schedule alone is priced)
  int64_t steps = 100;                 // optimizer steps (ignored when epochs > 0)
  double epochs = 0.0;                 // > 0: steps = floor(epochs * steps_per_epoch)
  int64_t accumulation_steps = 1;      // K micro-batches per optimizer step
  // Known pitfalls reproduced on purpose (docs/pitfalls.md): none | zero_grad_in_loop | mean_of_means |
  // fp16_pure_unscaled (alias: precision fp16_pure, loss_scale none) | delay_allreduce (alias: sync.overlap false)
  std::string pitfall = "none";
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  int64_t eval_every = 50;             // evaluate every E optimizer steps (and after the last); 0 = only at the end
  double clip_grad_norm = 0.0;         // > 0: clip the averaged (unscaled) gradient to this global L2 norm
  TargetConfig target;
  int64_t seed = 1;
  double run_timeout_s = 0.0;          // > 0: stop the run as `timeout` at the first step boundary past this
  bool activation_checkpointing = false;  // transformer presets: keep each block's input, recompute it in backward
};

// sync.staleness "inf" (fully asynchronous parameter server) is stored as this value and written back as "inf".
constexpr int64_t kStalenessInf = std::numeric_limits<int64_t>::max();

struct SyncConfig {
  std::string kind = "allreduce";  // registry: sim/strategy/registry.cpp
  double bucket_mb = 25.0;         // bucket size in MiB after the first
  double first_bucket_mb = 1.0;    // first bucket (last layers) in MiB
  int64_t staleness = 0;           // allreduce: the update at step t applies the averaged gradient of step t - s;
                                   // parameter_server: 0 BSP, s SSP, kStalenessInf ("inf") asynchronous
  bool overlap = true;             // allreduce: buckets overlap backward (false: apex's delay_allreduce)
  int64_t period = 1;              // local_sgd: parameters averaged after steps H, 2H, ... (H = period)
  bool average_optimizer_state = false;  // local_sgd: also average the optimizer state buffers
  int64_t warmup_steps = 0;        // local_sgd: synchronous all-reduce steps before local steps (post-local SGD)
  int64_t shards = 0;              // parameter_server: server shards (0: one per rank)
  bool dedicated = false;          // parameter_server: shards on dedicated devices (else co-located with workers)
  std::string ordering = "modeled";  // parameter_server: interactions in modeled-time order, or real (threads race)
  int64_t stage = 1;               // zero: DeepSpeed's ZeRO stage, 1 optimizer state, 2 + gradients, 3 + parameters
  // zero, stage >= 2, accumulation K > 1: reduce-scatter each micro-batch's gradient as its backward ends and keep only
  // the shard's sum (DeepSpeed stage 2, FSDP without no_sync); false: one reduce-scatter of the accumulated gradient
  // after the last micro-batch (the full gradient is held until then)
  bool reduce_every_microbatch = false;
};

// Gradient compression (docs/design.md, section 2; sim/compress/). Fields other than kind apply to some kinds only: each
// compressor's registry line names its own (sim/compress/registry.cpp), check_kind_specific in run_config.cpp refuses
// the others.
struct CompressionConfig {
  std::string kind = "none";        // registry: sim/compress/registry.cpp
  // Where the error feedback sits (lossy kinds except dgc; sim/compress/reduce.cpp): none; gradient (p = g + e;
  // sent = C(p); e = p - decode(sent), per rank; JSON true); momentum (DGC's momentum correction: the optimizer's
  // SGD momentum moves into each rank's velocity, the residual accumulates it, momentum factor masking); ef21
  // (Richtarik et al. 2021: each rank sends C(g - g_i) and tracks g_i). JSON false is "none".
  std::string error_feedback = "none";
  std::string divide = "pre";       // casts: where the division by the ranks N happens: pre | post | split
  std::string accumulate = "wire";  // casts: the all-reduce's sum in the wire format (NCCL's ring) | fp32
  double ratio = 0.01;              // topk, randomk, dgc: fraction of values kept (when k is 0)
  int64_t k = 0;                    // topk, randomk: values kept per bucket (0: use ratio)
  std::string scope = "bucket";     // topk: select per bucket or over the whole model
  bool shared_indices = false;      // randomk: every rank draws the same index set (indices not sent)
  bool unbiased = false;            // randomk: scale kept values by d/k
  double tau = 1e-3;                // threshold: send |p| >= tau
  int64_t levels = 16;              // qsgd: s quantization levels
  bool vote = false;                // signsgd: receivers take the majority vote of signs
  int64_t rank = 4;                 // powersgd: rank r of each matrix's approximation
  int64_t start_step = 0;           // powersgd: steps before this (0-based) send dense fp32
  double min_compression_rate = 1.0;  // powersgd: compress a matrix iff (rows + cols) r x this < rows cols (torch: 2)
  double orthogonalization_epsilon = 0.0;  // powersgd: Gram-Schmidt divides by norm + this (torch default 0)
  double momentum = 0.9;            // dgc: momentum of the local momentum correction
  double clip_norm = 0.0;           // dgc: local gradient clipping to this L2 norm per rank (0: off)
  int64_t warmup_steps = 0;         // dgc: steps of the exponential ratio warm-up (0: none)
  double sample_ratio = 0.01;       // dgc: fraction of values sampled for the threshold estimate
  // threshold, dgc: the fraction of values kept, which depends on the gradient's values; timing-only runs
  // (training.mode "timing") price their payload from it and need it in (0, 1]; training runs measure it (0: not given).
  double expected_density = 0.0;
  bool expected_density_given = false;  // written in the input (read_fields): a 0 given is out of range, not missing
  bool measure_error = true;        // report the decoded average's relative error (one extra fp32 all-reduce)
};

struct PrecisionConfig {
  std::string mode = "fp32";         // fp32 | tf32 (GPU only) | bf16_mixed | fp16_mixed | fp16_pure | fp8_mixed
  std::string loss_scale = "auto";   // auto (dynamic for fp16_mixed, else none) | none | static | dynamic
  double initial_scale = 65536.0;    // dynamic: the starting scale; static: the scale
  double growth_factor = 2.0;        // dynamic: scale *= growth after growth_interval clean steps
  double backoff_factor = 0.5;       // dynamic: scale *= backoff on an inf/NaN gradient (the step is skipped)
  int64_t growth_interval = 2000;    // dynamic: clean steps between growths
  int64_t amax_history_len = 1024;   // fp8_mixed: steps of amax history behind each tensor's scale
};

struct ReportConfig {
  bool trace = false;     // every rank's parameters after every step (refused above trace_max_params)
  int64_t trace_max_params = 10000;  // the largest model a trace is taken of (its size limit: kTraceMaxBytes)
  std::string save_weights = "none";  // none | initial | final | both: safetensors files in weights/ beside the report
  bool save_batches = false;  // the sample indices of every step, rank and micro-batch: batches/<run>.npz
  bool timeline = false;  // the modeled clock as a Chrome trace-event file beside the report (<= kTimelineMaxSteps)
};

struct RunConfig {
  std::string name = "unnamed";
  ModelConfig model;
  DataConfig data;
  ClusterConfig cluster;
  TrainingConfig training;
  SyncConfig sync;
  CompressionConfig compression;
  PrecisionConfig precision;
  ReportConfig report;
};

constexpr int64_t kTraceMaxParams = 10000;  // report.trace_max_params' default
// report.trace: the largest trace of one run, estimated at kTraceBytesPerNumber per number in report.json
// ((steps + 1) x ranks x parameters numbers; measured 28.3 bytes: report.json prints one number per line, and the
// journal holds the run again at about 21); the report, read back by --resume and the tools, stays under 1 GiB.
constexpr double kTraceMaxBytes = 268435456.0;  // 256 MiB
constexpr double kTraceBytesPerNumber = 28.0;
constexpr double kSaveBatchesMaxIndices = 16777216.0;  // report.save_batches: int32 indices in one file (64 MiB)
constexpr int64_t kTimelineMaxSteps = 50;  // report.timeline: optimizer steps drawn, the run's whole length
constexpr double kTimelineMaxSlices = 5e5;  // report.timeline: slices in one file (about 130 bytes each)
constexpr int64_t kMaxRanks = 1024;
// Limits on runs with arithmetic, refused at validation with the limit named (absurd settings, not this machine's
// memory: that is the run-time memory check, sim/app/memory.h).
constexpr double kMaxParams = 4294967296.0;         // parameters per replica (16 GiB of fp32)
constexpr double kMaxSteps = 1e9;                   // optimizer steps, also when given as epochs
constexpr double kMaxTeacherWeights = 1073741824.0;  // teacher weights hidden x (in_dim + out_dim) (4 GiB)
constexpr double kMaxTeacherEvalMadds = 1e12;        // multiply-adds to generate the teacher's evaluation set

// One problem found in a scenario: the JSON path (dotted, "" for the document) and what was expected.
struct ConfigIssue {
  std::string path;
  std::string message;
};

enum class FieldType { kInt, kNumber, kBool, kString, kIntList, kJson };

// One entry of the field table: a leaf of the configuration.
struct FieldInfo {
  std::string path;                  // dotted, e.g. "training.optimizer.lr"
  FieldType type;
  json default_value;
  std::vector<std::string> choices;  // allowed strings (empty = any)
  double min = -1e308, max = 1e308;  // numeric range
  bool min_exclusive = false, max_exclusive = false;
  bool allow_inf = false;            // integer fields: the string "inf" is also accepted (stored as INT64_MAX)
  std::string bool_false, bool_true;  // string fields: JSON false / true read as these choices (empty: refused)
  std::string doc;
  // A kind field (model.kind, data.kind, training.optimizer.kind, sync.kind, compression.kind): its choices are the
  // names of a registry above this layer, handed in as a KindCatalog.
  bool registry_kind = false;
};

// The kind fields' choices come from the registries above this layer (models, datasets, optimizers, sync strategies,
// compressors), which config cannot include: the validate layer hands them in (registry_kinds(),
// sim/validate/validate.h). Each registry entry names the option paths that apply under its kind; from them the leaf
// derives the kind field's choices, the "only applies when <kind field> is ..." rule of every option and the kinds
// that start its doc ("{compression.kind}: ..." in the field table). A new kind is its registry line.
// An entry's own cross-field rule: the problems of c under its kind, appended to issues (validate_config calls the
// rule of each kind c has; nullptr: none).
using KindIssues = void (*)(const RunConfig& c, std::vector<ConfigIssue>& issues);
struct KindChoice {
  std::string name;                  // a choice of the kind field: the registry entry's name
  std::vector<std::string> options;  // fields, or sections ("data.teacher"), that apply under this kind
  KindIssues issues = nullptr;       // the entry's own rule
};
struct KindField {
  std::string path;                  // the kind field, "compression.kind"
  std::vector<KindChoice> choices;   // in registry order
};
using KindCatalog = std::vector<KindField>;

// Every field of RunConfig, in table order, with the kind fields' choices and the kinds at the start of a doc taken
// from `kinds` (throws gs::Error when a kind field is missing from it or an option names no field). The validate
// layer's config_fields() is this table for the registries' catalog.
std::vector<FieldInfo> field_table(const KindCatalog& kinds);
// True when path (dotted) is a leaf of the field table.
bool is_config_field(const std::string& path);

// Every field, resolved (the form stored in reports).
json config_to_json(const RunConfig& c);

// "did you mean ..." for an unknown key at `path` (dotted), "" if nothing is close.
std::string suggest_key(const std::string& path);

}  // namespace gs
