/**
 * @file mpi_communicator.cpp
 * @brief MpiCommunicator: each collective is one MPI call (all_reduce and broadcast in chunks
 *        below 2^31 elements, MPI's int counts), timed into stats().
 *
 * In place: all_reduce passes MPI_IN_PLACE; all_gather's in-place form (send = recv + rank *
 * count) is exactly MPI_Allgather's MPI_IN_PLACE; reduce_scatter_sum's in-place form (recv =
 * send + rank * count) becomes MPI_Reduce_scatter_block with MPI_IN_PLACE, which leaves this
 * rank's block at the start of the buffer, moved then to its place (the other blocks are left
 * unspecified, as the contract says).
 */
#include "parallel/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/error.h"  // with GPT2_HAVE_MPI: mpi.h (C API only) and GPT2_MPI_CHECK

namespace gpt2 {

struct MpiCommunicator::Handles {
  MPI_Comm world = MPI_COMM_NULL;  // a duplicate of MPI_COMM_WORLD, errors returned
  MPI_Comm node = MPI_COMM_NULL;   // the ranks sharing this node's memory
  MPI_Op bf16_sum = MPI_OP_NULL;   // add_bf16 over MPI_UINT16_T
};

namespace {

using Clock = std::chrono::steady_clock;

// Counts passed to one MPI call stay below INT_MAX.
constexpr size_t kMaxChunk = size_t{1} << 30;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }

int checked_count(size_t count, const char* what) {
  GPT2_CHECK(count <= static_cast<size_t>(INT_MAX), what, ": ", count,
             " elements per rank exceed MPI's int counts");
  return static_cast<int>(count);
}

// inout[i] = in[i] + inout[i] in bf16 (MPI's user-function contract: in is the lower rank's).
void bf16_sum(void* in, void* inout, int* count, MPI_Datatype*) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *count; ++i) b[i] = add_bf16(a[i], b[i]);
}

template <typename T>
void all_reduce_chunks(MPI_Comm comm, T* data, size_t count, MPI_Datatype type, MPI_Op op) {
  for (size_t begin = 0; begin < count; begin += kMaxChunk) {
    const int n = static_cast<int>(std::min(kMaxChunk, count - begin));
    GPT2_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + begin, n, type, op, comm));
  }
}

}  // namespace

MpiCommunicator::MpiCommunicator() : handles_(std::make_unique<Handles>()) {
  int initialized = 0, finalized = 0;
  GPT2_MPI_CHECK(MPI_Initialized(&initialized));
  GPT2_MPI_CHECK(MPI_Finalized(&finalized));
  if (finalized) GPT2_FAIL("MPI was already finalized in this process: it cannot start again");
  if (!initialized) {
    int provided = 0;
    GPT2_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
    initialized_here_ = true;
    if (provided < MPI_THREAD_FUNNELED)
      GPT2_FAIL("MPI provides thread level ", provided, ", below MPI_THREAD_FUNNELED");
  }
  GPT2_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &handles_->world));
  GPT2_MPI_CHECK(MPI_Comm_set_errhandler(handles_->world, MPI_ERRORS_RETURN));
  set_ranks();
}

MpiCommunicator::MpiCommunicator(std::unique_ptr<Handles> handles)
    : handles_(std::move(handles)) {
  set_ranks();
}

void MpiCommunicator::set_ranks() {
  GPT2_MPI_CHECK(MPI_Comm_rank(handles_->world, &rank_));
  GPT2_MPI_CHECK(MPI_Comm_size(handles_->world, &world_size_));
  GPT2_MPI_CHECK(MPI_Comm_split_type(handles_->world, MPI_COMM_TYPE_SHARED, rank_,
                                     MPI_INFO_NULL, &handles_->node));
  GPT2_MPI_CHECK(MPI_Comm_rank(handles_->node, &local_rank_));
  GPT2_MPI_CHECK(MPI_Comm_size(handles_->node, &local_size_));
  GPT2_MPI_CHECK(MPI_Op_create(&bf16_sum, /*commute=*/0, &handles_->bf16_sum));
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  const Clock::time_point start = Clock::now();
  auto handles = std::make_unique<Handles>();
  // MPI orders a color's ranks by key, ties by rank in the old communicator.
  GPT2_MPI_CHECK(MPI_Comm_split(handles_->world, color, key, &handles->world));
  GPT2_MPI_CHECK(MPI_Comm_set_errhandler(handles->world, MPI_ERRORS_RETURN));
  record(0, seconds_since(start));
  return std::unique_ptr<Communicator>(new MpiCommunicator(std::move(handles)));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (handles_->bf16_sum != MPI_OP_NULL) MPI_Op_free(&handles_->bf16_sum);
  if (handles_->node != MPI_COMM_NULL) MPI_Comm_free(&handles_->node);
  if (handles_->world != MPI_COMM_NULL) MPI_Comm_free(&handles_->world);
  if (initialized_here_ && MPI_Finalize() != MPI_SUCCESS)
    std::fprintf(stderr, "gpt2: MPI_Finalize failed on rank %d\n", rank_);
}

void MpiCommunicator::all_reduce(float* data, size_t count, ReduceOp op) {
  const Clock::time_point start = Clock::now();
  all_reduce_chunks(handles_->world, data, count, MPI_FLOAT, mpi_op(op));
  record(count * sizeof(float), seconds_since(start));
}

void MpiCommunicator::all_reduce(double* data, size_t count, ReduceOp op) {
  const Clock::time_point start = Clock::now();
  all_reduce_chunks(handles_->world, data, count, MPI_DOUBLE, mpi_op(op));
  record(count * sizeof(double), seconds_since(start));
}

namespace {

// MPI_Reduce_scatter_block of n elements of `type` (element_bytes each), in place when recv is
// this rank's block of send: MPI_IN_PLACE leaves the block at the buffer's start, moved then to
// its place.
void reduce_scatter_elements(MPI_Comm comm, int rank, const void* send, void* recv, int n,
                             MPI_Datatype type, size_t element_bytes, MPI_Op op) {
  const size_t block_bytes = static_cast<size_t>(n) * element_bytes;
  char* buffer = static_cast<char*>(const_cast<void*>(send));
  if (recv == buffer + static_cast<size_t>(rank) * block_bytes) {
    GPT2_MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, buffer, n, type, op, comm));
    if (recv != buffer) std::memmove(recv, buffer, block_bytes);
  } else {
    GPT2_MPI_CHECK(MPI_Reduce_scatter_block(send, recv, n, type, op, comm));
  }
}

}  // namespace

void MpiCommunicator::reduce_scatter_sum(const float* send, float* recv, size_t recv_count) {
  const Clock::time_point start = Clock::now();
  reduce_scatter_elements(handles_->world, rank_, send, recv,
                          checked_count(recv_count, "reduce_scatter_sum"), MPI_FLOAT,
                          sizeof(float), MPI_SUM);
  record(recv_count * world_size_ * sizeof(float), seconds_since(start));
}

void MpiCommunicator::all_reduce_sum_bf16(void* data, size_t count) {
  const Clock::time_point start = Clock::now();
  all_reduce_chunks(handles_->world, static_cast<uint16_t*>(data), count, MPI_UINT16_T,
                    handles_->bf16_sum);
  record(count * sizeof(uint16_t), seconds_since(start));
}

void MpiCommunicator::reduce_scatter_sum_bf16(const void* send, void* recv, size_t recv_count) {
  const Clock::time_point start = Clock::now();
  reduce_scatter_elements(handles_->world, rank_, send, recv,
                          checked_count(recv_count, "reduce_scatter_sum_bf16"), MPI_UINT16_T,
                          sizeof(uint16_t), handles_->bf16_sum);
  record(recv_count * world_size_ * sizeof(uint16_t), seconds_since(start));
}

namespace {

// MPI_Allgather of n elements of `type` (size `element_bytes`), in place when send is this
// rank's block of recv.
void all_gather_elements(MPI_Comm comm, int rank, const void* send, void* recv, int n,
                         MPI_Datatype type, size_t element_bytes) {
  const char* own = static_cast<const char*>(recv) + static_cast<size_t>(rank) * n * element_bytes;
  if (send == own) {
    GPT2_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n, type, comm));
  } else {
    GPT2_MPI_CHECK(MPI_Allgather(send, n, type, recv, n, type, comm));
  }
}

}  // namespace

void MpiCommunicator::all_gather(const float* send, float* recv, size_t send_count) {
  const Clock::time_point start = Clock::now();
  all_gather_elements(handles_->world, rank_, send, recv, checked_count(send_count, "all_gather"),
                      MPI_FLOAT, sizeof(float));
  record(send_count * sizeof(float), seconds_since(start));
}

void MpiCommunicator::all_gather_bytes(const void* send, void* recv, size_t send_bytes) {
  const Clock::time_point start = Clock::now();
  all_gather_elements(handles_->world, rank_, send, recv,
                      checked_count(send_bytes, "all_gather_bytes"), MPI_BYTE, 1);
  record(send_bytes, seconds_since(start));
}

void MpiCommunicator::broadcast(void* data, size_t bytes, int root) {
  const Clock::time_point start = Clock::now();
  GPT2_CHECK(root >= 0 && root < world_size_, "root ", root, " of world size ", world_size_);
  char* bytes_ptr = static_cast<char*>(data);
  for (size_t begin = 0; begin < bytes; begin += kMaxChunk) {
    const int n = static_cast<int>(std::min(kMaxChunk, bytes - begin));
    GPT2_MPI_CHECK(MPI_Bcast(bytes_ptr + begin, n, MPI_BYTE, root, handles_->world));
  }
  record(rank_ == root ? bytes : 0, seconds_since(start));
}

void MpiCommunicator::barrier() {
  const Clock::time_point start = Clock::now();
  GPT2_MPI_CHECK(MPI_Barrier(handles_->world));
  record(0, seconds_since(start));
}

void MpiCommunicator::abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this only satisfies [[noreturn]]
}

}  // namespace gpt2
