# syntax=docker/dockerfile:1
# The trainer image: pipeline_project on CUDA. PyPI's torch wheels for Linux bundle their CUDA runtime libraries
# (CUDA 13 for the torch of requirements.lock: see its nvidia-* pins; the host driver must support it); the
# nvidia/cuda base adds what the NVIDIA container runtime expects (NVIDIA_* variables, compat libraries).
# Launched as the trainer pod (PipesK8sClient, JobSet) or, on one host, as the compose code server with a GPU
# reservation (deploy/compose/compose.gpu.yaml). Build from the repository root:
#   docker build -f deploy/images/trainer.Dockerfile -t pipeline-trainer:dev .
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04

FROM ${CUDA_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Ubuntu 24.04's Python 3.12; package versions float with the base image tag, which pins them.
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    DAGSTER_HOME=/opt/dagster/dagster_home
WORKDIR /src
COPY pyproject.toml README.md requirements.lock ./
COPY pipeline_project ./pipeline_project
# The trainer extra only (torch, transformers, MLflow's client, dagster-pipes, nvidia-ml-py for MLflow's GPU metrics),
# at the locked versions. The compose GPU override, where this image also serves Dagster, sets EXTRAS=trainer,stack.
# Every path compose or Kubernetes mounts is made here and owned by the runtime user (else Docker creates it as root).
ARG EXTRAS=trainer
RUN pip install -c requirements.lock "./[${EXTRAS}]" \
    && useradd --create-home --uid 10001 pipeline \
    && mkdir -p /opt/dagster/dagster_home /opt/dagster/dagster_home/storage /opt/dagster/app /scratch \
    && chown -R pipeline /opt/dagster /scratch
WORKDIR /scratch
USER 10001
# The launchers set the command (torchrun ... -m pipeline_project.training.entrypoint --config-env ...).
ENTRYPOINT []
CMD ["python", "-m", "pipeline_project.training.entrypoint", "--help"]
