# syntax=docker/dockerfile:1.7
# The slurmd image: a Slurm worker plus the slurm-sidecars worker agent, with
# `slurm-sidecars drain-hook` on PATH for the pod's preStop hook.
#
#   make images                     (here: podman, on a Debian sid base made with debootstrap)
#   docker build -f images/slurmd.Dockerfile -t slurm-sidecars/slurmd:0.1.0 .
#
# BASE_IMAGE picks what the sidecars are added to. The default is the Debian stage below (sid:
# Slurm 26.05, the release Slinky's chart defaults to); to add them to the Slinky image you already
# run instead:
#
#   docker build -f images/slurmd.Dockerfile \
#     --build-arg BASE_IMAGE=ghcr.io/slinkyproject/slurmd:<your tag> -t my/slurmd:<tag> .
#
# DEBIAN_IMAGE is the Debian the default stage starts from; `make images` passes the one it made.
# The sidecars run in a virtualenv of the base's own python3 (images/install-sidecars.sh says why).
ARG DEBIAN_IMAGE=docker.io/library/debian:sid-slim
ARG BASE_IMAGE=slurmd-debian

# ---------------------------------------------------------------------------------------------
# The default base: Debian's Slurm, with fixed ids for slurm (401) and munge (402) so that files on
# shared volumes mean the same in every container, and the python3 the sidecars run on.
FROM ${DEBIAN_IMAGE} AS slurmd-debian
RUN groupadd --system --gid 401 slurm \
 && useradd --system --uid 401 --gid 401 --home-dir /var/lib/slurm --shell /usr/sbin/nologin slurm \
 && groupadd --system --gid 402 munge \
 && useradd --system --uid 402 --gid 402 --home-dir /nonexistent --shell /usr/sbin/nologin munge \
 && apt-get update \
 && apt-get install -y --no-install-recommends \
      slurmd=26.05.5-1 \
      slurm-client=26.05.5-1 \
      munge=0.5.18-1 \
      python3=3.14.8-1 \
      python3-venv=3.14.8-1 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && install -d -m 0755 /var/spool/slurmd /var/log/slurm /run/slurm
# configless: slurmd fetches slurm.conf from slurmctld (SlurmctldParameters=enable_configless) and
# registers itself as a dynamic node (-Z) named after the pod
CMD ["slurmd", "-D", "-Z"]

# ---------------------------------------------------------------------------------------------
# The image: the chosen base plus the sidecars, built from this repository (bind-mounted, so no
# source is left in a layer) with pip's downloads cached between builds. slurmd itself runs as
# root (it starts jobs as their users); the agent runs as the SlurmUser (uid 401): Slurm only
# takes node updates from root or it.
FROM ${BASE_IMAGE} AS slurmd
LABEL org.opencontainers.image.title="slurmd with slurm-sidecars" \
      org.opencontainers.image.description="Slurm worker with the slurm-sidecars worker agent and drain hook" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"
# the digest of the sources (scripts/images.sh passes it): podman's build cache does not look into
# a bind mount, so without it a changed source would reuse the old layer (BuildKit needs no help)
ARG SOURCE_SHA=unset
RUN --mount=type=bind,target=/src \
    --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    SOURCE_SHA=${SOURCE_SHA} sh /src/images/install-sidecars.sh /src /src/images/constraints.txt
ENV PATH=/opt/slurm-sidecars/bin:$PATH
# the agent's socket dir (the drain hook connects there) and the dcgm-exporter job-mapping dir
RUN install -d -o 401 -g 401 -m 0755 /run/slurm-sidecars /var/lib/dcgm-job-mapping
