#!/usr/bin/env bash
# Data-parallel gpt2-train on several nodes under Slurm: one task (rank) per GPU, started by srun
# through PMIx, so every rank learns its rank, the world size and its rank on its node (which
# picks its GPU) from MPI. Submit from the repository root after `make`; arguments after the
# script's name go to gpt2-train, and --out must be on a file system every node sees:
#
#   sbatch --nodes=4 tools/slurm_train.sh --model d12 --total-batch-size 524288 --out runs/d12
#
# The job continues from the latest checkpoint in --out (--resume), so a requeued or resubmitted
# job picks up where the last one stopped; --signal below gives every rank SIGTERM two minutes
# before the time limit, and the ranks stop after the same step with a checkpoint.
#
# On GPUs the ranks reduce over NCCL (one task per GPU). On CPUs: DEVICE=cpu, a few tasks per
# node, OMP_NUM_THREADS cores each, e.g.
#   DEVICE=cpu sbatch --nodes=4 --ntasks-per-node=2 --cpus-per-task=32 --gpus-per-node=0 \
#     tools/slurm_train.sh --model d12 --out runs/d12-cpu
#
# Environment (exported variables reach every task; srun exports all by default):
#   DEVICE        cuda | cpu                           (default cuda)
#   BINARY        the trainer                           (default ./build/gpt2-train)
#   MPI_PLUGIN    srun's MPI plugin: `srun --mpi=list` shows this cluster's (default pmix;
#                 pmi2 works too)
#   NCCL_*        NCCL's settings, passed through as they are; see README, "Several processes"
#SBATCH --job-name=gpt2-train
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8
#SBATCH --time=12:00:00
#SBATCH --signal=TERM@120
#SBATCH --output=%x-%j.out
set -euo pipefail

DEVICE=${DEVICE:-cuda}
BINARY=${BINARY:-./build/gpt2-train}
MPI_PLUGIN=${MPI_PLUGIN:-pmix}

# NCCL across nodes: name the interfaces and adapters when NCCL's own choice is wrong, e.g.
#   export NCCL_SOCKET_IFNAME=ib0          bootstrap and socket traffic (eth0, ^docker0,lo, ...)
#   export NCCL_IB_HCA=mlx5                InfiniBand / RoCE adapters (prefix match)
#   export NCCL_IB_GID_INDEX=3             RoCE v2
#   export NCCL_DEBUG=INFO                 each rank reports its transports on stderr
# NVLink SHARP (NVLS, multicast) stays off unless the caller turns it on: it needs the fabric
# manager's multicast support and reserves memory on every GPU.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
# A rank's CPU threads: the cores Slurm gave its task.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}

echo "gpt2-train: ${SLURM_JOB_NUM_NODES:-?} node(s) x ${SLURM_NTASKS_PER_NODE:-?} task(s): " \
     "$(scontrol show hostnames "${SLURM_JOB_NODELIST:-}" 2>/dev/null | tr '\n' ' ')"
# --kill-on-bad-exit: a task that dies ends the step at once (gpt2-train's own errors abort the
# job through MPI anyway). Each task sees every GPU of its node and takes its node rank's.
exec srun --mpi="$MPI_PLUGIN" --kill-on-bad-exit=1 --cpu-bind=cores \
  "$BINARY" --device "$DEVICE" --resume "$@"
