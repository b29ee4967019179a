# syntax=docker/dockerfile:1.7
# The slurmctld image: Slurm's controller plus the slurm-sidecars config-sync and control plane.
#
#   docker build -f images/slurmctld.Dockerfile -t slurm-sidecars/slurmctld:0.1.0 .
#
# BASE_IMAGE picks what the sidecars are added to. The default is the Debian 12 Slurm stage below;
# to add them to the Slinky image you already run instead:
#
#   docker build -f images/slurmctld.Dockerfile \
#     --build-arg BASE_IMAGE=ghcr.io/slinkyproject/slurmctld:<your tag> -t my/slurmctld:<tag> .
#
# The sidecars bring their own Python (under /opt/slurm-sidecars), so they do not depend on the
# base's distribution or its Python; the base only needs glibc, a shell and Slurm's commands.
ARG BASE_IMAGE=slurmctld-debian

FROM ghcr.io/astral-sh/uv:0.5.11 AS uv

# ---------------------------------------------------------------------------------------------
# The sidecars: a standalone CPython and a virtualenv with the wheel built from this repository.
FROM debian:12.11-slim AS sidecars
COPY --from=uv /uv /usr/local/bin/uv
ENV UV_PYTHON_INSTALL_DIR=/opt/slurm-sidecars/python \
    UV_PYTHON_PREFERENCE=only-managed \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_NO_CACHE=1
WORKDIR /src
# exactly what the wheel build needs (pyproject, its readme, the package): nothing else is shipped
COPY pyproject.toml README.md ./
COPY sidecars ./sidecars
COPY images/constraints.txt /tmp/constraints.txt
RUN uv python install 3.12.8 \
 && uv venv --python 3.12.8 /opt/slurm-sidecars/venv \
 && uv build --wheel --out-dir /tmp/dist . \
 && uv pip install --python /opt/slurm-sidecars/venv/bin/python --constraint /tmp/constraints.txt /tmp/dist/*.whl \
 && mkdir -p /opt/slurm-sidecars/bin \
 && ln -s /opt/slurm-sidecars/venv/bin/slurm-sidecars /opt/slurm-sidecars/bin/slurm-sidecars \
 && /opt/slurm-sidecars/bin/slurm-sidecars --help >/dev/null

# ---------------------------------------------------------------------------------------------
# The default base: Debian 12's Slurm 22.05 (the release our tests run against), with fixed ids
# for slurm (401) and munge (402) so that files on shared volumes mean the same in every container.
FROM debian:12.11-slim AS slurmctld-debian
RUN groupadd --system --gid 401 slurm \
 && useradd --system --uid 401 --gid 401 --home-dir /var/lib/slurm --shell /usr/sbin/nologin slurm \
 && groupadd --system --gid 402 munge \
 && useradd --system --uid 402 --gid 402 --home-dir /nonexistent --shell /usr/sbin/nologin munge \
 && apt-get update \
 && apt-get install -y --no-install-recommends \
      slurmctld=22.05.8-4+deb12u3 \
      slurm-client=22.05.8-4+deb12u3 \
      munge=0.5.15-2+deb12u1 \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o slurm -g slurm -m 0755 /var/spool/slurmctld /var/log/slurm /etc/slurm
CMD ["slurmctld", "-D", "-f", "/etc/slurm/slurm.conf"]

# ---------------------------------------------------------------------------------------------
# The image: the chosen base plus the sidecars. The sidecars run as the SlurmUser (uid 401), not
# root: Slurm only takes `scontrol reconfigure` and node updates from root or its SlurmUser.
FROM ${BASE_IMAGE} AS slurmctld
LABEL org.opencontainers.image.title="slurmctld with slurm-sidecars" \
      org.opencontainers.image.description="Slurm controller with config-sync and the control plane" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"
COPY --from=sidecars /opt/slurm-sidecars /opt/slurm-sidecars
ENV PATH=/opt/slurm-sidecars/bin:$PATH
# config-sync's state dir (the last good set) and the directory it stages Slurm's files in belong
# to the sidecars' user
RUN install -d -o 401 -g 401 -m 0750 /var/lib/slurm-sidecars \
 && install -d -o 401 -g 401 -m 0755 /etc/slurm-sidecars /run/slurm-sidecars
