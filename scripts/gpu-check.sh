#!/usr/bin/env bash
# GPU check: the `cuda-tests` integration tests, the learner on the GPU beside bare PyTorch,
# `impala train` with `num_gpus = 1` on CartPole-v1, a CPU-built `impala` asked for a GPU, and
# Pong sampled by the machine's CPUs and trained on its GPU. docs/GPU.md has the results.
#
#   scripts/gpu-check.sh build          # where cargo is (no GPU needed): build the binaries and
#                                       # copy them, stripped, to target/gpu-check/
#   scripts/gpu-check.sh run [DIR]      # on the CUDA machine (no cargo needed): run them
#   scripts/gpu-check.sh all            # both, on a CUDA machine that has cargo
#
# On the CUDA machine, libtorch (the same version the binaries were built against, PyPI torch
# 2.11.0) must be on the loader path and PYTHON must name an interpreter with that torch (the
# bare PyTorch bench); the Pong run also needs gymnasium and ale-py there (PYTHONPATH), e.g.
#   LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/torch/lib \
#   PYTHON=/opt/torch/.venv/bin/python3 scripts/gpu-check.sh run
# PONG_SECONDS (default 150) is the Pong run's length. Each phase writes its log under $OUT when
# it is set (else target/gpu-check/out). Exits non-zero when a phase fails; later phases still run.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/target/gpu-check"
tests_bin=impala-learner-tests
bench_bin=impala-learner-cuda-bench

# Prints the executables cargo reports in its JSON messages.
executables() {
    grep -o '"executable":"[^"]*"' | sed 's/^"executable":"//; s/"$//'
}

build() {
    set -e
    cd "$root"
    mkdir -p "$dest"
    local tests bench
    tests="$(cargo test --release -p impala-learner --features cuda-tests --test tests --no-run \
        --message-format=json | executables | tail -n 1)"
    bench="$(cargo bench -p impala-learner --features cuda-tests --bench cuda --no-run \
        --message-format=json | executables | tail -n 1)"
    if [[ -z "$tests" || -z "$bench" ]]; then
        echo "gpu-check: cargo reported no test or bench executable" >&2
        exit 1
    fi
    cp "$tests" "$dest/$tests_bin"
    cp "$bench" "$dest/$bench_bin"
    # The `impala` binary as users build it (CPU only), then with its `cuda` feature.
    cargo build --release -p impala-cli
    cp target/release/impala "$dest/impala-cpu"
    cargo build --release -p impala-cli --features cuda
    cp target/release/impala "$dest/impala"
    # Debug info is most of their size; the check needs none of it.
    strip --strip-debug "$dest"/* 2>/dev/null || true
    ls -l "$dest"
}

# Runs phase NAME's command, its output to the terminal and to $out/NAME.log.
phase() {
    local name=$1
    shift
    echo "== $name: $*"
    local start=$SECONDS
    "$@" 2>&1 | tee "$out/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc after $((SECONDS - start)) s"
    [[ $rc == 0 ]] || status=1
}

run() {
    local dir="${1:-$dest}"
    out="${OUT:-$dir/out}"
    mkdir -p "$out"
    status=0
    for bin in "$tests_bin" "$bench_bin" impala impala-cpu; do
        if [[ ! -x "$dir/$bin" ]]; then
            echo "gpu-check: $dir/$bin is missing; run 'scripts/gpu-check.sh build' first" >&2
            exit 1
        fi
    done
    local python="${PYTHON:-python3}"
    echo "== machine"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null \
        || echo "(nvidia-smi not available)"
    nproc
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    # The CUDA builds link libtorch_cuda.so with --no-as-needed; it must resolve here.
    ldd "$dir/$tests_bin" | grep -E 'libtorch(_cuda|_cpu)?\.so|not found' || true
    phase cuda_tests "$dir/$tests_bin" --test-threads=1 --nocapture cuda::
    phase all_tests env IMPALA_PYTHON="$python" "$dir/$tests_bin" --test-threads=8
    phase bench_impala env IMPALA_PYTHON="$python" "$dir/$bench_bin" --seconds 1
    phase bench_pytorch "$python" "$root/impala-learner/benches/cuda_pytorch.py" --seconds 1
    phase cartpole "$dir/impala" train --set num_gpus=1 --stop-reward 450 --stop-time 120 \
        --run-dir /tmp/gpu-check-cartpole
    # A binary built without the `cuda` feature must refuse the GPU, not train on the CPU.
    phase cpu_binary bash -c "! '$dir/impala-cpu' train --set num_gpus=1 --stop-iters 1 \
        --run-dir /tmp/gpu-check-cpu-binary"
    local cpus
    cpus=$(nproc)
    local runners=$(((cpus - 2) / 2))
    phase pong env IMPALA_PYTHON="$python" "$dir/impala" train "$root/examples/pong-impala-fast.toml" \
        --set num_gpus=1 --set "num_env_runners=$runners" --set num_envs_per_env_runner=32 \
        --set num_envs_per_env_worker=16 --set train_batch_size=640 \
        --set min_time_s_per_iteration=15 --stop-time "${PONG_SECONDS:-150}" \
        --run-dir /tmp/gpu-check-pong
    cp /tmp/gpu-check-pong/progress.csv "$out/pong_progress.csv" 2>/dev/null || true
    echo "== gpu-check finished with status $status"
    return "$status"
}

case "${1:-}" in
    build) build ;;
    run) run "${2:-}" ;;
    all) build && run ;;
    *)
        sed -n '2,18p' "$0"
        exit 2
        ;;
esac
