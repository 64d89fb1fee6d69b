/**
 * @file communicator.cpp
 * @brief The single-process communicator, sum_in_rank_order, and the job's communicator from
 *        the launcher's environment.
 *
 * Launch detection reads only the environment, so that a plain run never touches MPI:
 * OpenMPI's mpirun sets OMPI_COMM_WORLD_SIZE (and PMIX_RANK), a PMIx launcher such as
 * `srun --mpi=pmix` sets PMIX_RANK, a PMI-2 one (`srun --mpi=pmi2`) PMI_RANK and PMI_SIZE.
 * A job of one rank (mpirun -np 1) gets the single-process communicator too: world size 1 is
 * the same run however it was started. srun without an MPI plugin starts its tasks as
 * unrelated processes (SLURM_STEP_NUM_TASKS > 1 but no PMI): each would train alone on the
 * same --out, so that is refused.
 */
#include "parallel/communicator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/bf16.h"
#include "base/error.h"
#include "parallel/nccl_communicator.h"
#ifdef GPT2_HAVE_MPI
#include "parallel/mpi_communicator.h"
#endif

namespace gpt2 {

void SingleProcessCommunicator::all_reduce(float*, size_t count, ReduceOp) {
  record(count * sizeof(float), 0.0);
}

void SingleProcessCommunicator::all_reduce(double*, size_t count, ReduceOp) {
  record(count * sizeof(double), 0.0);
}

void SingleProcessCommunicator::reduce_scatter_sum(const float* send, float* recv,
                                                   size_t recv_count) {
  if (recv != send) std::memmove(recv, send, recv_count * sizeof(float));
  record(recv_count * sizeof(float), 0.0);
}

void SingleProcessCommunicator::all_reduce_sum_bf16(void*, size_t count) {
  record(count * sizeof(uint16_t), 0.0);
}

void SingleProcessCommunicator::reduce_scatter_sum_bf16(const void* send, void* recv,
                                                        size_t recv_count) {
  if (recv != send) std::memmove(recv, send, recv_count * sizeof(uint16_t));
  record(recv_count * sizeof(uint16_t), 0.0);
}

void SingleProcessCommunicator::all_gather(const float* send, float* recv, size_t send_count) {
  if (recv != send) std::memmove(recv, send, send_count * sizeof(float));
  record(send_count * sizeof(float), 0.0);
}

void SingleProcessCommunicator::all_gather_bytes(const void* send, void* recv,
                                                 size_t send_bytes) {
  if (recv != send) std::memmove(recv, send, send_bytes);
  record(send_bytes, 0.0);
}

void SingleProcessCommunicator::broadcast(void*, size_t, int root) {
  GPT2_CHECK(root == 0, "root ", root, " of world size 1");
  record(0, 0.0);
}

std::unique_ptr<Communicator> SingleProcessCommunicator::split(int, int) {
  record(0, 0.0);
  return std::make_unique<SingleProcessCommunicator>();
}

void SingleProcessCommunicator::abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}

double sum_in_rank_order(Communicator& job, double value) {
  Communicator& comm = job.host_communicator();
  GPT2_CHECK(comm.memory_space() == MemorySpace::kHost, "sum_in_rank_order on ",
             comm.backend(), " needs a host communicator");
  if (comm.world_size() == 1) return value;
  std::vector<double> slots(static_cast<size_t>(comm.world_size()), 0.0);
  slots[static_cast<size_t>(comm.rank())] = value;
  comm.all_reduce(slots.data(), slots.size(), ReduceOp::kSum);
  double sum = 0.0;
  for (const double slot : slots) sum += slot;
  return sum;
}

uint16_t add_bf16(uint16_t a, uint16_t b) {
  return float_to_bf16_bits(bf16_bits_to_float(a) + bf16_bits_to_float(b));
}

namespace {

// The positive integer in environment variable `name`, 0 when unset, -1 when not a number.
int env_int(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 0 || value > (1 << 30)) return -1;
  return static_cast<int>(value);
}

bool env_set(const char* name) { return std::getenv(name) != nullptr; }

}  // namespace

LaunchInfo detect_launch() {
  LaunchInfo info;
  if (env_set("OMPI_COMM_WORLD_SIZE")) {
    info.launched = true;
    info.launcher = "mpirun";
    info.world_size = std::max(0, env_int("OMPI_COMM_WORLD_SIZE"));
  } else if (env_set("PMIX_RANK")) {
    info.launched = true;
    info.launcher = "PMIx";
    info.world_size = std::max(0, env_int("SLURM_STEP_NUM_TASKS"));
  } else if (env_set("PMI_RANK")) {
    info.launched = true;
    info.launcher = "PMI";
    info.world_size = std::max(0, env_int("PMI_SIZE"));
  }
  return info;
}

bool mpi_backend_available() {
#ifdef GPT2_HAVE_MPI
  return true;
#else
  return false;
#endif
}

#ifdef GPT2_HAVE_NCCL
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host) {
  return std::make_unique<NcclCommunicator>(host);
}
#else
bool nccl_backend_available() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(Communicator&) {
  GPT2_FAIL("this build has no NCCL (CMake found no nccl.h and libnccl beside the CUDA "
            "toolkit)");
}
#endif

std::unique_ptr<Communicator> make_job_communicator() {
  const LaunchInfo launch = detect_launch();
  if (!launch.launched) {
    const int slurm_tasks = env_int("SLURM_STEP_NUM_TASKS");
    if (slurm_tasks > 1 && env_set("SLURM_PROCID")) {
      GPT2_FAIL("started by srun as task ", std::getenv("SLURM_PROCID"), " of ", slurm_tasks,
                " without MPI (no PMI or PMIx in the environment): the tasks would train "
                "alone, each on the same --out. Launch with srun --mpi=pmix (or pmi2), or "
                "with mpirun");
    }
    return std::make_unique<SingleProcessCommunicator>();
  }
  if (launch.world_size == 1) return std::make_unique<SingleProcessCommunicator>();
#ifdef GPT2_HAVE_MPI
  return std::make_unique<MpiCommunicator>();
#else
  GPT2_FAIL("started as a rank of a job by ", launch.launcher, " (world size ",
            launch.world_size > 0 ? std::to_string(launch.world_size) : std::string("unknown"),
            ") but this build has no MPI: install OpenMPI (Debian: libopenmpi-dev openmpi-bin) "
            "and rebuild");
#endif
}

}  // namespace gpt2
