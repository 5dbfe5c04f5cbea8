# syntax=docker/dockerfile:1
# ratelimitd: a multi-stage build. The builder compiles a release binary (the protos are compiled
# by protox, so no protoc is needed); the runtime image is Debian slim with a non-root user.

FROM rust:1-slim-bookworm AS build
WORKDIR /src
# Sources only: the build context never needs target/ or .git.
COPY Cargo.toml Cargo.lock build.rs ./
# The workspace lists the benchmark tools' and the tests' members: their manifests must exist, their
# sources are never built.
COPY bench/Cargo.toml ./bench/
COPY testkit/Cargo.toml ./testkit/
# h2 with its one patch (vendor/h2/PATCHED.md), through [patch.crates-io].
COPY vendor ./vendor
COPY proto ./proto
COPY lua ./lua
COPY src ./src
COPY benches ./benches
COPY examples ./examples
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin ratelimitd \
    && install -m 0755 target/release/ratelimitd /usr/local/bin/ratelimitd

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin ratelimitd \
    && mkdir -p /etc/ratelimitd
COPY --from=build /usr/local/bin/ratelimitd /usr/local/bin/ratelimitd
# envoyproxy/ratelimit's image has no entrypoint: its Deployments run `/bin/ratelimit`, which
# here is ratelimitd run bare, configured by that project's environment variables.
RUN ln -s /usr/local/bin/ratelimitd /bin/ratelimit
COPY examples/config.yaml /etc/ratelimitd/config.yaml
USER ratelimitd
# No RATELIMITD_* variables are set here: they would win over envoyproxy/ratelimit's
# (GRPC_PORT, ...) in Deployments that run /bin/ratelimit.
EXPOSE 8081 8080
# gRPC health (grpc.health.v1) asked by the binary itself: no probe tool needed in the image.
HEALTHCHECK --interval=5s --timeout=3s --start-period=5s --retries=3 \
    CMD ["ratelimitd", "health", "--grpc-addr", "127.0.0.1:8081"]
ENTRYPOINT ["/usr/local/bin/ratelimitd"]
CMD ["serve", "--config", "/etc/ratelimitd"]
