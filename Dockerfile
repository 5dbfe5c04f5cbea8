# syntax=docker/dockerfile:1
# ratelimitd: a multi-stage build. The builder compiles a release binary (the protos are compiled
# by protox, so no protoc is needed); the runtime image is Debian slim with a non-root user.

FROM rust:1-slim-bookworm AS build
WORKDIR /src
# Sources only: the build context never needs target/ or .git.
COPY Cargo.toml Cargo.lock build.rs ./
# The workspace lists the benchmark tools' member: its manifest must exist, its sources are never built.
COPY bench/Cargo.toml ./bench/
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
COPY examples/config.yaml /etc/ratelimitd/config.yaml
USER ratelimitd
# Every flag also reads an environment variable; these are the defaults, spelled out.
ENV RATELIMITD_CONFIG=/etc/ratelimitd \
    RATELIMITD_GRPC_ADDR=0.0.0.0:8081 \
    RATELIMITD_HTTP_ADDR=0.0.0.0:8080
EXPOSE 8081 8080
# gRPC health (grpc.health.v1) asked by the binary itself: no probe tool needed in the image.
HEALTHCHECK --interval=5s --timeout=3s --start-period=5s --retries=3 \
    CMD ["ratelimitd", "health", "--grpc-addr", "127.0.0.1:8081"]
ENTRYPOINT ["/usr/local/bin/ratelimitd"]
CMD ["serve"]
