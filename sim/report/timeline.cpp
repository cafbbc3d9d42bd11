// The run's timeline as Chrome trace-event JSON (timeline.h). Written as text with fmt (a sweep's timeline can hold
// hundreds of thousands of events; a JSON tree of them would take far more memory than the file).
#include "sim/report/timeline.h"

#include <algorithm>
#include <iterator>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace gs {
namespace {

std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

class EventWriter {
 public:
  EventWriter() { out_.reserve(1 << 16); }
  // A complete event ("ph": "X") of dur_s seconds at ts_s; nothing for one that rounds to 0 us at the file's 4
  // decimals (a float's rounding leftover). args: JSON object text or "".
  void slice(int tid, const char* name, const char* cat, double ts_s, double dur_s, const std::string& args = "") {
    if (!(dur_s * 1e6 >= 5e-5)) return;
    begin();
    fmt::format_to(std::back_inserter(out_),
                   R"({{"name":"{}","cat":"{}","ph":"X","ts":{:.4f},"dur":{:.4f},"pid":1,"tid":{})", name, cat,
                   ts_s * 1e6, dur_s * 1e6, tid);
    if (!args.empty()) fmt::format_to(std::back_inserter(out_), R"(,"args":{})", args);
    out_ += '}';
    ++slices_;
  }
  // A thread-scoped instant event ("ph": "i").
  void instant(int tid, const std::string& name, double ts_s, const std::string& args) {
    begin();
    fmt::format_to(std::back_inserter(out_),
                   R"({{"name":{},"cat":"step","ph":"i","s":"t","ts":{:.4f},"pid":1,"tid":{},"args":{}}})",
                   quoted(name), ts_s * 1e6, tid, args);
  }
  // A metadata event ("ph": "M"): process_name, thread_name, thread_sort_index.
  void meta(const char* what, int tid, const std::string& args) {
    begin();
    fmt::format_to(std::back_inserter(out_), R"({{"name":"{}","ph":"M","pid":1,"tid":{},"args":{}}})", what, tid,
                   args);
  }
  std::string& out() { return out_; }
  int64_t slices() const { return slices_; }

 private:
  void begin() {
    if (!first_) out_ += ",\n";
    first_ = false;
  }
  std::string out_;
  bool first_ = true;
  int64_t slices_ = 0;
};

// Lays slices end to end on one track from `at`.
struct Cursor {
  EventWriter& w;
  int tid;
  double at;
  void put(double dur_s, const char* name, const char* cat, const std::string& args = "") {
    if (!(dur_s > 0.0)) return;
    w.slice(tid, name, cat, at, dur_s, args);
    at += dur_s;
  }
};

std::string step_args(int64_t step) { return fmt::format(R"({{"step":{}}})", step); }

std::string algo_args(const ChainSpan& ch) {
  return fmt::format(R"("bytes":{:.0f},"algorithm":{},"protocol":{})", ch.bytes,
                     ch.has_collective ? quoted(kNcclAlgoNames[static_cast<size_t>(ch.chosen.algo)]) : "null",
                     ch.has_collective ? quoted(kNcclProtoNames[static_cast<size_t>(ch.chosen.proto)]) : "null");
}

// ZeRO stage 3: the parameter gathers of micro-batch k's forward or backward, in the order the pass computes their
// layers.
std::vector<const ChainSpan*> pass_gathers(const StepLayout& l, int64_t k, bool backward) {
  std::vector<const ChainSpan*> g;
  for (const ChainSpan& ch : l.chains)
    if (ch.unshard && ch.range.micro_batch == k && ch.slot.backward == backward) g.push_back(&ch);
  std::stable_sort(g.begin(), g.end(), [](const ChainSpan* a, const ChainSpan* b) {
    return a->slot.compute_before < b->slot.compute_before;
  });
  return g;
}

// One forward or backward of micro-batch k (0-based) on the compute track: its compute_s split where the compute
// stream waits for a stage-3 parameter gather, each wait a communicate slice between.
void put_pass(Cursor& c, const StepLayout& l, int64_t step, int64_t k, bool backward, double compute_s) {
  const char* name = backward ? "backward" : "forward";
  const std::string mb = fmt::format(R"({{"step":{},"micro_batch":{}}})", step, k + 1);
  double done = 0.0;
  for (const ChainSpan* g : pass_gathers(l, k, backward)) {
    if (!(g->slot.stall_s > 0.0)) continue;
    c.put((g->slot.compute_before - done) * compute_s, name, name, mb);
    done = g->slot.compute_before;
    c.put(g->slot.stall_s, "wait for parameter all-gather (exposed)", "communicate",
          fmt::format(R"({{"step":{},"micro_batch":{},"layer":{}}})", step, k + 1, g->slot.unit));
  }
  c.put((1.0 - done) * compute_s, name, name, mb);
}

// The compute track of one laid-out step from `at` (the rank's step start).
void compute_step(EventWriter& w, int tid, double at, double step_s, const StepLayout& l, int64_t step) {
  Cursor c{w, tid, at};
  const std::string args = step_args(step);
  c.put(l.lag_s, "wait for the rank furthest behind", "wait", args);
  c.put(l.data_s, "data stall", "data", args);
  const int64_t K = std::max<int64_t>(1, l.micro_batches);
  const double last = K == 1 ? l.backward_s : std::min(l.last_backward_s, l.backward_s);
  const double earlier = K == 1 ? 0.0 : (l.backward_s - last) / static_cast<double>(K - 1);
  for (int64_t k = 0; k < K; ++k) {
    put_pass(c, l, step, k, false, l.forward_s / static_cast<double>(K));
    put_pass(c, l, step, k, true, k + 1 == K ? last : earlier);
  }
  c.put(l.compress_s, "compress", "compress", args);
  c.put(l.exposed_compress_s, "compress (exposed chain work)", "compress", args);
  c.put(l.exposed_communicate_s, "communicate (exposed)", "communicate", args);
  c.put(l.wait_collective_s, "wait for the other ranks' collectives", "wait", args);
  c.put(l.optimizer_s, "optimizer", "optimizer", args);
  c.put(at + step_s - c.at, "wait for the slowest rank", "wait", args);
}

// The communication and unshard tracks of one laid-out step starting at `at`: each stream first in, first out from
// where its previous slice ended (comm_free, unshard_free).
void chain_step(EventWriter& w, int rank, double at, const StepLayout& l, int64_t step, double& comm_free,
                double& unshard_free) {
  for (size_t i = 0; i < l.chains.size(); ++i) {
    const ChainSpan& ch = l.chains[i];
    if (ch.unshard) {
      Cursor s{w, timeline_tid(rank, TimelineTrack::kUnshard), std::max(at + l.lag_s + ch.start_s, unshard_free)};
      s.put(ch.comm_s, kCollectiveKindNames[static_cast<size_t>(ch.kind)], "collective",
            fmt::format(R"({{"step":{},"bucket":{},{},"micro_batch":{},"pass":"{}","layer":{},"exposed_us":{:.6g},)"
                        R"("param_begin":{},"param_end":{}}})",
                        step, i, algo_args(ch), ch.range.micro_batch + 1, ch.slot.backward ? "backward" : "forward",
                        ch.slot.unit, ch.slot.stall_s * 1e6, ch.range.begin, ch.range.end));
      unshard_free = s.at;
      continue;
    }
    Cursor s{w, timeline_tid(rank, TimelineTrack::kCommunication), std::max(at + l.lag_s + ch.start_s, comm_free)};
    const std::string bucket = fmt::format(R"({{"step":{},"bucket":{}}})", step, i);
    s.put(ch.pre_s, "encode", "chain_compute", bucket);
    const char* name = ch.has_collective ? kCollectiveKindNames[static_cast<size_t>(ch.kind)] : "p2p";
    s.put(ch.comm_s, name, "collective",
          fmt::format(R"({{"step":{},"bucket":{},{},"grad_begin":{},"grad_end":{}}})", step, i, algo_args(ch),
                      ch.range.begin, ch.range.end));
    s.put(ch.post_s, "decode", "chain_compute", bucket);
    comm_free = s.at;
  }
}

// One rank's modeled steps from their layouts (StepLayout, cost_model.h).
void modeled_rank(EventWriter& w, const RunResult& res, size_t r) {
  const int rank = static_cast<int>(r);
  const int compute = timeline_tid(rank, TimelineTrack::kCompute);
  const int loader = timeline_tid(rank, TimelineTrack::kDataLoader);
  const auto& steps = res.modeled_steps[r];
  const bool laid_out = r < res.modeled_layouts.size() && res.modeled_layouts[r].size() == steps.size();
  double clock = 0.0, comm_free = 0.0, unshard_free = 0.0;
  for (size_t t = 0; t < steps.size(); ++t) {
    const StepTimes& st = steps[t];
    const auto step = static_cast<int64_t>(t) + 1;
    const double exposed = r < res.modeled_exposed_s.size() && t < res.modeled_exposed_s[r].size()
                               ? res.modeled_exposed_s[r][t] : 0.0;
    const double overlapped = r < res.modeled_overlapped_s.size() && t < res.modeled_overlapped_s[r].size()
                                  ? res.modeled_overlapped_s[r][t] : 0.0;
    w.instant(compute, fmt::format("step {}", step), clock,
              fmt::format(R"({{"step":{},"step_ms":{:.6g},"exposed_communication_ms":{:.6g},)"
                          R"("overlapped_communication_ms":{:.6g},"bytes_sent":{}}})",
                          step, st.step_s * 1e3, exposed * 1e3, overlapped * 1e3, st.bytes_sent));
    const std::string args = step_args(step);
    if (!laid_out) {  // modeled phases end to end (strategies that keep per-worker clocks)
      Cursor c{w, compute, clock};
      for (size_t p = 0; p < kPhaseCount; ++p) c.put(st.phase_s[p], kPhaseNames[p], kPhaseNames[p], args);
      clock += st.step_s;
      continue;
    }
    const StepLayout& l = res.modeled_layouts[r][t];
    compute_step(w, compute, clock, st.step_s, l, step);
    chain_step(w, rank, clock, l, step, comm_free, unshard_free);
    if (l.fetch_begin_s >= 0.0 && l.fetch_end_s > l.fetch_begin_s)
      w.slice(loader, "load batch", "data_loader", l.fetch_begin_s, l.fetch_end_s - l.fetch_begin_s, args);
    clock += st.step_s;
  }
}

// One rank's measured steps: phase totals end to end in the rank loop's order, the rest of the step as "other".
void measured_rank(EventWriter& w, const RunResult& res, size_t r) {
  static constexpr Phase kOrder[] = {Phase::kData,     Phase::kForward,     Phase::kBackward, Phase::kWait,
                                     Phase::kCompress, Phase::kCommunicate, Phase::kOptimizer};
  double clock = 0.0;
  const auto& steps = res.steps[r];
  for (size_t t = 0; t < steps.size(); ++t) {
    Cursor c{w, timeline_tid(static_cast<int>(r), TimelineTrack::kMeasured), clock};
    const std::string args = step_args(static_cast<int64_t>(t) + 1);
    for (Phase p : kOrder) {
      const size_t i = static_cast<size_t>(p);
      c.put(steps[t].phase_s[i], kPhaseNames[i], kPhaseNames[i], args);
    }
    c.put(clock + steps[t].step_s - c.at, "outside the timed phases", "other", args);
    clock += steps[t].step_s;
  }
}

}  // namespace

int timeline_tid(int rank, TimelineTrack track) {
  return rank * kTimelineTracksPerRank + static_cast<int>(track) + 1;  // tid 0: the process's own
}

TimelineText timeline_text(const std::string& run_id, const RunResult& res) {
  EventWriter w;
  w.meta("process_name", 0, fmt::format(R"({{"name":{}}})", quoted(run_id + " (modeled on " + res.hardware + ")")));
  const size_t ranks = res.modeled_steps.size();
  const bool measured = !res.steps.empty() && !res.steps[0].empty();
  bool loader = false, unshard = false;
  for (const auto& rank_layouts : res.modeled_layouts)
    for (const StepLayout& l : rank_layouts) {
      loader = loader || l.fetch_begin_s >= 0.0;
      for (const ChainSpan& ch : l.chains) unshard = unshard || ch.unshard;
    }
  for (size_t r = 0; r < ranks; ++r) {
    const int rank = static_cast<int>(r);
    auto track = [&](TimelineTrack t, const char* what) {
      const int tid = timeline_tid(rank, t);
      w.meta("thread_name", tid, fmt::format(R"({{"name":"rank {} {}"}})", rank, what));
      w.meta("thread_sort_index", tid, fmt::format(R"({{"sort_index":{}}})", tid));
    };
    track(TimelineTrack::kCompute, "compute (modeled)");
    track(TimelineTrack::kCommunication, "communication (modeled)");
    if (unshard) track(TimelineTrack::kUnshard, "unshard: parameter all-gathers (modeled)");
    if (loader) track(TimelineTrack::kDataLoader, "data loader (modeled)");
    if (measured && r < res.steps.size()) track(TimelineTrack::kMeasured, "measured phases");
  }
  for (size_t r = 0; r < ranks; ++r) modeled_rank(w, res, r);
  if (measured)
    for (size_t r = 0; r < res.steps.size(); ++r) measured_rank(w, res, r);
  const size_t steps = ranks == 0 ? 0 : res.modeled_steps[0].size();
  TimelineText out;
  out.slices = w.slices();
  out.text = fmt::format(R"({{"displayTimeUnit":"ms","otherData":{{"run_id":{},"hardware":{},"ranks":{},"steps":{},)"
                         R"("time_unit":"us","clock":"modeled; the measured phases on their own tracks"}},)"
                         "\n\"traceEvents\":[\n",
                         quoted(run_id), quoted(res.hardware), ranks, steps);
  out.text += w.out();
  out.text += "\n]}\n";
  return out;
}

std::string timeline_file_name(const std::string& run_id, int64_t index) {
  auto ok = [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
           ch == '_' || ch == '=' || ch == '-';
  };
  if (!run_id.empty() && run_id.size() <= 180 && std::all_of(run_id.begin(), run_id.end(), ok) && run_id[0] != '.')
    return run_id + ".json";
  std::string s;
  for (char ch : run_id.substr(0, 160)) s += ok(ch) ? ch : '_';
  return fmt::format("{}-{}.json", s, index);
}

}  // namespace gs
