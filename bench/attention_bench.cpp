/**
 * @file attention_bench.cpp
 * @brief gpt2-attention-bench: every attention kernel (naive, flash-portable, flash-hopper),
 * forward, backward and forward+backward, timed with CUDA events through the attention dispatch.
 *
 * For each head size and T: B = max(1, --tokens / T); --sets independent sets of random bf16
 * qkv and dO (enough sets that they overflow the L2 cache several times, unless told), rotated
 * from one timed run to the next so the cache does not flatter. flash-hopper runs twice: its
 * default backward (dQ additions race from gpu::kHopperRacingFromT, fixed order below it, where
 * that is faster) and flash-hopper-det (fixed-order dQ, bit-identical runs). Asked for,
 * flash-hopper-racing is the racing backward at every T.
 * Each kernel is validated once against a reference kernel (naive where it fits in memory, else
 * flash-portable: relative L2 of out and dqkv), then timed: --warmup untimed calls (and more for
 * --warmup-ms: bench/gpu_timing.h), then --repeats timed runs of --burst calls each, back to
 * back between two events (so the host's launch work overlaps the GPU's, as in training,
 * instead of idling it at the start of every run); the median run divided by --burst reported.
 * Backward runs are timed on the forward outputs of the same set. Never asserts.
 * FLOPs (FlashAttention's convention; causal: the masked half not counted; recomputation not
 * counted): forward 4 B NH T^2 HS / 2, backward 2.5 x forward, forward+backward 3.5 x forward.
 * Naive runs are skipped (NaN) when its T x T buffers do not fit in free memory.
 * The CSV also holds a 64-bit FNV-1a digest of each kernel's out and dqkv bits on set 0: equal
 * digests from two builds show a change left a deterministic kernel's results bit for bit.
 * Prints a table and writes CSV (--csv, default out/attention_bench.csv), rewritten whole (and
 * atomically) after every T, so that a run cut short keeps the points it measured.
 * --remeasure K takes each timing K times on the same buffers and prints every one (the CSV
 * keeps the first): whether a spread between timings stays with one allocation.
 */
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cxxopts.hpp>

#include "base/bf16.h"
#include "base/command_line.h"
#include "base/error.h"
#include "base/file_io.h"
#include "base/rng.h"
#include "bench/gpu_timing.h"
#include "kernels/gpu/attention.cuh"
#include "kernels/gpu/attention_hopper.cuh"
#include "kernels/gpu/context.cuh"

namespace gpt2 {
namespace {

using gpu::AttentionKernel;
using gpu::HopperForwardShape;

using bench::Buffer;
using bench::median_ms;

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint16_t> host(n);
  for (auto& v : host) v = float_to_bf16_bits(static_cast<float>(rng.normal()));
  return host;
}

/// Uploads `values` rotated left by `shift` elements (distinct input sets from one draw).
void upload_rotated(const Buffer& buffer, const std::vector<uint16_t>& values, size_t n,
                    size_t shift) {
  std::vector<uint16_t> rotated(n);
  for (size_t i = 0; i < n; ++i) rotated[i] = values[(i + shift) % values.size()];
  GPT2_CUDA_CHECK(cudaMemcpy(buffer.ptr, rotated.data(), n * 2, cudaMemcpyHostToDevice));
}

std::vector<float> download_bf16(const Buffer& buffer, size_t n) {
  std::vector<uint16_t> host(n);
  GPT2_CUDA_CHECK(cudaMemcpy(host.data(), buffer.ptr, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = bf16_bits_to_float(host[i]);
  return out;
}

/// FNV-1a over the values' bits: a fingerprint of a result, to compare builds bit for bit.
uint64_t bit_digest(const std::vector<float>& values) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (float v : values) {
    uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    for (int byte = 0; byte < 4; ++byte) {
      hash ^= (bits >> (8 * byte)) & 0xffu;
      hash *= 0x100000001b3ull;
    }
  }
  return hash;
}

std::string hex_digest(uint64_t digest) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(digest));
  return text;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

/// A kernel as benchmarked: the Hopper backward once in each dQ mode; the Hopper forward with
/// the block shape it picks, or a forced one (suffix /fwd128, /fwd64 or /fwd64w1).
struct BenchKernel {
  AttentionKernel kernel;
  bool deterministic;
  int racing_from_t;       // the Hopper backward's (AttentionConfig::backward_racing_from_t)
  HopperForwardShape forward_shape;
  std::string name;        // e.g. "flash-hopper", "flash-hopper-det", "flash-hopper/fwd64"
};

BenchKernel parse_kernel(const std::string& name) {
  const size_t slash = name.find('/');
  const std::string base = name.substr(0, slash);
  BenchKernel parsed{AttentionKernel::kNaive, false, gpu::kHopperRacingFromT,
                     HopperForwardShape::kAuto, name};
  bool known = base == "flash-hopper-det" || base == "flash-hopper-racing";
  if (known) {
    parsed.kernel = AttentionKernel::kFlashHopper;
    parsed.deterministic = base == "flash-hopper-det";
    if (base == "flash-hopper-racing") parsed.racing_from_t = 1;
  }
  for (AttentionKernel k : {AttentionKernel::kNaive, AttentionKernel::kFlashPortable,
                            AttentionKernel::kFlashHopper})
    if (base == gpu::to_string(k)) {
      parsed.kernel = k;
      known = true;
    }
  if (!known)
    GPT2_USAGE_FAIL("--kernels takes naive, flash-portable, flash-hopper, flash-hopper-det, "
                    "flash-hopper-racing (got '", name, "')");
  if (slash != std::string::npos) {
    const std::string shape = name.substr(slash + 1);
    for (HopperForwardShape s : {HopperForwardShape::kRows128, HopperForwardShape::kRows64,
                                 HopperForwardShape::kRows64NoProducer})
      if (shape == gpu::to_string(s)) parsed.forward_shape = s;
    if (parsed.kernel != AttentionKernel::kFlashHopper ||
        parsed.forward_shape == HopperForwardShape::kAuto)
      GPT2_USAGE_FAIL("--kernels: only flash-hopper(-det, -racing) takes a forward shape, "
                      "/fwd128, /fwd64 or /fwd64w1 (got '", name, "')");
  }
  return parsed;
}

/// One input set: qkv and dO, plus what forward leaves for backward.
struct InputSet {
  InputSet(size_t n_out, size_t saved_bytes)
      : qkv(3 * n_out * 2),
        dout(n_out * 2),
        out(n_out * 2),
        saved(saved_bytes),
        dqkv(3 * n_out * 2) {}
  Buffer qkv, dout, out, saved, dqkv;
};

struct Timing {
  double fwd_ms = NAN, bwd_ms = NAN, fwdbwd_ms = NAN, err_out = NAN, err_dqkv = NAN;
  // The SM clock (MHz) read right after each timing's last run (median_ms): under the power cap
  // it moves with what ran before, so a timing far from its neighbours can be told apart.
  double fwd_mhz = NAN, bwd_mhz = NAN, fwdbwd_mhz = NAN;
  uint64_t out_digest = 0, dqkv_digest = 0;  // of set 0's results; 0 when the kernel did not run
  int sets = 0;
  // --remeasure K > 1: the K - 1 further medians {fwd, bwd, f+b} (ms) on the same buffers, so a
  // spread that stays with one allocation (placement) can be told from one that does not.
  std::vector<std::array<double, 3>> again_ms;
};

/// Which timings a run takes (--measure): a forward-only A/B skips the other two.
struct Measured {
  bool fwd = true, bwd = true, fwdbwd = true;
};

/// --measure's comma-separated list of fwd, bwd and fwdbwd.
Measured parse_measured(const std::string& list) {
  Measured measured{false, false, false};
  std::stringstream stream_list(list);
  std::string item;
  while (std::getline(stream_list, item, ',')) {
    if (item == "fwd") measured.fwd = true;
    else if (item == "bwd") measured.bwd = true;
    else if (item == "fwdbwd") measured.fwdbwd = true;
    else GPT2_USAGE_FAIL("--measure takes fwd, bwd and fwdbwd (got '", item, "')");
  }
  if (!measured.fwd && !measured.bwd && !measured.fwdbwd)
    GPT2_USAGE_FAIL("--measure names nothing to time");
  return measured;
}

/// One kernel's timings at one shape (B, T, NH, HS over `sets` rotated input sets, as many as
/// fit; those not in `measured` stay NaN), then a forward and backward on set 0 whose out and
/// dqkv land in *out and *dqkv for the validation; false (a NaN row) when even one set does not
/// fit in free memory.
bool time_kernel(const BenchKernel& kernel, int B, int T, int NH, int HS, int sets,
                 const std::vector<uint16_t>& random_values, const bench::TimingPlan& plan,
                 int remeasure, const Measured& measured, const gpu::Context& ctx,
                 Timing* timing, std::vector<float>* out, std::vector<float>* dqkv) {
  const int C = NH * HS;
  const size_t n_out = size_t(B) * T * C;
  cudaStream_t stream = ctx.stream();
  gpu::AttentionConfig config;
  config.B = B;
  config.T = T;
  config.C = C;
  config.NH = NH;
  config.bf16 = true;
  config.kernel = kernel.kernel;
  config.deterministic = kernel.deterministic;
  config.backward_racing_from_t = kernel.racing_from_t;
  config.forward_shape = kernel.forward_shape;
  const size_t saved_bytes = gpu::attention_saved_bytes(config);
  const size_t workspace_bytes = gpu::attention_workspace_bytes(config);
  size_t free_bytes = 0, total_bytes = 0;
  GPT2_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  auto fits = [&](int n) {
    return n * (8 * n_out * 2 + saved_bytes) + workspace_bytes + (size_t(1) << 30) <= free_bytes;
  };
  int kernel_sets = sets;
  while (kernel_sets > 1 && !fits(kernel_sets)) --kernel_sets;
  if (!fits(kernel_sets)) return false;  // NaN row: does not fit
  std::vector<std::unique_ptr<InputSet>> inputs;
  for (int i = 0; i < kernel_sets; ++i) {
    inputs.push_back(std::make_unique<InputSet>(n_out, saved_bytes));
    upload_rotated(inputs.back()->qkv, random_values, 3 * n_out, 7919 * (2 * i));
    upload_rotated(inputs.back()->dout, random_values, n_out, 7919 * (2 * i + 1));
  }
  Buffer workspace(workspace_bytes);
  auto tensors_of = [&](int i) {
    InputSet& set = *inputs[i % kernel_sets];
    gpu::AttentionTensors t;
    t.qkv = set.qkv.ptr;
    t.out = set.out.ptr;
    t.saved = set.saved.ptr;
    t.dout = set.dout.ptr;
    t.dqkv = set.dqkv.ptr;
    t.workspace = workspace.ptr;
    return t;
  };
  auto forward = [&](int i) { gpu::attention_forward(config, tensors_of(i), ctx); };
  auto backward = [&](int i) { gpu::attention_backward(config, tensors_of(i), ctx); };
  for (int i = 0; i < kernel_sets; ++i) forward(i);  // every set holds its forward outputs
  timing->sets = kernel_sets;
  if (measured.fwd)
    timing->fwd_ms = median_ms(forward, plan, stream, &timing->fwd_mhz);
  if (measured.bwd)
    timing->bwd_ms = median_ms(backward, plan, stream, &timing->bwd_mhz);
  auto both = [&](int i) {
    forward(i);
    backward(i);
  };
  if (measured.fwdbwd)
    timing->fwdbwd_ms = median_ms(both, plan, stream, &timing->fwdbwd_mhz);
  for (int r = 1; r < remeasure; ++r) {
    std::array<double, 3> again{NAN, NAN, NAN};
    if (measured.fwd) again[0] = median_ms(forward, plan, stream);
    if (measured.bwd) again[1] = median_ms(backward, plan, stream);
    if (measured.fwdbwd) again[2] = median_ms(both, plan, stream);
    timing->again_ms.push_back(again);
  }
#if defined(GPT2_FORWARD_PHASES)
  if (kernel.kernel == gpu::AttentionKernel::kFlashHopper) {
    // Profiling build: the forward's phases over plan.repeats calls, per item and as shares of
    // the consumers' time (attention_hopper.cuh).
    unsigned long long phases[gpu::kForwardPhases];
    gpu::attention_hopper_forward_phases(phases);  // clears what the timing left
    for (int i = 0; i < plan.repeats; ++i) forward(i);
    gpu::attention_hopper_forward_phases(phases);
    // Items and the consumers' total are counted by the persistent kernel only (by default
    // T <= hopper_forward_persistent_max_t(HS)).
    const double items = double(phases[gpu::kPhaseItems]);
    const double total = double(phases[gpu::kPhaseConsumerTotal]);
    if (items == 0 || total == 0) {
      std::printf("  phases (T %d, HS %d, %s): the forward is not persistent here\n", T, HS,
                  kernel.name.c_str());
    } else {
      const char* names[gpu::kForwardPhases] = {"items",   "q wait",   "first tile",
                                                "loop",    "last pv",  "epilogue",
                                                "consumer total", "producer q_empty"};
      std::printf("  phases (T %d, HS %d, %s): %.0f consumer-items a call; cycles per\n"
                  "  consumer-item and share of the consumers' time\n",
                  T, HS, kernel.name.c_str(), items / plan.repeats);
      for (int k = 1; k < gpu::kForwardPhases; ++k)
        std::printf("    %-17s %9.0f  %5.1f%%\n", names[k], phases[k] / items,
                    100.0 * phases[k] / total);
    }
  }
#endif
  forward(0);  // fresh outputs of set 0 for the validation
  backward(0);
  GPT2_CUDA_CHECK(cudaStreamSynchronize(stream));
  *out = download_bf16(inputs[0]->out, n_out);
  *dqkv = download_bf16(inputs[0]->dqkv, 3 * n_out);
  return true;
}

/// gpt2-attention-bench's command line.
cxxopts::Options bench_command_line() {
  cxxopts::Options cli("gpt2-attention-bench",
                       "Time the attention kernels (bf16, causal): forward, backward and both, "
                       "with CUDA events; median of repeated runs after warm-up, inputs rotated.");
  cli.add_options()
      ("seq-lens", "comma-separated T", cxxopts::value<std::string>()->default_value("512,1024,2048,4096,8192,16384,32768,65536"))
      ("tokens", "B = max(1, tokens / T)", cxxopts::value<int>()->default_value("16384"))
      ("heads", "NH", cxxopts::value<int>()->default_value("12"))
      ("head-sizes", "comma-separated HS (64, 128)", cxxopts::value<std::string>()->default_value("64,128"))
      ("kernels", "comma-separated: naive, flash-portable, flash-hopper, flash-hopper-det (deterministic dQ), flash-hopper-racing (racing dQ at every T), the last three with /fwd128, /fwd64 or /fwd64w1 (64 rows, no producer warpgroup) to force the forward's block shape; default: all that run here", cxxopts::value<std::string>()->default_value(""))
      ("sets", "input sets rotated between runs (0: enough to exceed 4x the L2 cache)", cxxopts::value<int>()->default_value("0"))
      ("measure", "comma-separated timings to take: fwd, bwd, fwdbwd (the others NaN; the validation runs both)", cxxopts::value<std::string>()->default_value("fwd,bwd,fwdbwd"))
      ("remeasure", "take each timing this many times on the same buffers: the first in the "
                    "CSV, all printed (does a spread stay with one allocation?)",
       cxxopts::value<int>()->default_value("1"));
  bench::add_timing_options(cli, 3, 10, "out/attention_bench.csv");
  return cli;
}

int bench_main(int argc, char** argv) {
  cxxopts::Options cli = bench_command_line();
  const cxxopts::ParseResult args = parse_tool_options(cli, argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", cli.help().c_str());
    return 0;
  }
  const int NH = args["heads"].as<int>();
  const bench::TimingPlan plan = bench::timing_plan(args);
  const std::vector<int> head_sizes = parse_positive_int_list("head-sizes", args["head-sizes"].as<std::string>());
  const std::vector<int> seq_lens = parse_positive_int_list("seq-lens", args["seq-lens"].as<std::string>());
  const int remeasure = args["remeasure"].as<int>();
  if (remeasure < 1 || remeasure > 100)
    GPT2_USAGE_FAIL("--remeasure takes 1 to 100 (got ", remeasure, ")");
  if (NH < 1 || args["sets"].as<int>() < 0) GPT2_USAGE_FAIL("need --heads >= 1 and --sets >= 0");
  for (int hs : head_sizes)
    if (hs != 64 && hs != 128) GPT2_USAGE_FAIL("--head-sizes takes 64 and 128 (got ", hs, ")");
  const Measured measured = parse_measured(args["measure"].as<std::string>());
  // An explicit --kernels list is checked before the device is touched.
  std::vector<BenchKernel> listed_kernels;
  {
    std::stringstream stream_list(args["kernels"].as<std::string>());
    std::string item;
    while (std::getline(stream_list, item, ',')) listed_kernels.push_back(parse_kernel(item));
  }
  const std::string csv_path = args["csv"].as<std::string>();
  check_output_path("--csv", csv_path);

  gpu::Context ctx;
  cudaDeviceProp prop{};
  GPT2_CUDA_CHECK(cudaGetDeviceProperties(&prop, ctx.device()));
  std::printf("gpt2-attention-bench on %s: bf16, causal, NH=%d, %s\n",
              ctx.device_name().c_str(), NH, bench::describe(plan).c_str());
  std::printf("%4s %6s %3s %-15s | %9s %9s %9s | %8s %8s %8s | %9s %9s | %s\n", "HS", "T", "B",
              "kernel", "fwd ms", "bwd ms", "f+b ms", "fwd TF/s", "bwd TF/s", "f+b TF/s",
              "err out", "err dqkv", "SM MHz f/b/f+b");
  std::ostringstream csv;
  csv << "device,head_size,seq_len,batch,heads,kernel,deterministic,sets,fwd_ms,bwd_ms,fwdbwd_ms,"
         "fwd_tflops,bwd_tflops,fwdbwd_tflops,rel_err_out,rel_err_dqkv,out_digest,dqkv_digest,"
         "fwd_mhz,bwd_mhz,fwdbwd_mhz\n";

  for (int HS : head_sizes) {
    std::vector<BenchKernel> kernels = listed_kernels;
    if (kernels.empty()) {
      kernels = {parse_kernel("naive"), parse_kernel("flash-portable")};
      std::string why;
      if (gpu::attention_hopper_supported(true, HS, &why)) {
        kernels.push_back(parse_kernel("flash-hopper"));
        kernels.push_back(parse_kernel("flash-hopper-det"));
      } else {
        std::printf("(flash-hopper not run: %s)\n", why.c_str());
      }
    }
    const int C = NH * HS;
    for (int T : seq_lens) {
      const int B = std::max(1, args["tokens"].as<int>() / T);
      const size_t n_out = size_t(B) * T * C;
      const double fwd_flops = 4.0 * B * NH * double(T) * T * HS / 2;
      auto tflops = [](double flops, double ms) { return flops / (ms * 1e-3) / 1e12; };
      const size_t set_bytes = 4 * n_out * 2;  // qkv + dO
      int sets = args["sets"].as<int>();
      if (sets == 0)
        sets = static_cast<int>(std::clamp<size_t>(4 * size_t(prop.l2CacheSize) / set_bytes + 1, 1, 8));

      const std::vector<uint16_t> random_values = random_bf16(3 * n_out, 1000 + T + HS);
      std::vector<Timing> timings(kernels.size());
      std::vector<float> ref_out, ref_dqkv;
      std::string ref_name;
      for (size_t k = 0; k < kernels.size(); ++k) {
        // Validation on set 0 (fresh outputs), against the first kernel that ran.
        std::vector<float> out, dqkv;
        if (!time_kernel(kernels[k], B, T, NH, HS, sets, random_values, plan, remeasure,
                         measured, ctx, &timings[k], &out, &dqkv))
          continue;
        Timing& timing = timings[k];
        timing.out_digest = bit_digest(out);
        timing.dqkv_digest = bit_digest(dqkv);
        if (ref_name.empty()) {
          ref_name = kernels[k].name;
          ref_out = std::move(out);
          ref_dqkv = std::move(dqkv);
        } else {
          timing.err_out = rel_l2(out, ref_out);
          timing.err_dqkv = rel_l2(dqkv, ref_dqkv);
        }
      }
      for (size_t k = 0; k < kernels.size(); ++k) {
        const Timing& t = timings[k];
        const char* name = kernels[k].name.c_str();
        std::printf("%4d %6d %3d %-15s | %9.3f %9.3f %9.3f | %8.1f %8.1f %8.1f | %9.2e %9.2e | "
                    "%.0f/%.0f/%.0f\n", HS, T, B, name, t.fwd_ms, t.bwd_ms, t.fwdbwd_ms,
                    tflops(fwd_flops, t.fwd_ms), tflops(2.5 * fwd_flops, t.bwd_ms),
                    tflops(3.5 * fwd_flops, t.fwdbwd_ms), t.err_out, t.err_dqkv, t.fwd_mhz,
                    t.bwd_mhz, t.fwdbwd_mhz);
        for (size_t r = 0; r < t.again_ms.size(); ++r) {
          const std::array<double, 3>& again = t.again_ms[r];
          std::printf("%4d %6d %3d %-15s | again %zu/%zu on the same buffers: %.1f / %.1f / %.1f "
                      "TFLOP/s\n", HS, T, B, name, r + 2, t.again_ms.size() + 1,
                      tflops(fwd_flops, again[0]), tflops(2.5 * fwd_flops, again[1]),
                      tflops(3.5 * fwd_flops, again[2]));
        }
        csv << '"' << ctx.device_name() << "\"," << HS << ',' << T << ',' << B << ',' << NH << ','
            << name << ',' << (kernels[k].deterministic ? 1 : 0) << ',' << t.sets << ','
            << t.fwd_ms << ',' << t.bwd_ms << ',' << t.fwdbwd_ms << ',' << tflops(fwd_flops, t.fwd_ms) << ','
            << tflops(2.5 * fwd_flops, t.bwd_ms) << ',' << tflops(3.5 * fwd_flops, t.fwdbwd_ms)
            << ',' << t.err_out << ',' << t.err_dqkv << ',' << hex_digest(t.out_digest) << ','
            << hex_digest(t.dqkv_digest) << ',' << t.fwd_mhz << ',' << t.bwd_mhz << ','
            << t.fwdbwd_mhz << '\n';
      }
      if (!ref_name.empty())
        std::printf("%4s %6s %3s (errors: rel L2 against %s on the same inputs)\n", "", "", "",
                    ref_name.c_str());
      std::fflush(stdout);
      write_text_file(csv_path, csv.str());
    }
  }
  std::printf("(NaN: the kernel's buffers do not fit in free memory)\nwrote %s\n", csv_path.c_str());
  return 0;
}

}  // namespace
}  // namespace gpt2

int main(int argc, char** argv) {
  return gpt2::run_tool_main("gpt2-attention-bench", [&] { return gpt2::bench_main(argc, argv); });
}
