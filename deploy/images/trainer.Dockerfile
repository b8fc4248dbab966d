# syntax=docker/dockerfile:1
# The trainer image: pipeline_project on CUDA. The CUDA libraries are the ones torch loads: the nvidia-* wheels of
# requirements.lock (CUDA 13.2 for torch 2.15.0), installed with it. The base carries none of its own (an
# nvidia/cuda runtime or cudnn base would add gigabytes of libraries torch never opens); the driver comes from the
# host through the NVIDIA container runtime, for the capabilities below. NVIDIA_REQUIRE_CUDA is the lock's CUDA:
# the runtime refuses to start the container on a driver too old for it (CUDA 13.2: R580 or newer) instead of torch
# finding no GPU. pipeline_project_tests/deploy/test_compose_and_images.py keeps it equal to the lock's.
# Launched as the trainer pod (PipesK8sClient, JobSet) or, on one host, as the compose code server with a GPU
# reservation (deploy/compose/compose.gpu.yaml). Build from the repository root:
#   docker build -f deploy/images/trainer.Dockerfile -t pipeline-trainer:dev .
ARG BASE_IMAGE=ubuntu:24.04

FROM ${BASE_IMAGE}
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    NVIDIA_REQUIRE_CUDA="cuda>=13.2"
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Ubuntu 24.04's Python 3.12; package versions float with the base image tag, which pins them.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates python3 python3-venv \
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
