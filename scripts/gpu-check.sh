#!/usr/bin/env bash
# GPU check of impala-learner: the `cuda-tests` integration tests and the GPU benches, in one go.
#
#   scripts/gpu-check.sh build          # where cargo is (no GPU needed): build the binaries and
#                                       # copy them, stripped, to target/gpu-check/
#   scripts/gpu-check.sh run [DIR]      # on the CUDA machine (no cargo needed): run them
#   scripts/gpu-check.sh all            # both, on a CUDA machine that has cargo
#
# On the CUDA machine, libtorch (the same version the binaries were built against, PyPI torch
# 2.11.0) must be on the loader path, e.g.
#   LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/torch/lib scripts/gpu-check.sh run
# Results: test output on stdout; criterion's reports under $OUT/criterion when $OUT is set,
# else target/gpu-check/criterion. Exits non-zero when a test fails (the benches still run).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/target/gpu-check"
tests_bin=impala-learner-tests
bench_bin=impala-learner-bench

# Prints the executables cargo reports in its JSON messages.
executables() {
    grep -o '"executable":"[^"]*"' | sed 's/^"executable":"//; s/"$//'
}

build() {
    cd "$root"
    mkdir -p "$dest"
    local tests bench
    tests="$(cargo test --release -p impala-learner --features cuda-tests --test tests --no-run \
        --message-format=json | executables | tail -n 1)"
    bench="$(cargo bench -p impala-learner --features cuda-tests --bench learner --no-run \
        --message-format=json | executables | tail -n 1)"
    if [[ -z "$tests" || -z "$bench" ]]; then
        echo "gpu-check: cargo reported no test or bench executable" >&2
        exit 1
    fi
    cp "$tests" "$dest/$tests_bin"
    cp "$bench" "$dest/$bench_bin"
    # Debug info is most of their size; the check needs none of it.
    strip --strip-debug "$dest/$tests_bin" "$dest/$bench_bin" 2>/dev/null || true
    ls -l "$dest/$tests_bin" "$dest/$bench_bin"
}

run() {
    local dir="${1:-$dest}"
    for bin in "$tests_bin" "$bench_bin"; do
        if [[ ! -x "$dir/$bin" ]]; then
            echo "gpu-check: $dir/$bin is missing; run 'scripts/gpu-check.sh build' first" >&2
            exit 1
        fi
    done
    echo "== machine"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null \
        || echo "(nvidia-smi not available)"
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    # The binaries link libtorch_cuda.so with --no-as-needed; it must resolve here.
    if command -v ldd >/dev/null; then
        ldd "$dir/$tests_bin" | grep -E 'libtorch(_cuda|_cpu)?\.so|not found' || true
    fi
    local status=0
    echo "== tests (CPU and CUDA bodies)"
    "$dir/$tests_bin" --test-threads=1 || status=$?
    echo "== CUDA tests again, with their output (device count)"
    "$dir/$tests_bin" --test-threads=1 --nocapture cuda:: || status=$?
    echo "== benches"
    local criterion_home="${OUT:-$dir}/criterion"
    mkdir -p "$criterion_home"
    CRITERION_HOME="$criterion_home" "$dir/$bench_bin" --bench --measurement-time 3 --warm-up-time 1 \
        || status=$?
    echo "== gpu-check finished with status $status"
    return "$status"
}

case "${1:-}" in
    build) build ;;
    run) run "${2:-}" ;;
    all) build && run ;;
    *)
        sed -n '2,14p' "$0"
        exit 2
        ;;
esac
