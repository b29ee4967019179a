# syntax=docker/dockerfile:1.7
# The slurmctld image: Slurm's controller plus the slurm-sidecars config-sync and control plane.
#
#   make images                     (here: podman, on a Debian sid base made with debootstrap)
#   docker build -f images/slurmctld.Dockerfile -t slurm-sidecars/slurmctld:0.1.0 .
#
# BASE_IMAGE picks what the sidecars are added to. The default is the Debian stage below (sid:
# Slurm 26.05, the release Slinky's chart defaults to); to add them to the Slinky image you already
# run instead:
#
#   docker build -f images/slurmctld.Dockerfile \
#     --build-arg BASE_IMAGE=ghcr.io/slinkyproject/slurmctld:<your tag> -t my/slurmctld:<tag> .
#
# DEBIAN_IMAGE is the Debian the default stage starts from; `make images` passes the one it made.
# The sidecars run in a virtualenv of the base's own python3 (images/install-sidecars.sh says why).
ARG DEBIAN_IMAGE=docker.io/library/debian:sid-slim
ARG BASE_IMAGE=slurmctld-debian

# ---------------------------------------------------------------------------------------------
# The default base: Debian's Slurm, with fixed ids for slurm (401) and munge (402) so that files on
# shared volumes mean the same in every container, and the python3 the sidecars run on. slurmdbd is
# there for config-sync in slurmdbd's pod (manifests/overlays/accounting): a throwaway slurmdbd reads
# each candidate slurmdbd.conf before it is staged.
FROM ${DEBIAN_IMAGE} AS slurmctld-debian
RUN groupadd --system --gid 401 slurm \
 && useradd --system --uid 401 --gid 401 --home-dir /var/lib/slurm --shell /usr/sbin/nologin slurm \
 && groupadd --system --gid 402 munge \
 && useradd --system --uid 402 --gid 402 --home-dir /nonexistent --shell /usr/sbin/nologin munge \
 && apt-get update \
 && apt-get install -y --no-install-recommends \
      slurmctld=26.05.5-1 \
      slurmdbd=26.05.5-1 \
      slurm-client=26.05.5-1 \
      munge=0.5.18-1 \
      python3=3.14.8-1 \
      python3-venv=3.14.8-1 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && install -d -o slurm -g slurm -m 0755 /var/spool/slurmctld /var/log/slurm /etc/slurm
CMD ["slurmctld", "-D", "-f", "/etc/slurm/slurm.conf"]

# ---------------------------------------------------------------------------------------------
# The image: the chosen base plus the sidecars, built from this repository (bind-mounted, so no
# source is left in a layer) with pip's downloads cached between builds. The sidecars run as the
# SlurmUser (uid 401), not root: Slurm only takes `scontrol reconfigure` and node updates from
# root or its SlurmUser.
FROM ${BASE_IMAGE} AS slurmctld
LABEL org.opencontainers.image.title="slurmctld with slurm-sidecars" \
      org.opencontainers.image.description="Slurm controller with config-sync and the control plane" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"
# the digest of the sources (scripts/images.sh passes it): podman's build cache does not look into
# a bind mount, so without it a changed source would reuse the old layer (BuildKit needs no help)
ARG SOURCE_SHA=unset
RUN --mount=type=bind,target=/src \
    --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    SOURCE_SHA=${SOURCE_SHA} sh /src/images/install-sidecars.sh /src /src/images/constraints.txt \
 && install -m 0755 /src/images/slurmctld-entrypoint.sh /usr/local/bin/slurmctld-entrypoint
ENV PATH=/opt/slurm-sidecars/bin:$PATH
# `slurmctld-entrypoint slurmctld -D -f FILE` (as the manifests and the compose stack start it):
# `slurm-sidecars config-guard` puts the last verified set back if config-sync's set on disk was
# never verified, then it execs slurmctld. The base's own entrypoint and CMD stay as they are.
# config-sync's state dir (the last good set) and the directory it stages Slurm's files in belong
# to the sidecars' user (config-sync wants --target to exist: a named volume is seeded from it),
# and so does slurmctld's pid dir (a container's own, where no volume is
# mounted: podman 4.3 cannot give a tmpfs an owner)
RUN install -d -o 401 -g 401 -m 0750 /var/lib/slurm-sidecars \
 && install -d -o 401 -g 401 -m 0755 /etc/slurm-sidecars /etc/slurm-sidecars/slurm /run/slurm-sidecars /run/slurmctld
