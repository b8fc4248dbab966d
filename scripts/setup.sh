#!/usr/bin/env bash
# Install everything the project needs on a fresh machine: the Python venv and the Maven jars.
# Re-running is cheap: uv, pip and Maven reuse their caches (~/.cache/uv, ~/.cache/pip, ~/.m2), but never need them.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the stack runs: PostgreSQL (the dedup index and Dagster's storage), Prometheus. Installed only when
# missing.
need_apt=()
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || command -v postgres >/dev/null || need_apt+=(postgresql)
# Prometheus and its Pushgateway (`stack up --services prometheus`, pipeline_project_tests/observability)
command -v prometheus >/dev/null || need_apt+=(prometheus)
command -v prometheus-pushgateway >/dev/null || need_apt+=(prometheus-pushgateway)
# Headless Chromium and its WebDriver: the browser test of the Dagster and MLflow UIs (pipeline_project_tests/ui)
command -v chromium >/dev/null || need_apt+=(chromium)
command -v chromedriver >/dev/null || need_apt+=(chromium-driver)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "==> installing Debian packages: ${need_apt[*]}"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
# Every role ([all]: trainer, dagster, stack, dev) at the versions of requirements.lock (scripts/lock.sh writes it),
# installed by uv, itself pinned by the lock; a warm run changes nothing and takes seconds.
echo "==> installing Python dependencies (first run downloads torch, a few GB)"
uv_pin=$(grep -m1 '^uv==' requirements.lock)
[ -x .venv/bin/uv ] && [ "$(.venv/bin/uv --version | cut -d' ' -f2)" = "${uv_pin#uv==}" ] ||
  .venv/bin/python -m pip install --quiet --progress-bar off "$uv_pin"
.venv/bin/uv pip install --quiet --python .venv/bin/python -c requirements.lock -e ".[all]"
# The wheel holds pipeline_project alone; the suite and the fault harness are imported from this checkout
purelib=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$PWD" >"$purelib/pipeline_project_checkout.pth"
# Bytecode for every installed module: uv writes none, and where PYTHONDONTWRITEBYTECODE is set (CI) Python would
# compile torch, Dagster and MLflow from source in every process it starts (~10 s each on 2 cores). Once per lock.
stamp=.venv/.bytecode-$(sha256sum requirements.lock | cut -c1-16)
if [ ! -e "$stamp" ]; then
  echo "==> compiling the installed packages' bytecode"
  .venv/bin/python -m compileall -q -j 0 "$purelib" \
    >/dev/null 2>&1 || true  # a few vendored files are not Python 3 (tests of other tools): not ours to fix
  rm -f .venv/.bytecode-* && touch "$stamp"
fi

for component in kafka s3proxy; do
  if [ ! -d "deploy/local/$component/target/jars" ]; then
    echo "==> fetching $component jars from Maven Central"
    (cd "deploy/local/$component" && mvn -q -B dependency:copy-dependencies)
  fi
done
# Strimzi CRD schemas for the deploy/k8s checks (pipeline_project_tests/deploy), generated from Strimzi's model
# classes on Maven Central (deploy/k8s/schemas/pom.xml says why this way). Once; build/ is git-ignored.
STRIMZI_CRDS=build/strimzi/crds
if [ ! -f "$STRIMZI_CRDS/.complete" ]; then
  echo "==> generating Strimzi 0.50.0 CRD schemas into $STRIMZI_CRDS"
  mvn -q -B -f deploy/k8s/schemas/pom.xml dependency:copy-dependencies
  mkdir -p "$STRIMZI_CRDS"
  crdgen=(java -cp 'build/strimzi/jars/*' io.strimzi.crdgenerator.CrdGenerator
    --target-kube 1.16+ --crd-api-version v1 --storage-version v1beta2 --yaml)
  "${crdgen[@]}" --api-versions v1beta2,v1 \
    io.strimzi.api.kafka.model.kafka.Kafka="$STRIMZI_CRDS/040-Crd-kafka.yaml" \
    io.strimzi.api.kafka.model.nodepool.KafkaNodePool="$STRIMZI_CRDS/045-Crd-kafkanodepool.yaml" >/dev/null
  "${crdgen[@]}" --api-versions v1alpha1,v1beta1,v1beta2,v1 \
    io.strimzi.api.kafka.model.topic.KafkaTopic="$STRIMZI_CRDS/043-Crd-kafkatopic.yaml" \
    io.strimzi.api.kafka.model.user.KafkaUser="$STRIMZI_CRDS/044-Crd-kafkauser.yaml" >/dev/null
  touch "$STRIMZI_CRDS/.complete"
fi
# prometheus-operator's CRDs (PodMonitor, ServiceMonitor, PrometheusRule) for the deploy/k8s/monitoring checks:
# the Go module proxy serves the operator's module, whose example/prometheus-operator-crd holds them. Once.
PROM_CRDS=build/prometheus-operator/crds
PROM_OPERATOR=github.com/prometheus-operator/prometheus-operator@v0.85.0
if [ ! -f "$PROM_CRDS/.complete" ]; then
  echo "==> fetching $PROM_OPERATOR CRDs into $PROM_CRDS"
  gomod=$(mktemp -d)
  dir=$(cd "$gomod" && GOPATH="$gomod" GOFLAGS=-mod=mod go mod download -json "$PROM_OPERATOR" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
  mkdir -p "$PROM_CRDS"
  for kind in podmonitors servicemonitors prometheusrules; do
    cp "$dir/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" "$PROM_CRDS/"
  done
  chmod -R u+w "$gomod" && rm -rf "$gomod"
  chmod u+w "$PROM_CRDS"/*.yaml
  touch "$PROM_CRDS/.complete"
fi
# CloudNativePG's CRDs (Cluster, ScheduledBackup) and its Barman Cloud Plugin's (ObjectStore) for the
# deploy/k8s/postgres checks: the Go module proxy serves both modules, whose config/crd/bases hold them. Once.
CNPG_CRDS=build/cloudnative-pg/crds
if [ ! -f "$CNPG_CRDS/.complete" ]; then
  echo "==> fetching CloudNativePG 1.29.0 and Barman Cloud Plugin 0.15.0 CRDs into $CNPG_CRDS"
  gomod=$(mktemp -d)
  mkdir -p "$CNPG_CRDS"
  for wanted in "github.com/cloudnative-pg/cloudnative-pg@v1.29.0 postgresql.cnpg.io_clusters postgresql.cnpg.io_scheduledbackups" \
    "github.com/cloudnative-pg/plugin-barman-cloud@v0.15.0 barmancloud.cnpg.io_objectstores"; do
    read -r module crds <<<"$wanted"
    dir=$(cd "$gomod" && GOPATH="$gomod" GOFLAGS=-mod=mod go mod download -json "$module" \
      | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
    for crd in $crds; do cp "$dir/config/crd/bases/$crd.yaml" "$CNPG_CRDS/"; done
  done
  chmod -R u+w "$gomod" && rm -rf "$gomod"
  chmod u+w "$CNPG_CRDS"/*.yaml
  touch "$CNPG_CRDS/.complete"
fi
echo "==> setup done"
