# syntax=docker/dockerfile:1
# The user-code image: pipeline_project with CPU-only PyTorch. It runs the Dagster code server, the webserver
# and the daemon (compose), the runs K8sRunLauncher starts, and the MLflow server. The trainer has its own
# CUDA image (trainer.Dockerfile). Build from the repository root:
#   docker build -f deploy/images/user-code.Dockerfile -t pipeline-user-code:dev .
ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# CPU wheels first, so the package's install finds torch satisfied and never pulls the CUDA build (~4 GB)
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
WORKDIR /src
COPY pyproject.toml README.md requirements.lock ./
RUN pip install --index-url "${TORCH_INDEX_URL}" -c requirements.lock torch
COPY pipeline_project ./pipeline_project
# the Dagster code location, its webserver and daemon, the MLflow server ([stack]), and the trainer for
# PipesSubprocessClient runs ([trainer]), at the versions of requirements.lock (torch==X matches the CPU build X+cpu)
RUN pip install -c requirements.lock "./[trainer,stack]"

FROM python:${PYTHON_VERSION}-slim-bookworm
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    DAGSTER_HOME=/opt/dagster/dagster_home
# every path compose mounts is made here and owned by the runtime user (else Docker creates it as root)
RUN useradd --create-home --uid 10001 pipeline \
    && mkdir -p /opt/dagster/dagster_home /opt/dagster/dagster_home/storage /opt/dagster/app \
    && chown -R pipeline /opt/dagster
WORKDIR /opt/dagster/app
USER 10001
EXPOSE 4000
CMD ["dagster", "code-server", "start", "-h", "0.0.0.0", "-p", "4000", "-m", "pipeline_project.definitions"]
