# gridkeep: build the single binary with Bun, run it alone on a slim base.
# Not built by CI (the build machine has no container engine); docs/deployment.md "Docker" says so.

FROM oven/bun:1.4.5 AS build
WORKDIR /src
COPY package.json bun.lock ./
RUN bun install --frozen-lockfile
COPY . .
RUN bun run build && ./dist/gridkeep version

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --home-dir /var/lib/gridkeep --shell /usr/sbin/nologin gridkeep \
 && mkdir -p /var/lib/gridkeep && chown gridkeep:gridkeep /var/lib/gridkeep && chmod 0700 /var/lib/gridkeep
COPY --from=build /src/dist/gridkeep /usr/local/bin/gridkeep
USER gridkeep
WORKDIR /var/lib/gridkeep
ENV DATA_DIR=/var/lib/gridkeep HOST=0.0.0.0 PORT=8080
VOLUME ["/var/lib/gridkeep"]
EXPOSE 8080
# The server drains in-flight requests on SIGTERM (SHUTDOWN_TIMEOUT_SECONDS); run with
# `--stop-timeout 45` so Docker does not kill it first.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/gridkeep"]
CMD ["serve"]
